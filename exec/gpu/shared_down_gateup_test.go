package gpu_test

import (
	"testing"

	"lagc/cuda/cudatest"
)

// TestSharedDownGateUpGPU: with sharedDownGateUp (the default), the decode
// plan of a two-layer Laguna-S-2.1 in the q4_k_m recipe (synthetic
// weights) runs the shared down GEMV in the routed gate+up's launch and
// its store and tail in qgemv_join_norm, and gives the tokens and logits
// of the plan without it bit for bit over a prompt and 12 steps, eager and
// replayed as a graph, with the join's one-load form (S-2.1's row) and
// with its two-pass form (LAGC_JOIN_TWO_PASS).
func TestSharedDownGateUpGPU(t *testing.T) {
	cudatest.Device(t)
	c, r := s21q4km(t, 2)
	base := compileWith(t, c, r, "LAGC_DISABLE_FUSIONS", "sharedDownGateUp")
	ex := compileWith(t, c, r, "LAGC_DISABLE_FUSIONS", "")
	count := func(kernel string) (int, int) {
		return stepLaunches(base.Plan().Decode.Steps, kernel), stepLaunches(ex.Plan().Decode.Steps, kernel)
	}
	for _, k := range []string{"moe_gateup_qgemv_xin_trig", "qgemv_join_norm"} {
		if b, n := count(k); b != 0 || n != 1 {
			t.Fatalf("%d %s launches in the default decode plan (want 1), %d without sharedDownGateUp", n, k, b)
		}
	}
	sameDecodes(t, "sharedDownGateUp", base, ex, spreadPrompt(c, 40), 12)
	// The join's second form (y stored, fenced and read again), which it
	// takes where the norm's one-load path does not apply.
	t.Setenv("LAGC_NVRTC_OPTIONS", "^qgemv_join_norm$:-DLAGC_JOIN_TWO_PASS")
	two := compileWith(t, c, r, "LAGC_DISABLE_FUSIONS", "")
	sameDecodes(t, "sharedDownGateUp, the join in two passes", base, two, spreadPrompt(c, 40), 12)
}
