package gpu_test

import (
	"regexp"
	"testing"

	"lagc/ckpt"
	"lagc/cuda/cudatest"
)

// TestQGEMVPairDecodeGPU: two S-2.1 layers in llama.cpp's Q4_K_M mixture
// where it raises attn_v (q6_k under q4_k: v's GEMV apart from the q, k,
// gate one) decode with fuseQGEMVPair's qgemv_pair the same tokens and
// logits bit for bit as the plan without it (two launches), eager and
// replayed.
func TestQGEMVPairDecodeGPU(t *testing.T) {
	cudatest.Device(t)
	c, _ := s21q4km(t, 2)
	r, err := ckpt.ParseRecipe("q4_k")
	if err != nil {
		t.Fatal(err)
	}
	r.Rules = []ckpt.TypeRule{{Pattern: regexp.MustCompile(`attn_v`), Type: ckpt.Q6_K}}
	base := compileWith(t, c, r, "LAGC_DISABLE_FUSIONS", "fuseQGEMVPair")
	fused := compileWith(t, c, r, "LAGC_DISABLE_FUSIONS", "")
	if n, n0 := stepLaunches(fused.Plan().Decode.Steps, "qgemv_pair"), stepLaunches(base.Plan().Decode.Steps, "qgemv_pair"); n != 2 || n0 != 0 {
		t.Fatalf("%d qgemv_pair launches in the fused decode plan, %d in the default one; want 2 and 0", n, n0)
	}
	sameDecodes(t, "fuseQGEMVPair", base, fused, spreadPrompt(c, 40), 12)
}
