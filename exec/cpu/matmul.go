package cpu

import (
	"fmt"

	"lagc/exec/cpu/internal/vec"
	"lagc/quant"
)

// Kernels names the vector kernels under the matrix products and the
// attention on this machine: avx512, avx2-fma or gonum (see vec).
func Kernels() string { return vec.Kernels() }

// MatMul computes y = x w^T: x is [T,K], w is [N,K] (a weight in HF layout,
// row-major), y is [T,N]. Work is split over blocks of N and T; every
// element is one dot product summed in a fixed order, so y[t] does not
// depend on T or on the thread count.
func MatMul(y, x, w []float32, T, K, N int) error {
	if err := checkMatMul("MatMul", y, x, w, T, K, N); err != nil {
		return err
	}
	matmul(y, x, MatrixF32(w, N, K), T, K, N, true)
	return nil
}

// MatMulMatrix is MatMul with w [N,K] in any stored type: y = x w^T
// computed on w's rows converted to float32 a block at a time, bitwise
// equal to MatMul on the converted w.
func MatMulMatrix(y, x []float32, w *Matrix, T int) error {
	const op = "MatMulMatrix"
	K, N, err := matrixDims(op, w, T)
	if err != nil {
		return err
	}
	if err := checkLen(op, "x", len(x), T, K); err != nil {
		return err
	}
	if err := checkLen(op, "y", len(y), T, N); err != nil {
		return err
	}
	matmul(y, x, w, T, K, N, true)
	return nil
}

// matrixDims checks the matrix and token count of a matrix op and returns
// the matrix's columns K and rows N.
func matrixDims(op string, w *Matrix, T int) (K, N int, err error) {
	if w == nil {
		return 0, 0, fmt.Errorf("cpu.%s: no matrix", op)
	}
	K, N = w.Cols, w.Rows
	if err := checkDims(op, dim{"T", T}, dim{"K", K}, dim{"N", N}); err != nil {
		return 0, 0, err
	}
	return K, N, w.check(op, "w", N, K)
}

func checkMatMul(op string, y, x, w []float32, T, K, N int) error {
	if err := checkDims(op, dim{"T", T}, dim{"K", K}, dim{"N", N}); err != nil {
		return err
	}
	if err := checkLen(op, "x", len(x), T, K); err != nil {
		return err
	}
	if err := checkLen(op, "w", len(w), N, K); err != nil {
		return err
	}
	return checkLen(op, "y", len(y), T, N)
}

// Block sizes: a block of w rows stays in L2 while every token of a block of
// tokens passes over it.
const (
	matmulRowBytes = 256 << 10 // w bytes per block
	matmulTokens   = 32
)

func matmul(y, x []float32, w *Matrix, T, K, N int, parallel bool) {
	blocked(x, T, K, N, []*Matrix{w}, parallel, func(t, n0, n1 int, p [][]float32) {
		copy(y[t*N+n0:t*N+n1], p[0])
	})
}

// blocked runs epi(t, n0, n1, p) for every token t of x [T,K] and block
// [n0, n1) of output columns, where p[i][j] is the dot product of x's row
// t with row n0+j of ws[i] (at most maxFused weights). Each product is
// summed by vec in an order that depends on K alone: a product is the
// same for any T, thread count or block split, and wherever the rows live.
// bf16 rows are multiplied in place where vec has a kernel for them;
// rows in other stored types are converted into scratch once per block of
// columns and block of tokens. Both give bitwise the products of the
// rows converted to float32. Columns are blocked so that a block's
// weight rows stay in L2 while a block of tokens passes over them; the
// blocks run in parallel when asked.
func blocked(x []float32, T, K, N int, ws []*Matrix, parallel bool, epi func(t, n0, n1 int, p [][]float32)) {
	nw := len(ws)
	nb := max(4, min(matmulRowBytes/(4*nw*K), 256))
	tb := min(T, matmulTokens)
	if parallel && T <= tb {
		// One block of tokens (decode): narrower column blocks, so that
		// every thread gets a few.
		nb = min(nb, max(16, (N+2*Threads()-1)/(2*Threads())))
	}
	nb = min(nb, N)
	nBlocks, tBlocks := (N+nb-1)/nb, (T+tb-1)/tb
	run := func(lo, hi int) {
		var sc struct { // one allocation: p escapes into epi
			rows, p [maxFused][]float32
			bufs    [maxFused]*[]float32
		}
		rows, p := sc.rows[:nw], sc.p[:nw]
		for i, w := range ws {
			if w.Type != quant.F32 && !w.directBF16() {
				sc.bufs[i] = getScratch(nb * K)
				defer putScratch(sc.bufs[i])
			}
		}
		tmp := getScratch(nw * nb)
		defer putScratch(tmp)
		for b := lo; b < hi; b++ {
			n0 := (b % nBlocks) * nb
			n1 := min(n0+nb, N)
			t0 := (b / nBlocks) * tb
			t1 := min(t0+tb, T)
			for i, w := range ws {
				if w.directBF16() {
					rows[i] = nil
				} else {
					var buf []float32
					if sc.bufs[i] != nil {
						buf = *sc.bufs[i]
					}
					rows[i] = w.rowsF32(buf, n0, n1)
				}
				p[i] = (*tmp)[i*nb : i*nb+n1-n0]
			}
			for t := t0; t < t1; t++ {
				xt := x[t*K : t*K+K]
				for i, w := range ws {
					if rows[i] == nil {
						vec.DotsBF16(p[i], w.Raw[n0*w.RowBytes:n1*w.RowBytes], K, xt)
					} else {
						vec.Dots(p[i], rows[i], K, xt)
					}
				}
				epi(t, n0, n1, p)
			}
		}
	}
	if !parallel {
		run(0, nBlocks*tBlocks)
		return
	}
	parallelFor(nBlocks*tBlocks, nw*nb*tb*K, run)
}

// maxFused is the most weights blocked multiplies together (gate and up).
const maxFused = 2
