package gpu

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"lagc/cuda"
	"lagc/lower"
	"lagc/quant"
)

// qgemvSide is one GEMV of a qgemv_pair case: its weight type and shape.
type qgemvSide struct {
	qt quant.Type
	c  qgemvCase
}

// qgemvPairCases are TestQGEMVPairGPU's pairs (TestPlanKernelsCompile
// compiles them).
var qgemvPairCases = []struct{ a, b qgemvSide }{
	{qgemvSide{quant.Q6_K, qgemvCase{T: 1, K: 3072, N: 1024, y: cuda.BF16}}, qgemvSide{quant.Q4_K, qgemvCase{T: 1, K: 3072, N: 8240, y: cuda.BF16}}},
	{qgemvSide{quant.Q8_0, qgemvCase{T: 3, K: 1024, N: 64, y: cuda.F32, acc: true}}, qgemvSide{quant.IQ4_XS, qgemvCase{T: 3, K: 1024, N: 40, y: cuda.BF16, swiglu: true}}},
	{qgemvSide{quant.Q5_K, qgemvCase{T: 2, K: 512, N: 37, y: cuda.F32, nw: 4, split: 8}}, qgemvSide{quant.Q4_K, qgemvCase{T: 2, K: 256, N: 9, y: cuda.BF16, swiglu: true, acc: true}}},
}

// TestQGEMVPairGPU: qgemv_pair (lower.QGEMVPair) writes bit for bit what
// its two qgemv launches write: llama.cpp's q6_k v beside q4_k q, k, gate
// (Laguna-S-2.1's decode shapes), and pairs of other types, row counts,
// output types, SwiGLU and accumulating epilogues and forced shapes.
func TestQGEMVPairGPU(t *testing.T) {
	k, s := gpu(t)
	r := rand.New(rand.NewPCG(51, 52))
	for _, p := range qgemvPairCases {
		t.Run(fmt.Sprintf("%s+%s/T%d", p.a.qt, p.b.qt, p.a.c.T), func(t *testing.T) {
			type gemv struct {
				l  lower.Launch
				y  cuda.DevicePtr
				y0 []float32
				c  qgemvCase
			}
			var gs []gemv
			for _, sd := range []qgemvSide{p.a, p.b} {
				c := sd.c
				rows, blocks, _ := c.weights(t, r, sd.qt)
				w := uploadQuant(t, k, s, sd.qt, rows, c.K, blocks)
				xq := alloc(t, k, lower.Q8XBytes(c.T, c.K))
				if err := k.Q8XQuantize(s, cuda.F32, upload(t, k, s, cuda.F32, randF32(r, c.T*c.K, 1)), xq, c.T, c.K); err != nil {
					t.Fatal(err)
				}
				g := gemv{y: alloc(t, k, int64(c.T*c.N*c.y.Size())), c: c}
				if c.acc {
					g.y0 = roundTo(c.y, randF32(r, c.T*c.N, 2))
				}
				var err error
				g.l, err = lower.QGEMV(lower.QGEMVArgs{T: c.T, K: c.K, N: c.N, XQ: ptr(xq), W: ptr(w), Y: ptr(g.y), WType: sd.qt, WRows: rows,
					YType: c.y.String(), SwiGLU: c.swiglu, Accumulate: c.acc, RowsPerWarp: c.nw, Split: c.split})
				if err != nil {
					t.Fatal(err)
				}
				gs = append(gs, g)
			}
			reset := func() {
				for _, g := range gs {
					if g.c.acc {
						uploadTo(t, s, g.y, g.c.y, g.y0)
					} else {
						poison(t, s, g.y, int64(g.c.T*g.c.N*g.c.y.Size()))
					}
				}
			}
			reset()
			if err := k.on(s).all([]lower.Launch{gs[0].l, gs[1].l}, nil); err != nil {
				t.Fatal(err)
			}
			var want [][]float32
			for _, g := range gs {
				want = append(want, download(t, s, g.c.y, g.y, g.c.T*g.c.N))
			}
			pair, err := lower.QGEMVPair(gs[0].l, gs[1].l)
			if err != nil {
				t.Fatal(err)
			}
			reset()
			if err := k.on(s).one(pair, nil); err != nil {
				t.Fatal(err)
			}
			for i, g := range gs {
				if got := download(t, s, g.c.y, g.y, g.c.T*g.c.N); !sameBits(got, want[i]) {
					t.Fatalf("GEMV %d: qgemv_pair's outputs differ from its qgemv launch's", i)
				}
			}
		})
	}
}
