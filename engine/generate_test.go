package engine

import (
	"context"
	"testing"
)

// TestGenerateCancel: cancelling (Ctrl-C in lagc run) stops decoding
// cleanly, keeping the tokens produced so far; a cancelled prefill is an
// error.
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
	if _, err := m.Generate(ctx, g.PromptIDs, GenOptions{MaxTokens: 2}); err == nil {
		t.Fatal("prefill with a cancelled context succeeded")
	}
	// The model is usable again afterwards.
	res, err = m.Generate(context.Background(), g.PromptIDs, GenOptions{MaxTokens: 3})
	if err != nil || len(res.Generated) != 3 {
		t.Fatalf("after cancel: %v, %v", res, err)
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
