package gpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"lagc/cuda"
	"lagc/exec/cpu"
	"lagc/lower"
	"lagc/quant"
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
// router_topk_block selects with one warp up to 256 experts and 32
// choices, else ranks each expert against every key; E > 1024 has threads
// take several experts).
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

// TestRouterFusedGPU: router_fused (lower.RouterFused) must write exactly
// the bits of the two launches it replaces, the router GEMV and the block
// top-k: logits, weights and ids. Shapes: S-2.1's 256 x 3072 top 10 and
// XS.2's 256 x 2048 top 8 (a row a block, split 8), experts not a multiple
// of a block's rows (37, 300), K not a multiple of a 16-byte vector (the
// scalar GEMV), up to 8 rows, 1024 experts with 32 choices and k = E. Each
// fused launch runs several times with poisoned outputs in between: only a
// counter back at 0 after each launch lets the next one's last block
// select.
func TestRouterFusedGPU(t *testing.T) {
	k, s := gpu(t)
	r := rand.New(rand.NewPCG(23, 24))
	for _, c := range []struct {
		T, E, K, topK    int
		softcap, scaling float32
		bias             bool
	}{
		{1, 256, 3072, 10, 0, 1, true},
		{1, 256, 2048, 8, 0, 2.5, true},
		{1, 37, 136, 5, 30, 1, true},
		{1, 300, 1000, 12, 0, 1, false},
		{1, 1024, 256, 32, 0, 1, true},
		{1, 6, 32, 6, 30, 2.5, false},
		{2, 256, 3072, 10, 0, 1, true},
		{3, 37, 72, 5, 0, 1, true},
		{8, 64, 512, 8, 30, 1, true},
	} {
		for _, dt := range DTypes {
			t.Run(fmt.Sprintf("T%d-E%d-K%d-k%d-cap%g-bias%v/%v", c.T, c.E, c.K, c.topK, c.softcap, c.bias, dt), func(t *testing.T) {
				x := upload(t, k, s, dt, randF32(r, c.T*c.K, 1))
				w := upload(t, k, s, dt, randF32(r, c.E*c.K, 0.05))
				bias := cuda.DevicePtr(0)
				if c.bias {
					bias = upload(t, k, s, cuda.F32, randF32(r, c.E, 0.5))
				}
				nl, nr := int64(4*c.T*c.E), int64(4*c.T*c.topK)
				// launches of the GEMV and the top-k into logits, weights, ids.
				launches := func(logits, weights, ids cuda.DevicePtr) (lower.Launch, lower.Launch) {
					g, err := lower.MatMul(lower.MatMulArgs{T: c.T, K: c.K, N: c.E, X: ptr(x), W: ptr(w), Y: ptr(logits),
						XType: dt.String(), WType: dt.String(), YType: "f32", SMs: k.SMs()})
					if err != nil {
						t.Fatal(err)
					}
					rt, err := lower.RouterTopK("f32", ptr(weights), ptr(ids), ptr(logits), ptr(bias), c.T, c.E, c.topK, c.softcap, c.scaling)
					if err != nil {
						t.Fatal(err)
					}
					return g, rt
				}
				out := func() (logits, weights, ids cuda.DevicePtr) {
					logits, weights, ids = alloc(t, k, nl), alloc(t, k, nr), alloc(t, k, nr)
					for _, o := range []struct {
						p cuda.DevicePtr
						n int64
					}{{logits, nl}, {weights, nr}, {ids, nr}} {
						poison(t, s, o.p, o.n)
					}
					return
				}
				l1, w1, i1 := out()
				g, rt := launches(l1, w1, i1)
				if rt.Kernel != "router_topk_block" {
					t.Fatalf("the top-k of %d tokens is %s", c.T, rt.Kernel)
				}
				if err := k.on(s).all([]lower.Launch{g, rt}, nil); err != nil {
					t.Fatal(err)
				}
				wantL := downloadI32(t, s, l1, c.T*c.E) // logits' bits
				wantW, wantI := downloadI32(t, s, w1, c.T*c.topK), downloadI32(t, s, i1, c.T*c.topK)

				counter := alloc(t, k, 4)
				if err := s.Memset8(counter, 0, 4); err != nil {
					t.Fatal(err)
				}
				l2, w2, i2 := out()
				g2, rt2 := launches(l2, w2, i2)
				fused, err := lower.RouterFused(g2, rt2, ptr(counter))
				if err != nil {
					t.Fatal(err)
				}
				for run := range 3 {
					if run > 0 {
						poison(t, s, l2, nl)
						poison(t, s, w2, nr)
						poison(t, s, i2, nr)
					}
					if err := k.on(s).one(fused, nil); err != nil {
						t.Fatal(err)
					}
					for _, o := range []struct {
						what      string
						got, want []int32
					}{
						{"logits", downloadI32(t, s, l2, c.T*c.E), wantL},
						{"weights", downloadI32(t, s, w2, c.T*c.topK), wantW},
						{"ids", downloadI32(t, s, i2, c.T*c.topK), wantI},
					} {
						for i := range o.got {
							if o.got[i] != o.want[i] {
								t.Fatalf("run %d: %s[%d] = %#x, two launches %#x", run, o.what, i, uint32(o.got[i]), uint32(o.want[i]))
							}
						}
					}
					if n := downloadI32(t, s, counter, 1); n[0] != 0 {
						t.Fatalf("run %d: counter left at %d", run, n[0])
					}
				}
				// And the two launches chose as the reference does.
				ref := make([]float32, c.T*c.E)
				for i, b := range wantL {
					ref[i] = math.Float32frombits(uint32(b))
				}
				var hb []float32
				if c.bias {
					hb = download(t, s, cuda.F32, bias, c.E)
				}
				rw, ri := make([]float32, c.T*c.topK), make([]int32, c.T*c.topK)
				if err := cpu.RouterTopK(rw, ri, ref, hb, c.T, c.E, c.topK, c.softcap, c.scaling); err != nil {
					t.Fatal(err)
				}
				gw := make([]float32, len(wantW))
				for i, b := range wantW {
					gw[i] = math.Float32frombits(uint32(b))
				}
				checkRoutes(t, "two launches", c.topK, gw, wantI, rw, ri)
			})
		}
	}
}

