package gpu_test

import (
	"testing"

	"lagc/cuda/cudatest"
)

// TestNormPreGPU: with fuseNormPre and fuseQGEMVPre (the default), the
// decode plan of a two-layer Laguna-S-2.1 in the q4_k_m recipe (synthetic
// weights) runs o_proj as qgemv_norm_pre, prefetching its weights while the
// attention runs, and the GEMV after the MoE layer's join as qgemv_pre, and
// gives the tokens and logits of the plan without either bit for bit over
// a prompt and 12 steps, eager and replayed as a graph.
func TestNormPreGPU(t *testing.T) {
	cudatest.Device(t)
	c, r := s21q4km(t, 2)
	base := compileWith(t, c, r, "LAGC_DISABLE_FUSIONS", "fuseNormPre")
	ex := compileWith(t, c, r, "LAGC_DISABLE_FUSIONS", "")
	if b, n := stepLaunches(base.Plan().Decode.Steps, "qgemv_norm_pre"), stepLaunches(ex.Plan().Decode.Steps, "qgemv_norm_pre"); b != 0 || n != 2 {
		t.Fatalf("%d qgemv_norm_pre launches in the default decode plan (want 2), %d without fuseNormPre", n, b)
	}
	sameDecodes(t, "fuseNormPre", base, ex, spreadPrompt(c, 40), 12)
	// fuseQGEMVPre: the GEMV after the join (here the LM head) likewise.
	noq := compileWith(t, c, r, "LAGC_DISABLE_FUSIONS", "fuseQGEMVPre")
	if b, n := stepLaunches(noq.Plan().Decode.Steps, "qgemv_pre"), stepLaunches(ex.Plan().Decode.Steps, "qgemv_pre"); b != 0 || n != 1 {
		t.Fatalf("%d qgemv_pre launches in the default decode plan (want 1), %d without fuseQGEMVPre", n, b)
	}
	sameDecodes(t, "fuseQGEMVPre", noq, ex, spreadPrompt(c, 40), 12)
}
