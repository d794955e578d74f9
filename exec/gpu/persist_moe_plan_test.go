package gpu_test

import (
	"testing"

	"lagc/cuda/cudatest"
)

// TestPersistMoEFusionGPU: with persistMoE (LAGC_ENABLE_FUSIONS) the decode
// plan of a three-layer Laguna-S-2.1 in the q4_k_m recipe (synthetic
// weights, two MoE layers) runs each MoE layer's routed gate+up and down
// as one persist_moe_pair and gives the default plan's tokens and logits
// bit for bit over a prompt and 12 steps, eager and replayed as a graph.
func TestPersistMoEFusionGPU(t *testing.T) {
	cudatest.Device(t)
	c, r := s21q4km(t, 3)
	base := compileWith(t, c, r, "LAGC_ENABLE_FUSIONS", "")
	pm := compileWith(t, c, r, "LAGC_ENABLE_FUSIONS", "persistMoE")
	if n, n0 := stepLaunches(pm.Plan().Decode.Steps, "persist_moe_pair"), stepLaunches(base.Plan().Decode.Steps, "persist_moe_pair"); n != 2 || n0 != 0 {
		t.Fatalf("%d persist_moe_pair launches in the decode plan with persistMoE (want 2), %d in the default one", n, n0)
	}
	sameDecodes(t, "persistMoE", base, pm, spreadPrompt(c, 40), 12)
}
