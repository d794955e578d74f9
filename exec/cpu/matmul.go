package cpu

// MatMul computes y = x w^T: x is [T,K], w is [N,K] (a weight in HF layout,
// row-major), y is [T,N]. Work is split over blocks of N and T; every
// element is one dot product summed in a fixed order, so y[t] does not
// depend on T or on the thread count.
func MatMul(y, x, w []float32, T, K, N int) error {
	if err := checkMatMul("MatMul", y, x, w, T, K, N); err != nil {
		return err
	}
	matmul(y, x, w, T, K, N, true)
	return nil
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

func matmul(y, x, w []float32, T, K, N int, parallel bool) {
	blocked(T, K, N, 1, parallel, func(t, n0, n1 int) {
		xr := x[t*K : t*K+K]
		yr := y[t*N : t*N+N]
		for n := n0; n < n1; n++ {
			yr[n] = dot(xr, w[n*K:n*K+K])
		}
	})
}

// blocked runs body(t, n0, n1) for every token t and block [n0, n1) of
// output columns, blocking columns so that the weight rows of a block
// (weights matrices of K floats per column) stay in L2 while a block of
// tokens passes over them; the blocks run in parallel when asked.
func blocked(T, K, N, weights int, parallel bool, body func(t, n0, n1 int)) {
	nb := max(4, min(matmulRowBytes/(4*weights*K), 256))
	nb = min(nb, N)
	tb := min(T, matmulTokens)
	nBlocks, tBlocks := (N+nb-1)/nb, (T+tb-1)/tb
	run := func(lo, hi int) {
		for b := lo; b < hi; b++ {
			n0 := (b % nBlocks) * nb
			n1 := min(n0+nb, N)
			t0 := (b / nBlocks) * tb
			t1 := min(t0+tb, T)
			for t := t0; t < t1; t++ {
				body(t, n0, n1)
			}
		}
	}
	if !parallel {
		run(0, nBlocks*tBlocks)
		return
	}
	parallelFor(nBlocks*tBlocks, weights*nb*tb*K, run)
}

