package gpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"lagc/cuda"
	"lagc/exec/cpu"
	"lagc/lower"
)

// TestRouterTopKGPU: the device router must choose exactly the experts the
// CPU reference chooses, in the same order, with the same weights (the
// arithmetic is the reference's, step for step): S-2.1's 256/10 and
// XS.2's 256/8 at decode (1 token), batched decode (3, 8) and prefill row
// counts (100, a partial last block), 64 experts, small and odd expert
// counts, the warp kernel's limits (1024 experts, 32 choices) and the
// block kernel past them (1025 and 1500 experts, 33 choices), k = E,
// soft-capping, no bias, rows of tied logits (ties go to the lower index),
// selection scores of exactly zero and a subnormal score, NaN and infinite
// logits. Each case runs lower's choice and the block kernel (at every T:
// router_topk_block ranks each expert against every key; E > 1024 has
// threads take several experts).
func TestRouterTopKGPU(t *testing.T) {
	k, s := gpu(t)
	r := rand.New(rand.NewPCG(21, 22))
	for _, c := range []struct {
		T, E, topK       int
		softcap, scaling float32
		bias, ties, nan  bool
	}{
		{1, 256, 10, 0, 2.5, true, false, false},
		{3, 256, 10, 0, 2.5, true, false, false},
		{8, 256, 10, 0, 1, true, false, false},
		{100, 256, 10, 0, 1, true, false, false},
		{1, 256, 8, 0, 1, true, false, false},
		{8, 256, 8, 0, 2.5, true, true, false},
		{100, 256, 8, 30, 1, true, false, false},
		{1, 64, 8, 0, 1, true, false, false},
		{3, 64, 10, 0, 1, true, true, false},
		{100, 64, 8, 0, 1, false, false, false},
		{5, 256, 10, 0, 2.5, true, false, false},
		{64, 256, 10, 30, 1, true, false, false},
		{3, 8, 2, 30, 1, false, false, false},
		{64, 37, 5, 30, 1, true, false, false},
		{4, 300, 8, 0, 1, true, false, false},
		{2, 6, 6, 0, 1, true, false, false},
		{3, 40, 4, 0, 1, false, true, false},
		{3, 40, 4, 0, 1, true, true, false},
		{3, 1024, 32, 0, 1, true, false, false},
		{3, 1024, 32, 0, 1, true, true, false},
		{3, 1025, 10, 0, 1, true, false, false},
		{2, 1500, 12, 0, 1, true, false, false},
		{2, 33, 33, 0, 1, true, true, false},
		{3, 256, 33, 0, 1, true, false, false},
		{1, 256, 10, 0, 1, true, false, true},
		{100, 256, 10, 0, 1, false, false, true},
		{1, 256, 10, 30, 1, true, true, true},
		{1, 2048, 64, 0, 1, true, false, false},
		{1, 2048, 16, 30, 2.5, true, true, false},
		{1, 1500, 1500, 0, 1, true, false, false},
		{1, 256, 256, 0, 1, false, true, false},
		{1, 7, 7, 30, 1, true, false, true},
	} {
		for _, dt := range DTypes {
			t.Run(fmt.Sprintf("T%d-E%d-k%d-cap%g-bias%v-ties%v-nan%v/%v", c.T, c.E, c.topK, c.softcap, c.bias, c.ties, c.nan, dt), func(t *testing.T) {
				logits := roundTo(dt, randF32(r, c.T*c.E, 4))
				if c.ties {
					for i := range logits {
						logits[i] = float32(i%3) * 0.5 // many equal values per row
					}
				}
				if c.nan {
					// NaN above every number (two tie: the lower index
					// first), infinities at either end.
					for i := range c.T {
						row := logits[i*c.E:][:c.E]
						row[c.E-1], row[c.E/2] = float32(math.NaN()), float32(math.NaN())
						row[1], row[2] = float32(math.Inf(1)), float32(math.Inf(-1))
					}
				}
				var bias []float32
				dbias := cuda.DevicePtr(0)
				if c.bias {
					bias = randF32(r, c.E, 0.5)
					if c.ties {
						for i := range bias {
							bias[i] = float32(i%2) * 0.25
						}
						// s(0) - 0.5 is exactly 0 for two experts; s(-100) is
						// a subnormal float.
						if c.E > 8 {
							logits[3], bias[3] = 0, -0.5
							logits[6], bias[6] = 0, -0.5
							logits[5], bias[5] = -100, 0
						}
					}
					dbias = upload(t, k, s, cuda.F32, bias)
				}
				wantW := make([]float32, c.T*c.topK)
				wantI := make([]int32, c.T*c.topK)
				if err := cpu.RouterTopK(wantW, wantI, logits, bias, c.T, c.E, c.topK, c.softcap, c.scaling); err != nil {
					t.Fatal(err)
				}
				dl := upload(t, k, s, dt, logits)
				for _, block := range []bool{false, true} {
					dw := alloc(t, k, int64(4*c.T*c.topK))
					di := alloc(t, k, int64(4*c.T*c.topK))
					poison(t, s, dw, int64(4*c.T*c.topK))
					poison(t, s, di, int64(4*c.T*c.topK))
					var err error
					if block {
						err = k.on(s).one(lower.RouterTopKBlock(dt.String(), ptr(dw), ptr(di), ptr(dl), ptr(dbias), c.T, c.E, c.topK, c.softcap, c.scaling))
					} else {
						err = k.RouterTopK(s, dt, dw, di, dl, dbias, c.T, c.E, c.topK, c.softcap, c.scaling)
					}
					if err != nil {
						t.Fatal(err)
					}
					checkRoutes(t, fmt.Sprintf("block %v", block), c.topK, download(t, s, cuda.F32, dw, c.T*c.topK), downloadI32(t, s, di, c.T*c.topK), wantW, wantI)
				}
			})
		}
	}
}

