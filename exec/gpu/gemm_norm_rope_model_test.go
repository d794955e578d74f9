package gpu_test

import (
	"testing"

	"lagc/ckpt"
	"lagc/config"
	"lagc/cuda/cudatest"
	"lagc/exec/gpu"
	"lagc/internal/fixture"
	"lagc/lower"
)

// TestGEMMNormRoPEModelGPU: a two-layer Laguna-S-2.1 in the q4_k_m recipe
// (synthetic weights; a full layer with the dense MLP, a sliding MoE
// layer) prefilling a 300-token prompt on gemm_wgmma_nr (its split GEMMs
// normalising and rotating q and k, fusePrefillGEMMNormRoPE) decodes what
// the plan without the fusion decodes: the same tokens while the greedy
// choice is clear (a gap above 0.05), logits within 0.03 relative L2 of
// its, the bound the fixtures hold against transformers, eager and
// graph-replayed. The fusion's square sums run in another order, so bits
// may differ; with synthetic weights that spread the routing (since
// 2026-12-04), isolated steps measured 0.0134 and 0.0105 where the others
// stay near 0.0025 (H200): a discrete choice going the other way, most
// likely a near-tied expert, not a drift.
func TestGEMMNormRoPEModelGPU(t *testing.T) {
	cudatest.Device(t)
	c, r := s21q4km(t, 2)
	compile := func(off string) *gpu.Executor {
		t.Setenv("LAGC_DISABLE_FUSIONS", off)
		ex, err := gpu.Compile(bf16Graph(t, c, r), nil, gpu.Config{MaxContext: 1024, Chunk: 512})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ex.Close() })
		return ex
	}
	fused, plain := compile(""), compile("fusePrefillGEMMNormRoPE")
	count := func(ex *gpu.Executor, kernel string) int { return stepLaunches(ex.Plan().Prefill.Steps, kernel) }
	if count(fused, "gemm_wgmma_nr") != 2 || count(fused, "qk_norm_rope") != 0 || count(plain, "gemm_wgmma_nr") != 0 {
		t.Fatalf("gemm_wgmma_nr launches: %d fused (want 2), %d without; qk_norm_rope fused %d", count(fused, "gemm_wgmma_nr"),
			count(plain, "gemm_wgmma_nr"), count(fused, "qk_norm_rope"))
	}
	closeDecodes(t, plain, fused, c.VocabSize, "the plan's without the fusion")
}

// closeDecodes prefills a 300-token prompt into ref and got, then decodes 8
// tokens greedily, eager and graph-replayed: the prefill's last row and
// every step's logits within 0.03 relative L2 of ref's (the bound the
// fixtures hold against transformers), the same tokens while ref's greedy
// choice is clear (a gap above 0.05: the prefill's last row's for the
// first token, then each step's); what names ref in the messages.
func closeDecodes(t *testing.T, ref, got *gpu.Executor, vocab int, what string) {
	t.Helper()
	prompt := make([]int32, 300)
	for i := range prompt {
		prompt[i] = int32(i * 977 % vocab)
	}
	// The prefill's last row: the first token's logits.
	last := func(ex *gpu.Executor) []float32 {
		ex.Reset()
		logits, _, err := ex.ForwardLast(prompt)
		if err != nil {
			t.Fatal(err)
		}
		return logits
	}
	pa, pb := last(ref), last(got)
	pg := gap(pa)
	if rel := fixture.RelL2(pb, pa); rel > 0.03 {
		t.Fatalf("prefill's last row: logits %.3g from %s (relative L2)", rel, what)
	} else {
		t.Logf("prefill's last row: logits %.3g from %s (relative L2), gap %.3g", rel, what, pg)
	}
	for _, eager := range []bool{true, false} {
		ref.SetEager(eager)
		got.SetEager(eager)
		ta, la, gaps := decodeRun(t, ref, prompt, false, 8)
		tb, lb, _ := decodeRun(t, got, prompt, false, 8)
		if ta[0] != tb[0] && pg < nearTie {
			t.Logf("eager %v: first token %d, %s %d: a near tie in the prefill's last row (gap %.3g)", eager, tb[0], what, ta[0], pg)
			continue
		}
		for i := range ta {
			if ta[i] != tb[i] {
				g := pg
				if i > 0 {
					g = gaps[i-1]
				}
				t.Fatalf("eager %v, step %d: token %d, %s %d (gap of the logits choosing it %.3g)", eager, i, tb[i], what, ta[i], g)
			}
			rel := fixture.RelL2(lb[i], la[i])
			t.Logf("eager %v, step %d: logits %.3g from %s (relative L2), gap %.3g", eager, i, rel, what, gaps[i])
			if rel > 0.03 {
				t.Fatalf("eager %v, step %d: logits %.3g from %s (relative L2)", eager, i, rel, what)
			}
			if gaps[i] < 0.05 {
				break // a near tie: later tokens may differ
			}
		}
	}
}

// s21q4km is Laguna-S-2.1's first n layers and the q4_k_m recipe.
func s21q4km(t *testing.T, n int) (*config.Config, *ckpt.Recipe) {
	t.Helper()
	cfg, err := config.Preset("laguna-s-2.1")
	if err != nil {
		t.Fatal(err)
	}
	c, err := cfg.FirstLayers(n)
	if err != nil {
		t.Fatal(err)
	}
	r, err := ckpt.ParseRecipe("q4_k_m")
	if err != nil {
		t.Fatal(err)
	}
	return c, r
}

// stepLaunches is the number of launches of kernel in steps.
func stepLaunches(steps []lower.Step, kernel string) int {
	n := 0
	for _, st := range steps {
		for _, l := range st.Launches {
			if l.Kernel == kernel {
				n++
			}
		}
	}
	return n
}
