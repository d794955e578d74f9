package gpu_test

import (
	"path/filepath"
	"slices"
	"testing"

	"lagc/engine"
	"lagc/passes"
)

// gpuTrace feeds the prompt whole, then decodes steps tokens greedily,
// keeping every logit row (prompt and decode) and the tokens.
func gpuTrace(t *testing.T, m *engine.Model, prompt []int32, steps int) (rows [][]float32, toks []int32) {
	t.Helper()
	b, V := m.Backend, m.Config.VocabSize
	b.Reset()
	feed := func(in []int32) int32 {
		logits, next, err := b.Forward(in)
		if err != nil {
			t.Fatal(err)
		}
		for i := range in {
			rows = append(rows, append([]float32(nil), logits[i*V:(i+1)*V]...))
		}
		return next[len(next)-1]
	}
	next := feed(prompt)
	for s := 0; s < steps; s++ {
		toks = append(toks, next)
		next = feed([]int32{next})
	}
	return rows, toks
}

// TestFusionPassesGPU is the fusions' gate on the GPU: on every fixture, in
// f32, each fusion pass alone and all of them give the same greedy tokens
// as the unfused pipeline and logits within 1e-4.
func TestFusionPassesGPU(t *testing.T) {
	unfused := []string{"shapes", "cse", "dce", "memplan"}
	configs := map[string][]string{"all (default)": nil}
	for _, p := range passes.FusionPasses {
		configs[p] = []string{"shapes", p, "cse", "dce", "memplan"}
	}
	for _, dir := range fixtureDirs(t) {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			g := readGolden(t, dir)
			m, _ := openGPU(t, dir, engine.Options{DType: "f32", Passes: unfused, MaxContext: 64})
			wantRows, wantToks := gpuTrace(t, m, g.PromptIDs, 24)
			for name, pipeline := range configs {
				m, _ := openGPU(t, dir, engine.Options{DType: "f32", Passes: pipeline, MaxContext: 64})
				rows, toks := gpuTrace(t, m, g.PromptIDs, 24)
				if !slices.Equal(toks, wantToks) {
					t.Errorf("%s: greedy %v, unfused %v", name, toks, wantToks)
				}
				worst := 0.0
				for i := range rows {
					worst = max(worst, maxAbsDiff(rows[i], wantRows[i]))
				}
				// 1e-4: f32 rounding, the fused head norm summing its
				// squares in another order than rms_norm_warp.
				if worst > 1e-4 {
					t.Errorf("%s: logits differ from the unfused run by %.3g (> 1e-4)", name, worst)
				}
				t.Logf("%s: max |logit diff| vs unfused %.2g over %d rows", name, worst, len(rows))
			}
		})
	}
}
