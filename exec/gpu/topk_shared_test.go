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
			buf := func(n int64) cuda.DevicePtr {
				p := alloc(t, k, n)
				poison(t, s, p, n)
				return p
			}
			w, ids, w2, ids2 := buf(nr), buf(nr), buf(ne), buf(ne)
			rt, err := lower.RouterTopK("f32", ptr(w), ptr(ids), ptr(logits), ptr(bias), c.T, c.E, c.topK, 0, 1)
			if err != nil || rt.Kernel != "router_topk" {
				t.Fatalf("RouterTopK chose %s (%v)", rt.NameExpr(), err)
			}
			a := lower.MoEAddShared(c.T, c.topK, c.S, c.E, ptr(w), ptr(ids), ptr(w2), ptr(ids2))
			if err := k.on(s).all([]lower.Launch{rt, a}, nil); err != nil {
				t.Fatal(err)
			}
			wantW, wantI := downloadI32(t, s, w2, c.T*(c.topK+c.S)), downloadI32(t, s, ids2, c.T*(c.topK+c.S))
			poison(t, s, w2, ne)
			poison(t, s, ids2, ne)
			f, err := lower.TopKShared(rt, a)
			if err != nil {
				t.Fatal(err)
			}
			if err := k.on(s).one(f, nil); err != nil {
				t.Fatal(err)
			}
			gotW, gotI := downloadI32(t, s, w2, c.T*(c.topK+c.S)), downloadI32(t, s, ids2, c.T*(c.topK+c.S))
			if !slices.Equal(gotW, wantW) || !slices.Equal(gotI, wantI) {
				t.Fatalf("router_topk_shared's routes differ from router_topk then moe_add_shared's")
			}
		})
	}
}
