package gpu

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"lagc/cuda"
	"lagc/lower"
)

// TestQGEMVRowsAloneGPU: qgemv over T activation rows in the shape lower
// chooses for T (QGEMVShape) gives each row the bits qgemv gives that row
// alone (T = 1, the decode schedule's shape), for T = 2 to 8 (a batched
// decode step's buckets), every quantised type and Laguna-S-2.1's shapes:
// o_proj of its 72-head layers (K 9216, split 4 ways for one row, where
// 5 to 8 rows once chose 2), of its 48-head layers, the q,k,v,gate GEMV,
// the shared expert's SwiGLU gate+up, and a longer K.
func TestQGEMVRowsAloneGPU(t *testing.T) {
	k, s := gpu(t)
	r := rand.New(rand.NewPCG(71, 72))
	const maxT = lower.QGEMVMaxRows
	cases := []struct {
		N, K   int
		swiglu bool
	}{
		{3072, 9216, false},
		{3072, 6144, false},
		{11336, 3072, false},
		{1024, 3072, true},
		{1000, 16384, false},
	}
	for _, qt := range lower.QuantKernelTypes {
		for _, c := range cases {
			if c.K%qt.BlockElems() != 0 {
				continue
			}
			t.Run(fmt.Sprintf("%s/N%d_K%d_swiglu%v", qt, c.N, c.K, c.swiglu), func(t *testing.T) {
				rows := c.N
				if c.swiglu {
					rows *= 2
				}
				w := uploadQuant(t, k, s, qt, rows, c.K, randQuantBlocks(r, qt, rows, c.K))
				x := roundTo(cuda.BF16, randF32(r, maxT*c.K, 1))
				es := int64(cuda.BF16.Size())
				// run quantises x's first T rows alone and returns qgemv's
				// T output rows in the shape lower picks for T.
				run := func(T int, x []float32) []byte {
					xp := upload(t, k, s, cuda.BF16, x[:T*c.K])
					xq := alloc(t, k, lower.Q8XBytes(T, c.K))
					if err := k.Q8XQuantize(s, cuda.BF16, xp, xq, T, c.K); err != nil {
						t.Fatal(err)
					}
					y := alloc(t, k, int64(T*c.N)*es)
					a := lower.QGEMVArgs{T: T, K: c.K, N: c.N, XQ: ptr(xq), W: ptr(w), WType: qt, WRows: rows,
						Y: ptr(y), YType: cuda.BF16.String(), SwiGLU: c.swiglu}
					l, err := lower.QGEMV(a)
					if err != nil {
						t.Fatal(err)
					}
					if err := k.on(s).all([]lower.Launch{l}, nil); err != nil {
						t.Fatal(err)
					}
					return downloadBytes(t, s, y, int64(T*c.N)*es)
				}
				alone := make([][]byte, maxT)
				for i := range maxT {
					alone[i] = run(1, x[i*c.K:])
				}
				for T := 2; T <= maxT; T++ {
					got := run(T, x)
					nw, split := lower.QGEMVShape(c.N, c.K, T, c.swiglu)
					for i := range T {
						if j := firstByteDiff(got[int64(i*c.N)*es:int64((i+1)*c.N)*es], alone[i]); j >= 0 {
							t.Fatalf("T=%d (%d rows a warp, split %d): row %d byte %d differs from the row alone", T, nw, split, i, j)
						}
					}
				}
			})
		}
	}
}
