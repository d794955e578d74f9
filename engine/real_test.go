package engine

import (
	"context"
	"os"
	"testing"
)

// TestRealModel runs a real Laguna checkpoint end to end when
// LAGC_TEST_MODEL names one (HF directory or GGUF file); it is skipped
// otherwise. LAGC_TEST_DEVICE picks the device (default cpu; a full-size
// model in float32 on the CPU needs four bytes of memory per parameter).
// With a tokenizer in the checkpoint it also checks the text round trip.
func TestRealModel(t *testing.T) {
	path := os.Getenv("LAGC_TEST_MODEL")
	if path == "" {
		t.Skip("LAGC_TEST_MODEL is not set")
	}
	m, err := Open(path, Options{Device: os.Getenv("LAGC_TEST_DEVICE"), MaxContext: 256})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	prompt := []int32{2}
	if tok, err := LoadTokenizer(m.Checkpoint); err == nil {
		text := "def fibonacci(n):"
		prompt = tok.Encode(text, true)
		if got := tok.Decode(tok.Encode(text, false)); got != text {
			t.Errorf("tokenizer round trip: %q -> %q", text, got)
		}
	}
	res, err := m.Generate(context.Background(), prompt, GenOptions{MaxTokens: 16})
	if err != nil {
		t.Fatal(err)
	}
	// Prefill-then-decode must continue exactly as token-by-token feeding.
	again, err := m.Generate(context.Background(), prompt, GenOptions{MaxTokens: 16, Chunk: 1})
	if err != nil {
		t.Fatal(err)
	}
	for i := range res.Generated {
		if i >= len(again.Generated) || again.Generated[i] != res.Generated[i] {
			t.Fatalf("token-by-token prefill diverges at step %d: %v vs %v", i, res.Generated, again.Generated)
		}
	}
	t.Logf("%s on %s: prompt %v -> %v (prefill %v, decode %v)", path, m.Device, prompt, res.Generated, res.PrefillTime, res.DecodeTime)
}
