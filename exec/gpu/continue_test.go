package gpu_test

import (
	"context"
	"slices"
	"testing"

	"lagc/engine"
)

// TestContinueAfterDecode: a chat's next turn on the GPU (prefill of new
// tokens after decode steps, from a position that is no multiple of the
// chunk, crossing the sliding window) generates what feeding the whole
// sequence from position 0 does: the same tokens in f32.
func TestContinueAfterDecode(t *testing.T) {
	dir := fixtureDirs(t)[len(fixtureDirs(t))-1]
	g := readGolden(t, dir)
	m, _ := openGPU(t, dir, engine.Options{DType: "f32", MaxContext: 512, Chunk: 64})
	ctx := context.Background()
	for _, n := range []int{1, 150} { // one decode step, then prefill chunks
		first, err := m.Generate(ctx, g.PromptIDs, engine.GenOptions{MaxTokens: 20})
		if err != nil {
			t.Fatal(err)
		}
		// The last generated token is not cached yet: the turn starts with it.
		cached := slices.Clone(m.Sequence())
		turn := []int32{first.Generated[len(first.Generated)-1]}
		for len(turn) < n {
			turn = append(turn, g.PromptIDs...)
		}
		turn = turn[:n]
		cont, err := m.Continue(ctx, turn, engine.GenOptions{MaxTokens: 20})
		if err != nil {
			t.Fatal(err)
		}
		full, err := m.Generate(ctx, slices.Concat(cached, turn), engine.GenOptions{MaxTokens: 20})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(cont.Generated, full.Generated) {
			t.Errorf("%d new tokens after %d cached: continued %v, from scratch %v", n, len(cached), cont.Generated, full.Generated)
		}
		if d := maxAbsDiff(cont.LastLogits, full.LastLogits); d > 1e-3 {
			t.Errorf("%d new tokens: last logits differ by %g", n, d)
		}
	}
}
