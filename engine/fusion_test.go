package engine

import (
	"fmt"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"testing"

	"lagc/passes"
)

// The fusion passes end to end on the CPU: each pass alone, all of them,
// and the order-independent pair swapped, on every fixture, against the
// unfused pipeline. Greedy tokens must be identical and every logit of the
// prompt and of each decode step within fusionTol (the fused kernels are
// built to give the same bits; the tolerance is the issue's).

const fusionTol = 1e-5

var unfusedPipeline = []string{"shapes", "cse", "dce", "memplan"}

// stepTrace is everything a run computed: logits of every position, prompt
// and decoded, and the greedy tokens.
type stepTrace struct {
	rows   [][]float32
	tokens []int32
}

// traceRun feeds the prompt in chunks of chunk tokens (0: whole), then
// decodes steps tokens greedily one at a time, recording every logit row.
func traceRun(t *testing.T, m *Model, prompt []int32, chunk, steps int) *stepTrace {
	t.Helper()
	b, V := m.Backend, m.Config.VocabSize
	b.Reset()
	tr := &stepTrace{}
	feed := func(toks []int32) int32 {
		logits, next, err := b.Forward(toks)
		if err != nil {
			t.Fatal(err)
		}
		for i := range toks {
			tr.rows = append(tr.rows, logits[i*V:(i+1)*V])
		}
		return next[len(next)-1]
	}
	var next int32
	for i := 0; i < len(prompt); {
		n := len(prompt) - i
		if chunk > 0 {
			n = min(n, chunk)
		}
		next = feed(prompt[i : i+n])
		i += n
	}
	for s := 0; s < steps && b.Pos() < b.MaxPos(); s++ {
		tr.tokens = append(tr.tokens, next)
		next = feed([]int32{next})
	}
	return tr
}

func TestFusionPassesCPU(t *testing.T) {
	configs := []struct {
		name   string
		passes []string
	}{
		{"all (default pipeline)", nil},
		{"merge before gate-up", []string{"shapes", "qkvg-concat", "norm-rope", "attention-gate", "shared-expert-merge", "gate-up-fuse", "residual-fold", "expert-order", "cse", "dce", "memplan"}},
	}
	for _, p := range passes.FusionPasses {
		configs = append(configs, struct {
			name   string
			passes []string
		}{p, []string{"shapes", p, "cse", "dce", "memplan"}})
	}
	for _, dir := range fixtureDirs(t) {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			g := readGolden(t, dir)
			base, err := Open(dir, Options{Passes: unfusedPipeline})
			if err != nil {
				t.Fatal(err)
			}
			defer base.Close()
			baseOps := base.Graph.OpCounts()
			const steps = 24
			want := map[int]*stepTrace{}
			for _, chunk := range []int{0, 3} {
				want[chunk] = traceRun(t, base, g.PromptIDs, chunk, steps)
			}
			for _, c := range configs {
				t.Run(c.name, func(t *testing.T) {
					m, err := Open(dir, Options{Passes: c.passes})
					if err != nil {
						t.Fatal(err)
					}
					defer m.Close()
					// The pass must have rewritten the graph, except the
					// shared-expert merge where the widths differ.
					changed := !maps.Equal(baseOps, m.Graph.OpCounts())
					wantChange := c.name != "shared-expert-merge" || m.Config.SharedExpertSize == m.Config.MoEIntermediateSize
					if changed != wantChange {
						t.Errorf("graph changed %v, want %v: ops %v", changed, wantChange, m.Graph.OpCounts())
					}
					for _, chunk := range []int{0, 3} {
						got := traceRun(t, m, g.PromptIDs, chunk, steps)
						if !slices.Equal(got.tokens, want[chunk].tokens) {
							t.Fatalf("chunk %d: greedy tokens\n got %v\nwant %v", chunk, got.tokens, want[chunk].tokens)
						}
						worst := 0.0
						for i, row := range got.rows {
							worst = math.Max(worst, maxAbsDiff(row, want[chunk].rows[i]))
						}
						if worst > fusionTol || math.IsNaN(worst) {
							t.Fatalf("chunk %d: logits differ from the unfused run by %g (> %g)", chunk, worst, fusionTol)
						}
						t.Logf("chunk %d: %d logit rows, max |diff| %s", chunk, len(got.rows), fmtDiff(worst))
					}
				})
			}
		})
	}
}

func fmtDiff(d float64) string {
	if d == 0 {
		return "0 (bitwise)"
	}
	return fmt.Sprintf("%.3g", d)
}