// TestRouterQGEMVGPU: the fused router and a quantised GEMV beside it in
// one launch (router_qgemv, the decode router and the shared expert's
// gate+up) give the bits of the two launches one after the other: the
// logits, the routes, the GEMV's y (accumulated onto too), and leave the
// counter at zero, over three runs.
func TestRouterQGEMVGPU(t *testing.T) {
	k, s := gpu(t)
	r := rand.New(rand.NewPCG(25, 26))
	for _, c := range []struct {
		E, K, topK int
		qt         quant.Type
		N          int
		swiglu     bool
		acc        bool
	}{
		{256, 3072, 10, quant.Q8_0, 1024, true, false}, // S-2.1's
		{64, 512, 8, quant.Q4_K, 200, true, true},
		{37, 256, 5, quant.Q6_K, 37, false, false},
		{300, 1024, 12, quant.IQ4_XS, 1, true, false},
	} {
		for _, dt := range DTypes {
			t.Run(fmt.Sprintf("E%d-K%d-k%d-%s-N%d-sw%v-acc%v/%v", c.E, c.K, c.topK, c.qt, c.N, c.swiglu, c.acc, dt), func(t *testing.T) {
				xv := randF32(r, c.K, 1)
				x := upload(t, k, s, dt, xv)
				w := upload(t, k, s, dt, randF32(r, c.E*c.K, 0.05))
				bias := upload(t, k, s, cuda.F32, randF32(r, c.E, 0.5))
				rows := c.N
				if c.swiglu {
					rows *= 2
				}
				qw := uploadQuant(t, k, s, c.qt, rows, c.K, randQuantBlocks(r, c.qt, rows, c.K))
				xq := alloc(t, k, lower.Q8XBytes(1, c.K))
				if err := k.Q8XQuantize(s, dt, x, xq, 1, c.K); err != nil {
					t.Fatal(err)
				}
				nl, nr, ny := int64(4*c.E), int64(4*c.topK), int64(c.N*dt.Size())
				y0 := upload(t, k, s, dt, randF32(r, c.N, 2))
				counter := alloc(t, k, 4)
				if err := s.Memset8(counter, 0, 4); err != nil {
					t.Fatal(err)
				}
				type outs struct{ logits, weights, ids, y cuda.DevicePtr }
				// launches of the fused router and the GEMV into o
				launches := func(o outs) (lower.Launch, lower.Launch) {
					g, err := lower.MatMul(lower.MatMulArgs{T: 1, K: c.K, N: c.E, X: ptr(x), W: ptr(w), Y: ptr(o.logits),
						XType: dt.String(), WType: dt.String(), YType: "f32", SMs: k.SMs()})
					if err != nil {
						t.Fatal(err)
					}
					rt, err := lower.RouterTopK("f32", ptr(o.weights), ptr(o.ids), ptr(o.logits), ptr(bias), 1, c.E, c.topK, 0, 1)
					if err != nil {
						t.Fatal(err)
					}
					f, err := lower.RouterFused(g, rt, ptr(counter))
					if err != nil {
						t.Fatal(err)
					}
					q, err := lower.QGEMV(QGEMVArgs{T: 1, K: c.K, N: c.N, XQ: xq, W: qw, Y: o.y, WType: c.qt, WRows: rows, YType: dt,
						SwiGLU: c.swiglu, Accumulate: c.acc}.lower())
					if err != nil {
						t.Fatal(err)
					}
					return f, q
				}
				fresh := func(o *outs) {
					if o.logits == 0 {
						*o = outs{alloc(t, k, nl), alloc(t, k, nr), alloc(t, k, nr), alloc(t, k, ny)}
					}
					poison(t, s, o.logits, nl)
					poison(t, s, o.weights, nr)
					poison(t, s, o.ids, nr)
					if err := s.CopyDtoD(o.y, y0, ny); err != nil { // the accumulated-onto y
						t.Fatal(err)
					}
				}
				var want, got outs
				fresh(&want)
				f, q := launches(want)
				if err := k.on(s).all([]lower.Launch{f, q}, nil); err != nil {
					t.Fatal(err)
				}
				fresh(&got)
				f2, q2 := launches(got)
				fused, err := lower.RouterQGEMV(f2, q2)
				if err != nil {
					t.Fatal(err)
				}
				for run := range 3 {
					if run > 0 {
						fresh(&got)
					}
					if err := k.on(s).one(fused, nil); err != nil {
						t.Fatal(err)
					}
					for _, o := range []struct {
						what      string
						got, want cuda.DevicePtr
						n         int64
					}{{"logits", got.logits, want.logits, nl}, {"weights", got.weights, want.weights, nr}, {"ids", got.ids, want.ids, nr},
						{"y", got.y, want.y, ny}} {
						g, w := make([]byte, o.n), make([]byte, o.n)
						if err := cuda.Download(s, g, o.got); err != nil {
							t.Fatal(err)
						}
						if err := cuda.Download(s, w, o.want); err != nil {
							t.Fatal(err)
						}
						if i := firstByteDiff(g, w); i >= 0 {
							t.Fatalf("run %d: %s byte %d differs from the two launches'", run, o.what, i)
						}
					}
					if n := downloadI32(t, s, counter, 1); n[0] != 0 {
						t.Fatalf("run %d: counter left at %d", run, n[0])
					}
				}
			})
		}
	}
}
