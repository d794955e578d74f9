package gpu_test

import (
	"regexp"
	"testing"

	"lagc/ckpt"
	"lagc/cuda/cudatest"
	"lagc/engine"
	"lagc/exec/gpu"
	"lagc/ir"
	"lagc/models"
	"lagc/passes"
)

// TestLlamaMixtureS21GPU: two Laguna-S-2.1 layers in llama.cpp's Q4_K_M
// mixture where it raises attn_v and ffn_down (q6_k under q4_k; synthetic
// weights): q, k and the gate concatenated without v (qkvg-concat in part,
// the norm-rope GEMM and the attention's norm-rope fusions on q and k),
// and the routed and shared experts' q6_k downs under q4_k gate and up,
// decode what the plan with the four projections apart decodes (the same
// mixed experts): the same tokens while the greedy choice is clear,
// logits within 0.03 relative L2 (TestGEMMNormRoPEModelGPU's bound: its
// prefill GEMM normalises in another order), eager and graph-replayed.
func TestLlamaMixtureS21GPU(t *testing.T) {
	cudatest.Device(t)
	c, _ := s21q4km(t, 2)
	r, err := ckpt.ParseRecipe("q4_k")
	if err != nil {
		t.Fatal(err)
	}
	r.Rules = []ckpt.TypeRule{{Pattern: regexp.MustCompile(`ffn_down|attn_v|^output\.weight$`), Type: ckpt.Q6_K}}
	// One checkpoint for both plans: synthetic weights made by the executor
	// are seeded by each uploaded weight's index, so attn_qkg and the
	// projections apart (and every weight after them) would differ.
	tensors, _, err := engine.SyntheticTensors(c, r)
	if err != nil {
		t.Fatal(err)
	}
	ck, err := ckpt.Synthetic(c, "synthetic:laguna-s-2.1", tensors, 5)
	if err != nil {
		t.Fatal(err)
	}
	compile := func(disable ...string) *gpu.Executor {
		g, err := models.Build("laguna.yaml", models.LagunaYAML, c, models.BuildOptions{WeightDType: ir.BF16})
		if err != nil {
			t.Fatal(err)
		}
		if err := models.SetRecipeTypes(g, r); err != nil {
			t.Fatal(err)
		}
		if _, err := passes.Run(g, passes.Options{Disable: disable}); err != nil {
			t.Fatal(err)
		}
		ex, err := gpu.Compile(g, ck, gpu.Config{MaxContext: 1024, Chunk: 512})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ex.Close() })
		return ex
	}
	part, apart := compile(), compile("qkvg-concat")
	count := func(ex *gpu.Executor, kernel string) int { return stepLaunches(ex.Plan().Decode.Steps, kernel) }
	if count(part, "qk_norm_rope") != 0 || count(apart, "qk_norm_rope") == 0 || count(part, "moe_down_qgemv_pre") == 0 {
		t.Fatalf("decode: qk_norm_rope launches %d in part (want 0: in the attention), %d apart; q6_k downs %d",
			count(part, "qk_norm_rope"), count(apart, "qk_norm_rope"), count(part, "moe_down_qgemv_pre"))
	}
	closeDecodes(t, apart, part, c.VocabSize, "the plan with the projections apart")
}
