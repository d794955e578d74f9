package gpu

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"lagc/cuda"
	"lagc/lower"
)

// TestQGEMVSplitGPU: the GEMV sending its columns to several outputs
// (qgemv_split, a batched decode step's q, k, v and gate in one launch)
// writes each output's rows bit for bit as qgemv of the same shape over
// the whole weight writes those columns, for every quantised type, both
// output dtypes, one to four outputs and one to eight rows (S-2.1's q, k,
// v, gate among them), and stores nothing past its outputs.
func TestQGEMVSplitGPU(t *testing.T) {
	k, s := gpu(t)
	r := rand.New(rand.NewPCG(61, 62))
	cases := []struct {
		T, K   int
		outs   []int
		nw, sp int
		y      cuda.DType
	}{
		{T: 2, K: 3072, outs: []int{9216, 1024, 1024, 72}, y: cuda.BF16}, // S-2.1's full-attention layers, two sequences
		{T: 8, K: 3072, outs: []int{6144, 1024, 1024, 48}, y: cuda.BF16},
		{T: 1, K: 512, outs: []int{37, 5, 100}, y: cuda.F32, nw: 4, sp: 2},
		{T: 3, K: 256, outs: []int{64, 64}, y: cuda.BF16, nw: 2, sp: 1},
		{T: 5, K: 1024, outs: []int{33}, y: cuda.F32, nw: 1, sp: 4},
	}
	for _, qt := range lower.QuantKernelTypes {
		for _, c := range cases {
			if c.K%qt.BlockElems() != 0 {
				continue
			}
			N := 0
			for _, n := range c.outs {
				N += n
			}
			t.Run(fmt.Sprintf("%s/T%d_K%d_N%v_%v_nw%d_split%d", qt, c.T, c.K, c.outs, c.y, c.nw, c.sp), func(t *testing.T) {
				w := uploadQuant(t, k, s, qt, N, c.K, randQuantBlocks(r, qt, N, c.K))
				xq := alloc(t, k, lower.Q8XBytes(c.T, c.K))
				xp := upload(t, k, s, cuda.BF16, roundTo(cuda.BF16, randF32(r, c.T*c.K, 1)))
				if err := k.Q8XQuantize(s, cuda.BF16, xp, xq, c.T, c.K); err != nil {
					t.Fatal(err)
				}
				a := lower.QGEMVArgs{T: c.T, K: c.K, N: N, XQ: ptr(xq), W: ptr(w), WType: qt, WRows: N, YType: c.y.String(),
					RowsPerWarp: c.nw, Split: c.sp}
				whole := alloc(t, k, int64(c.T*N*c.y.Size()))
				poison(t, s, whole, int64(c.T*N*c.y.Size()))
				a.Y = ptr(whole)
				ref, err := lower.QGEMV(a)
				if err != nil {
					t.Fatal(err)
				}
				outs, bufs := guardedSplitOuts(t, k, s, c.outs, c.T, c.y.Size())
				split, err := lower.QGEMVSplit(a, outs)
				if err != nil {
					t.Fatal(err)
				}
				if split.Grid != ref.Grid || split.Ints[2] != ref.Ints[3] || split.Ints[3] != ref.Ints[4] {
					t.Fatalf("split launch %s is not qgemv's shape %s", split, ref)
				}
				if err := k.on(s).all([]lower.Launch{ref, split}, nil); err != nil {
					t.Fatal(err)
				}
				checkSplitOutputs(t, s, "qgemv", whole, bufs, c.outs, c.T, N, c.y.Size())
			})
		}
	}
}

// guardedSplitOuts allocates a split GEMV's outputs, ns columns wide, of T
// rows of es bytes each and a guard row after each, poisoned (0xFF):
// checkSplitOutputs then finds anything written past them.
func guardedSplitOuts(t *testing.T, k *Kernels, s *cuda.Stream, ns []int, T, es int) ([]lower.SplitOut, []cuda.DevicePtr) {
	t.Helper()
	var outs []lower.SplitOut
	var bufs []cuda.DevicePtr
	for _, n := range ns {
		b := alloc(t, k, int64((T+1)*n*es))
		poison(t, s, b, int64((T+1)*n*es))
		bufs = append(bufs, b)
		outs = append(outs, lower.SplitOut{Y: ptr(b), N: n})
	}
	return outs, bufs
}

// checkSplitOutputs: each output's T rows are byte for byte its columns of
// the whole GEMV's rows (whole: T rows of N, by ref), and its guard row is
// untouched.
func checkSplitOutputs(t *testing.T, s *cuda.Stream, ref string, whole cuda.DevicePtr, bufs []cuda.DevicePtr, ns []int, T, N, es int) {
	t.Helper()
	want := downloadBytes(t, s, whole, int64(T*N*es))
	col := 0
	for i, n := range ns {
		got := downloadBytes(t, s, bufs[i], int64((T+1)*n*es))
		for row := range T {
			g, w := got[row*n*es:(row+1)*n*es], want[(row*N+col)*es:(row*N+col+n)*es]
			if j := firstByteDiff(g, w); j >= 0 {
				t.Fatalf("output %d, row %d: byte %d differs from %s's columns %d..%d", i, row, j, ref, col, col+n)
			}
		}
		for j, b := range got[T*n*es:] {
			if b != 0xFF {
				t.Fatalf("output %d: byte %d past its %d rows written", i, j, T)
			}
		}
		col += n
	}
}
