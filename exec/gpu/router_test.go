package gpu

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"lagc/cuda"
	"lagc/exec/cpu"
)

// TestRouterTopKGPU: the device router must choose exactly the experts the
// CPU reference chooses, in the same order, with the same weights (the
// arithmetic is the reference's, step for step): S-2.1's 256/10 and
// XS.2's 256/8 at decode (1 token), batched decode (3, 8) and prefill row
// counts (100, a partial last block), 64 experts, small and odd expert
// counts, the warp kernel's limits (1024 experts, 32 choices) and the
// block kernel past them (1025 and 1500 experts, 33 choices), k = E,
// soft-capping, no bias, rows of tied logits (ties go to the lower index),
// selection scores of exactly zero and a subnormal score.
func TestRouterTopKGPU(t *testing.T) {
	k, s := gpu(t)
	r := rand.New(rand.NewPCG(21, 22))
	for _, c := range []struct {
		T, E, topK       int
		softcap, scaling float32
		bias, ties       bool
	}{
		{1, 256, 10, 0, 2.5, true, false},
		{3, 256, 10, 0, 2.5, true, false},
		{8, 256, 10, 0, 1, true, false},
		{100, 256, 10, 0, 1, true, false},
		{1, 256, 8, 0, 1, true, false},
		{8, 256, 8, 0, 2.5, true, true},
		{100, 256, 8, 30, 1, true, false},
		{1, 64, 8, 0, 1, true, false},
		{3, 64, 10, 0, 1, true, true},
		{100, 64, 8, 0, 1, false, false},
		{5, 256, 10, 0, 2.5, true, false},
		{64, 256, 10, 30, 1, true, false},
		{3, 8, 2, 30, 1, false, false},
		{64, 37, 5, 30, 1, true, false},
		{4, 300, 8, 0, 1, true, false},
		{2, 6, 6, 0, 1, true, false},
		{3, 40, 4, 0, 1, false, true},
		{3, 40, 4, 0, 1, true, true},
		{3, 1024, 32, 0, 1, true, false},
		{3, 1024, 32, 0, 1, true, true},
		{3, 1025, 10, 0, 1, true, false},
		{2, 1500, 12, 0, 1, true, false},
		{2, 33, 33, 0, 1, true, true},
		{3, 256, 33, 0, 1, true, false},
	} {
		for _, dt := range DTypes {
			t.Run(fmt.Sprintf("T%d-E%d-k%d-cap%g-bias%v-ties%v/%v", c.T, c.E, c.topK, c.softcap, c.bias, c.ties, dt), func(t *testing.T) {
				logits := roundTo(dt, randF32(r, c.T*c.E, 4))
				if c.ties {
					for i := range logits {
						logits[i] = float32(i%3) * 0.5 // many equal values per row
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
				dw := alloc(t, k, int64(4*c.T*c.topK))
				di := alloc(t, k, int64(4*c.T*c.topK))
				poison(t, s, dw, int64(4*c.T*c.topK))
				poison(t, s, di, int64(4*c.T*c.topK))
				if err := k.RouterTopK(s, dt, dw, di, upload(t, k, s, dt, logits), dbias, c.T, c.E, c.topK, c.softcap, c.scaling); err != nil {
					t.Fatal(err)
				}
				gotI := make([]int32, c.T*c.topK)
				if err := cuda.Download(s, gotI, di); err != nil {
					t.Fatal(err)
				}
				for i := range gotI {
					if gotI[i] != wantI[i] {
						t.Fatalf("token %d choice %d: expert %d, reference %d (row %v vs %v)", i/c.topK, i%c.topK, gotI[i], wantI[i],
							gotI[i/c.topK*c.topK:][:c.topK], wantI[i/c.topK*c.topK:][:c.topK])
					}
				}
				checkClose(t, "weights", download(t, s, cuda.F32, dw, c.T*c.topK), wantW, 1e-6)
			})
		}
	}
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
