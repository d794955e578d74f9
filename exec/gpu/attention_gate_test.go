package gpu

import (
	"fmt"
	"testing"
)

// TestAttentionGateGPU: attention_gate's kernels (the attention with its
// output gate applied as it writes) against cpu.Attention then
// cpu.SoftplusGate, over a table of shapes: Laguna-S-2.1's sliding layer
// (GQA 9, a 512-slot ring that wraps) and full layer (GQA 6, a 4096-slot
// cache split DecodeSplits ways, at a context shorter than one split, so
// most splits are empty, and at one of many tiles per split); per-head and
// per-element gates; forced split counts; two blocks of query heads per kv
// head (each merging its own splits); head_dim 6, whose partials the merge
// reads element by element; no split. Each case prefills a gated chunk
// (the tensor-core kernel in bf16 at head_dim 64 and 128), fills history,
// then decodes gated steps, alternately appending k, v in the attention
// kernel and with KVAppend before it.
func TestAttentionGateGPU(t *testing.T) {
	k, s := gpu(t)
	cases := []struct {
		name                    string
		nh, nkv, d, window, max int // max: the cache's positions (the slots of a full layer)
		chunk, hist, spl        int
		perElement              bool
	}{
		{"s21-sliding-g9-wrap", 72, 8, 128, 512, 4096, 37, 600, 0, false},
		{"s21-full-g6-shorter-than-a-split", 48, 8, 128, 0, 4096, 5, 10, 0, false},
		{"s21-full-g6-many-tiles-a-split", 48, 8, 128, 0, 4096, 37, 1300, 0, false},
		{"g9-d128-win16-per-element-split3", 18, 2, 128, 16, 200, 20, 30, 3, true},
		{"g20-d64-two-head-blocks-split5", 40, 2, 64, 0, 200, 9, 100, 5, false},
		{"g2-d6-win9-per-element-split2", 4, 2, 6, 9, 100, 7, 30, 2, true},
		{"g4-d40-nosplit", 8, 2, 40, 0, 50, 6, 20, 1, false},
		{"g1-d64-second-token-split4", 4, 4, 64, 0, 64, 1, 0, 4, true},
	}
	for ci, c := range cases {
		for _, dt := range DTypes {
			t.Run(fmt.Sprintf("%s/%v", c.name, dt), func(t *testing.T) {
				G := c.nh
				if c.perElement {
					G = c.nh * c.d
				}
				a := newAttnRig(t, k, s, dt, c.nh, c.nkv, c.d, c.window, c.max, c.chunk, uint64(200+ci)).withGate(G)
				got, want := a.prefill(c.chunk)
				checkClose(t, "prefill chunk", got, want, attnTol(dt))
				a.fill(c.hist)
				for step := 0; step < 3; step++ {
					var got, want []float32
					if step%2 == 0 {
						got, want = a.decodeAppend(c.spl)
					} else {
						got, want = a.decode(c.spl)
					}
					checkClose(t, fmt.Sprintf("decode step %d", step), got, want, attnTol(dt))
				}
			})
		}
	}
}
