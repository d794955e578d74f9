package engine

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestGenerateCancel: cancelling (Ctrl-C in lagc run) stops decoding
// cleanly, keeping the tokens produced so far; a context cancelled before
// prefill ends the call the same way, with nothing generated.
func TestGenerateCancel(t *testing.T) {
	m, g := openFirstFixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	res, err := m.Generate(ctx, g.PromptIDs, GenOptions{MaxTokens: 20, OnToken: func(id int32) error {
		cancel()
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	if res.StopReason != "canceled" || len(res.Generated) != 1 || res.Generated[0] != g.Greedy[0] {
		t.Fatalf("stop %q with %v; want canceled after [%d]", res.StopReason, res.Generated, g.Greedy[0])
	}
	res, err = m.Generate(ctx, g.PromptIDs, GenOptions{MaxTokens: 2})
	if err != nil || res.StopReason != "canceled" || res.Fed != 0 || len(res.Generated) != 0 {
		t.Fatalf("prefill with a cancelled context: %+v, %v; want canceled with nothing fed", res, err)
	}
	// The model is usable again afterwards.
	res, err = m.Generate(context.Background(), g.PromptIDs, GenOptions{MaxTokens: 3})
	if err != nil || len(res.Generated) != 3 {
		t.Fatalf("after cancel: %v, %v", res, err)
	}
}

// recordBackend records the size of every step and can cancel a context
// after a number of steps.
type recordBackend struct {
	Backend
	sizes  *[]int
	after  int
	cancel context.CancelFunc
}

func (b recordBackend) Forward(tokens []int32) ([]float32, []int32, error) {
	*b.sizes = append(*b.sizes, len(tokens))
	if b.cancel != nil && len(*b.sizes) == b.after {
		b.cancel()
	}
	return b.Backend.Forward(tokens)
}

// TestPrefillCancelBetweenChunks: Ctrl-C during prefill is noticed at the
// next chunk: the call returns "canceled" without an error, having fed only
// the chunks before, and the sequence holds exactly those tokens.
func TestPrefillCancelBetweenChunks(t *testing.T) {
	m, g := openFirstFixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	var sizes []int
	m.Backend = recordBackend{m.Backend, &sizes, 2, cancel}
	res, err := m.Generate(ctx, g.PromptIDs, GenOptions{MaxTokens: 5, Chunk: 2})
	if err != nil {
		t.Fatal(err)
	}
	if res.StopReason != "canceled" || res.Fed != 4 || len(res.Generated) != 0 || !slices.Equal(sizes, []int{2, 2}) {
		t.Fatalf("stop %q, fed %d, generated %v, steps %v; want canceled after two chunks of 2", res.StopReason, res.Fed, res.Generated, sizes)
	}
	if !slices.Equal(m.Sequence(), g.PromptIDs[:4]) {
		t.Fatalf("sequence %v, want the 4 tokens fed", m.Sequence())
	}
}

// TestChunkTime: with ChunkTime, the first step is small and later steps
// follow the measured speed, bounded by Chunk; the result is the same.
func TestChunkTime(t *testing.T) {
	m, g := openFirstFixture(t)
	prompt := slices.Concat(g.PromptIDs, g.PromptIDs, g.PromptIDs)
	n := len(prompt)
	if n <= firstChunk+1 || n+4 > g.MaxPos {
		t.Fatalf("a prompt of %d tokens does not exercise the chunk sizes within the context %d", n, g.MaxPos)
	}
	want, err := m.Generate(context.Background(), prompt, GenOptions{MaxTokens: 4})
	if err != nil {
		t.Fatal(err)
	}
	inner := m.Backend
	ones := make([]int, n-firstChunk)
	for i := range ones {
		ones[i] = 1
	}
	for _, c := range []struct {
		name  string
		chunk int
		time  time.Duration
		want  []int
	}{
		{"fast steps grow to the rest", 0, time.Hour, []int{firstChunk, n - firstChunk}},
		{"fast steps stay within Chunk", 10, time.Hour, []int{10, 10, 10, n - 30}},
		{"slow steps shrink to one token", 0, time.Nanosecond, append([]int{firstChunk}, ones...)},
	} {
		t.Run(c.name, func(t *testing.T) {
			var sizes []int
			m.Backend = recordBackend{Backend: inner, sizes: &sizes}
			defer func() { m.Backend = inner }()
			res, err := m.Generate(context.Background(), prompt, GenOptions{MaxTokens: 4, Chunk: c.chunk, ChunkTime: c.time})
			if err != nil {
				t.Fatal(err)
			}
			if steps := sizes[:len(sizes)-3]; !slices.Equal(steps, c.want) { // 3 decode steps follow
				t.Fatalf("prefill steps %v, want %v", steps, c.want)
			}
			if !slices.Equal(res.Generated, want.Generated) {
				t.Fatalf("generated %v, want %v", res.Generated, want.Generated)
			}
		})
	}
}

// TestContinueMatchesGenerate: continuing a sequence (a chat's next turn)
// feeds only the new tokens and generates exactly what feeding the whole
// sequence from position 0 does.
func TestContinueMatchesGenerate(t *testing.T) {
	m, g := openFirstFixture(t)
	ctx := context.Background()
	first, err := m.Generate(ctx, g.PromptIDs, GenOptions{MaxTokens: 5})
	if err != nil {
		t.Fatal(err)
	}
	// The last generated token is not in the cache yet: the next turn feeds it.
	cached := slices.Clone(m.Sequence())
	if want := append(slices.Clone(g.PromptIDs), first.Generated[:4]...); !slices.Equal(cached, want) {
		t.Fatalf("sequence %v, want prompt + the first 4 generated tokens", cached)
	}
	turn := append([]int32{first.Generated[4]}, g.PromptIDs[:3]...)
	cont, err := m.Continue(ctx, turn, GenOptions{MaxTokens: 6})
	if err != nil {
		t.Fatal(err)
	}
	if cont.Start != len(cached) || len(cont.PromptNext) != len(turn) {
		t.Fatalf("start %d, %d prompt positions; want %d and %d", cont.Start, len(cont.PromptNext), len(cached), len(turn))
	}
	full, err := m.Generate(ctx, append(cached, turn...), GenOptions{MaxTokens: 6})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cont.Generated, full.Generated) {
		t.Fatalf("continued %v, from scratch %v", cont.Generated, full.Generated)
	}
	if d := maxAbsDiff(cont.LastLogits, full.LastLogits); d > 1e-5 {
		t.Fatalf("last logits differ by %g", d)
	}
}

func TestContinueErrors(t *testing.T) {
	m, g := openFirstFixture(t)
	ctx := context.Background()
	if _, err := m.Continue(ctx, nil, GenOptions{}); err == nil || !strings.Contains(err.Error(), "nothing to feed") {
		t.Fatalf("empty continuation: %v", err)
	}
	if _, err := m.Generate(ctx, g.PromptIDs, GenOptions{MaxTokens: 1}); err != nil {
		t.Fatal(err)
	}
	long := make([]int32, g.MaxPos)
	if _, err := m.Continue(ctx, long, GenOptions{}); err == nil || !strings.Contains(err.Error(), "exceed the context") {
		t.Fatalf("too long a continuation: %v", err)
	}
	// The backend driven directly: Continue refuses rather than guess.
	if _, _, err := m.Backend.Forward([]int32{1}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Continue(ctx, []int32{1}, GenOptions{}); err == nil || !strings.Contains(err.Error(), "outside Generate/Continue") {
		t.Fatalf("out-of-step backend: %v", err)
	}
}

// TestGenerateStop: an end-of-generation id ends generation and is kept.
func TestGenerateStop(t *testing.T) {
	m, g := openFirstFixture(t)
	stopAt := g.Greedy[3]
	res, err := m.Generate(context.Background(), g.PromptIDs, GenOptions{MaxTokens: 20, Stop: func(id int32) bool { return id == stopAt }})
	if err != nil {
		t.Fatal(err)
	}
	if res.StopReason != "stop" || res.Generated[len(res.Generated)-1] != stopAt {
		t.Fatalf("stop %q, generated %v, want a stop at %d", res.StopReason, res.Generated, stopAt)
	}
}

// TestOnTokenStop: OnToken returning ErrStop ends generation after that
// token with reason "stop"; any other error is returned.
func TestOnTokenStop(t *testing.T) {
	m, g := openFirstFixture(t)
	n := 0
	res, err := m.Generate(context.Background(), g.PromptIDs, GenOptions{MaxTokens: 20, OnToken: func(int32) error {
		if n++; n == 3 {
			return ErrStop
		}
		return nil
	}})
	if err != nil || res.StopReason != "stop" || !slices.Equal(res.Generated, g.Greedy[:3]) {
		t.Fatalf("%v, %+v; want stop after %v", err, res, g.Greedy[:3])
	}
	boom := errors.New("boom")
	if _, err := m.Generate(context.Background(), g.PromptIDs, GenOptions{MaxTokens: 20, OnToken: func(int32) error { return boom }}); !errors.Is(err, boom) {
		t.Fatalf("OnToken error: %v", err)
	}
	if len(m.Sequence()) != 0 {
		t.Fatalf("after an error the sequence holds %d tokens; want a reset", len(m.Sequence()))
	}
}
