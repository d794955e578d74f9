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

// TestGPUBatchRewind: the GPU as a one-slot Batcher (what lagc serve
// drives): a prompt sharing a prefix with the previous sequence continues
// from the rewound cache as it runs from scratch; a rewind past a wrapped
// sliding-window ring fails and changes nothing.
func TestGPUBatchRewind(t *testing.T) {
	dir := fixtureDirs(t)[len(fixtureDirs(t))-1]
	g := readGolden(t, dir)
	m, ex := openGPU(t, dir, engine.Options{DType: "f32", MaxContext: 512, Chunk: 64})
	b, err := m.Batch()
	if err != nil {
		t.Fatal(err)
	}
	if b.Slots() != 1 {
		t.Fatalf("%d slots, want 1", b.Slots())
	}
	// The smallest sliding window: a rewind works until its ring wraps.
	window := 0
	for _, kv := range ex.Plan().KV {
		if kv.Window > 0 && (window == 0 || kv.Slots < window) {
			window = kv.Slots
		}
	}
	p := g.PromptIDs
	if window > 0 && len(p) > window {
		p = p[:window]
	}
	if len(p) < 4 {
		t.Fatalf("a first sequence of %d tokens (window %d): too short", len(p), window)
	}
	tail := []int32{p[1], p[0], p[2]}
	b.ResetSlot(0)
	fresh, _, err := b.Step([]engine.Segment{{Slot: 0, Tokens: slices.Concat(p[:3], tail)}})
	if err != nil {
		t.Fatal(err)
	}
	b.ResetSlot(0)
	if _, _, err := b.Step([]engine.Segment{{Slot: 0, Tokens: p}}); err != nil {
		t.Fatal(err)
	}
	if err := b.Rewind(0, 3); err != nil {
		t.Fatal(err)
	}
	if b.SlotLen(0) != 3 {
		t.Fatalf("after Rewind(0, 3) the slot holds %d positions", b.SlotLen(0))
	}
	got, _, err := b.Step([]engine.Segment{{Slot: 0, Tokens: tail}})
	if err != nil {
		t.Fatal(err)
	}
	if d := maxAbsDiff(got, fresh[len(fresh)-len(got):]); d > 1e-3 {
		t.Errorf("after a rewind, the tail's logits differ from a fresh run by %g", d)
	}
	if _, _, err := b.Step([]engine.Segment{{Slot: 1, Tokens: tail}}); err == nil {
		t.Error("a step on slot 1 of a one-slot GPU batcher succeeded")
	}
	if window == 0 || window+2 > ex.MaxPos() {
		t.Skipf("no sliding window below the context (%d)", ex.MaxPos())
	}
	// Fill past the window: the ring wraps.
	b.ResetSlot(0)
	long := make([]int32, window+2)
	for i := range long {
		long[i] = p[i%len(p)]
	}
	if _, _, err := b.Step([]engine.Segment{{Slot: 0, Tokens: long}}); err != nil {
		t.Fatal(err)
	}
	if err := b.Rewind(0, 3); err == nil {
		t.Errorf("rewound to 3 after %d positions in a ring of %d", len(long), window)
	}
	if b.SlotLen(0) != len(long) {
		t.Errorf("a failed rewind changed the slot to %d positions", b.SlotLen(0))
	}
}