// checkRoutes fails unless the ids are the reference's and the weights
// within a relative 1e-6 of it (NaN where it is NaN; subnormals aside).
func checkRoutes(t *testing.T, what string, k int, gotW []float32, gotI []int32, wantW []float32, wantI []int32) {
	t.Helper()
	for i := range gotI {
		if gotI[i] != wantI[i] {
			t.Fatalf("%s: token %d choice %d: expert %d, reference %d (row %v vs %v)", what, i/k, i%k, gotI[i], wantI[i],
				gotI[i/k*k:][:k], wantI[i/k*k:][:k])
		}
	}
	for i := range gotW {
		g, w := float64(gotW[i]), float64(wantW[i])
		if math.IsNaN(g) != math.IsNaN(w) || math.Abs(g-w) > 1e-6*math.Abs(w)+1e-30 {
			t.Fatalf("%s: token %d choice %d: weight %g, reference %g", what, i/k, i%k, g, w)
		}
	}
}

func downloadI32(t *testing.T, s *cuda.Stream, p cuda.DevicePtr, n int) []int32 {
	t.Helper()
	v := make([]int32, n)
	if err := cuda.Download(s, v, p); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestRouterTopKArgs(t *testing.T) {
	k := &Kernels{}
	p := cuda.DevicePtr(256)
	for name, err := range map[string]error{
		"k > E":       k.RouterTopK(nil, cuda.F32, p, p, p, 0, 1, 4, 5, 0, 1),
		"k 0":         k.RouterTopK(nil, cuda.F32, p, p, p, 0, 1, 4, 0, 0, 1),
		"softcap < 0": k.RouterTopK(nil, cuda.F32, p, p, p, 0, 1, 4, 2, -1, 1),
		"null ids":    k.RouterTopK(nil, cuda.F32, p, 0, p, 0, 1, 4, 2, 0, 1),
	} {
		if err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
