package gpu

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"lagc/cuda"
	"lagc/lower"
)

// TestTopKSharedGPU: router_topk_shared (lower.TopKShared) writes, bit for
// bit, the extended routes router_topk then moe_add_shared write: ragged
// and whole prefill chunks, one and two shared experts, with and without a
// score bias.
func TestTopKSharedGPU(t *testing.T) {
	k, s := gpu(t)
	r := rand.New(rand.NewPCG(41, 42))
	for _, c := range []struct {
		T, E, topK, S int
		bias          bool
	}{
		{2048, 256, 10, 1, true},
		{300, 256, 10, 1, false},
		{77, 128, 8, 2, true},
		{65, 37, 5, 1, true},
	} {
		t.Run(fmt.Sprintf("T%d-E%d-k%d-S%d-bias%v", c.T, c.E, c.topK, c.S, c.bias), func(t *testing.T) {
			logits := upload(t, k, s, cuda.F32, randF32(r, c.T*c.E, 4))
			bias := cuda.DevicePtr(0)
			if c.bias {
				bias = upload(t, k, s, cuda.F32, randF32(r, c.E, 0.5))
			}
			nr, ne := int64(4*c.T*c.topK), int64(4*c.T*(c.topK+c.S))
			buf := func(n int64) cuda.DevicePtr { return allocPoisoned(t, k, s, n) }
			w, ids, w2, ids2 := buf(nr), buf(nr), buf(ne), buf(ne)
			rt, err := lower.RouterTopK("f32", ptr(w), ptr(ids), ptr(logits), ptr(bias), c.T, c.E, c.topK, 0, 1)
			if err != nil || rt.Kernel != "router_topk" {
				t.Fatalf("RouterTopK chose %s (%v)", rt.NameExpr(), err)
			}
			a := lower.MoEAddShared(c.T, c.topK, c.S, c.E, ptr(w), ptr(ids), ptr(w2), ptr(ids2))
			sameSharedRoutes(t, k, s, rt, a, w2, ids2, c.T*(c.topK+c.S))
		})
	}
}

// sameSharedRoutes runs the router launch r and moe_add_shared a, then
// TopKShared(r, a) alone, and fails unless the extended routes (n weights
// at w2, n ids at ids2, poisoned in between) are the same bits.
func sameSharedRoutes(t *testing.T, k *Kernels, s *cuda.Stream, r, a lower.Launch, w2, ids2 cuda.DevicePtr, n int) {
	t.Helper()
	if err := k.on(s).all([]lower.Launch{r, a}, nil); err != nil {
		t.Fatal(err)
	}
	wantW, wantI := downloadI32(t, s, w2, n), downloadI32(t, s, ids2, n)
	poison(t, s, w2, int64(4*n))
	poison(t, s, ids2, int64(4*n))
	f, err := lower.TopKShared(r, a)
	if err != nil {
		t.Fatal(err)
	}
	if err := k.on(s).one(f, nil); err != nil {
		t.Fatal(err)
	}
	gotW, gotI := downloadI32(t, s, w2, n), downloadI32(t, s, ids2, n)
	if !slices.Equal(gotW, wantW) || !slices.Equal(gotI, wantI) {
		t.Fatalf("%s's routes differ from %s then moe_add_shared's", f.Kernel, r.Kernel)
	}
}

// TestRouterFusedSharedGPU: router_fused_shared (the decode router with
// the shared experts' routes appended, fuseTopKShared) writes bit for bit
// the routes router_fused then moe_add_shared write, for 1 to 8 tokens,
// the warp's selection (E <= 256) and the block's (E 512), bf16 and f32.
func TestRouterFusedSharedGPU(t *testing.T) {
	k, s := gpu(t)
	r := rand.New(rand.NewPCG(43, 44))
	for _, c := range []struct {
		T, E, K, topK, S int
		dt               string
	}{
		{1, 256, 3072, 10, 1, "bf16"},
		{3, 256, 1024, 8, 2, "bf16"},
		{8, 128, 512, 6, 1, "f32"},
		{1, 512, 512, 8, 1, "f32"},
	} {
		t.Run(fmt.Sprintf("T%d-E%d-K%d-k%d-S%d-%s", c.T, c.E, c.K, c.topK, c.S, c.dt), func(t *testing.T) {
			dt := cuda.BF16
			if c.dt == "f32" {
				dt = cuda.F32
			}
			x := upload(t, k, s, dt, randF32(r, c.T*c.K, 1))
			w := upload(t, k, s, dt, randF32(r, c.E*c.K, 0.05))
			bias := upload(t, k, s, cuda.F32, randF32(r, c.E, 0.5))
			logits, counter := alloc(t, k, int64(4*c.T*c.E)), alloc(t, k, 4)
			if err := s.Memset8(counter, 0, 4); err != nil { // the last block's count starts at zero
				t.Fatal(err)
			}
			nr, ne := int64(4*c.T*c.topK), int64(4*c.T*(c.topK+c.S))
			buf := func(n int64) cuda.DevicePtr { return allocPoisoned(t, k, s, n) }
			wt, ids, w2, ids2 := buf(nr), buf(nr), buf(ne), buf(ne)
			g, err := lower.MatMul(lower.MatMulArgs{T: c.T, K: c.K, N: c.E, X: ptr(x), W: ptr(w), Y: ptr(logits), XType: c.dt, WType: c.dt,
				YType: "f32", SMs: k.SMs()})
			if err != nil {
				t.Fatal(err)
			}
			tk, err := lower.RouterTopK("f32", ptr(wt), ptr(ids), ptr(logits), ptr(bias), c.T, c.E, c.topK, 0, 1)
			if err != nil {
				t.Fatal(err)
			}
			rf, err := lower.RouterFused(g, tk, ptr(counter))
			if err != nil {
				t.Fatal(err)
			}
			a := lower.MoEAddShared(c.T, c.topK, c.S, c.E, ptr(wt), ptr(ids), ptr(w2), ptr(ids2))
			sameSharedRoutes(t, k, s, rf, a, w2, ids2, c.T*(c.topK+c.S))
			if n := downloadI32(t, s, counter, 1); n[0] != 0 {
				t.Fatalf("counter left at %d", n[0])
			}
		})
	}
}

// allocPoisoned is alloc's n bytes, poisoned (an unwritten output fails).
func allocPoisoned(t *testing.T, k *Kernels, s *cuda.Stream, n int64) cuda.DevicePtr {
	t.Helper()
	p := alloc(t, k, n)
	poison(t, s, p, n)
	return p
}
