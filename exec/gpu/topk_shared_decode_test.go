package gpu_test

import (
	"testing"

	"lagc/ckpt"
	"lagc/cuda/cudatest"
)

// TestTopKSharedDecodeGPU: a decode MoE layer whose shared expert runs
// among the routed ones (S-2.1's first 3 layers in pure q4_k, as the
// iq4_xs recipe and a bf16 model run theirs) decodes with fuseTopKShared's
// router_fused_shared, without moe_add_shared, the same tokens and logits
// bit for bit as the plan without it, eager and replayed.
func TestTopKSharedDecodeGPU(t *testing.T) {
	cudatest.Device(t)
	c, _ := s21q4km(t, 3)
	r, err := ckpt.ParseRecipe("q4_k")
	if err != nil {
		t.Fatal(err)
	}
	base := compileWith(t, c, r, "LAGC_DISABLE_FUSIONS", "fuseTopKShared")
	fused := compileWith(t, c, r, "LAGC_DISABLE_FUSIONS", "")
	for k, want := range map[string][2]int{"router_fused_shared": {2, 0}, "moe_add_shared": {0, 2}} {
		if n, n0 := stepLaunches(fused.Plan().Decode.Steps, k), stepLaunches(base.Plan().Decode.Steps, k); n != want[0] || n0 != want[1] {
			t.Fatalf("%d %s launches in the fused decode plan, %d in the default one; want %d and %d", n, k, n0, want[0], want[1])
		}
	}
	sameDecodes(t, "fuseTopKShared", base, fused, spreadPrompt(c, 40), 12)
}
