package engine

import (
	"context"
	"lagc/internal/fixture"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func fixtureDirs(t testing.TB) []string { return fixture.Dirs(t) }

// openFirstFixture opens the first fixture on the CPU (closed when the test
// ends) with its goldens.
func openFirstFixture(t *testing.T) (*Model, *fixture.Golden) {
	t.Helper()
	dir := fixtureDirs(t)[0]
	m, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m, readGolden(t, dir)
}

func readGolden(t testing.TB, dir string) *fixture.Golden { return fixture.Read(t, dir) }

func maxAbsDiff(a, b []float32) float64 {
	d := 0.0
	for i := range a {
		d = math.Max(d, math.Abs(float64(a[i])-float64(b[i])))
	}
	return d
}

const logitTol = 1e-3 // issue 3: CPU vs transformers float32

// checkAgainstGolden runs the fixture's prompt and a 24-token greedy
// continuation and compares everything transformers recorded.
func checkAgainstGolden(t *testing.T, m *Model, g *fixture.Golden, chunk int) {
	t.Helper()
	res, err := m.Generate(context.Background(), g.PromptIDs, GenOptions{MaxTokens: len(g.Greedy), Chunk: chunk, Logits: true})
	if err != nil {
		t.Fatal(err)
	}
	if d := maxAbsDiff(res.LastLogits, g.LastLogits); d > logitTol {
		t.Errorf("last-position logits differ from transformers by %.3g (> %g)", d, logitTol)
	}
	worst := 0.0
	for p := range g.PromptLogits {
		worst = math.Max(worst, maxAbsDiff(res.PromptRows[p], g.PromptLogits[p]))
	}
	if worst > logitTol {
		t.Errorf("prompt logits differ from transformers by up to %.3g", worst)
	}
	if !slices.Equal(res.PromptNext, g.Argmax) {
		t.Errorf("per-position argmax\n got %v\nwant %v", res.PromptNext, g.Argmax)
	}
	if !slices.Equal(res.Generated, g.Greedy) {
		t.Errorf("greedy continuation\n got %v\nwant %v", res.Generated, g.Greedy)
	}
	t.Logf("chunk %d: max |logit diff| last %.2g, prompt %.2g", chunk, maxAbsDiff(res.LastLogits, g.LastLogits), worst)
}

func TestFixturesCPU(t *testing.T) {
	for _, dir := range fixtureDirs(t) {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			g := readGolden(t, dir)
			m, err := Open(dir, Options{Device: "cpu"})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			// Whole prompt in one step, then chunks that cross the sliding
			// window, then token by token.
			for _, chunk := range []int{0, 3, 7, 1} {
				checkAgainstGolden(t, m, g, chunk)
			}
		})
	}
}

// TestPrefillEqualsTokenByToken: prefill-then-decode gives exactly the same
// tokens and bitwise the same logits as feeding the prompt one token at a
// time.
func TestPrefillEqualsTokenByToken(t *testing.T) {
	m, g := openFirstFixture(t)
	ctx := context.Background()
	a, err := m.Generate(ctx, g.PromptIDs, GenOptions{MaxTokens: 40})
	if err != nil {
		t.Fatal(err)
	}
	b, err := m.Generate(ctx, g.PromptIDs, GenOptions{MaxTokens: 40, Chunk: 1})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(a.Generated, b.Generated) || !slices.Equal(a.LastLogits, b.LastLogits) {
		t.Fatalf("prefill vs token-by-token differ:\n%v\n%v", a.Generated, b.Generated)
	}
}

func TestGenerateErrors(t *testing.T) {
	m, g := openFirstFixture(t)
	long := make([]int32, g.MaxPos+1)
	for _, c := range []struct {
		name   string
		prompt []int32
		want   string
	}{
		{"empty", nil, "empty"},
		{"out of vocabulary", []int32{1, int32(m.Config.VocabSize)}, "outside the vocabulary"},
		{"negative id", []int32{-1}, "outside the vocabulary"},
		{"longer than the context", long, "longer than the context"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := m.Generate(context.Background(), c.prompt, GenOptions{MaxTokens: 2})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error containing %q", err, c.want)
			}
		})
	}
	// Generation stops at the end of the context rather than failing.
	res, err := m.Generate(context.Background(), g.PromptIDs, GenOptions{MaxTokens: g.MaxPos})
	if err != nil {
		t.Fatal(err)
	}
	if res.StopReason != "context" || len(g.PromptIDs)+len(res.Generated) != g.MaxPos+1 {
		t.Fatalf("stop %q after %d tokens; want context after %d", res.StopReason, len(res.Generated), g.MaxPos+1-len(g.PromptIDs))
	}
}
