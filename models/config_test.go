package models

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// tinyHFConfig returns a valid config.json for a small Laguna with edits
// applied (a nil value deletes the key).
func tinyHFConfig(t *testing.T, edits map[string]any) []byte {
	t.Helper()
	c := map[string]any{
		"model_type": "laguna", "vocab_size": 64, "hidden_size": 32, "intermediate_size": 48,
		"num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8,
		"max_position_embeddings": 128, "sliding_window": 16, "num_experts": 4, "num_experts_per_tok": 2,
		"moe_intermediate_size": 8, "shared_expert_intermediate_size": 8,
		"layer_types": []string{FullAttention, SlidingAttention},
	}
	for k, v := range edits {
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
	}
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestParseHFConfigLimits: sizes that would exhaust memory while building
// the graph, or overflow a weight's element count, are errors that name the
// keys, not a crash or a wrong parameter count.
func TestParseHFConfigLimits(t *testing.T) {
	if _, err := ParseHFConfig(tinyHFConfig(t, nil)); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	cases := []struct {
		edits map[string]any
		want  string
	}{
		{map[string]any{"num_hidden_layers": 1 << 40, "layer_types": nil}, "num_hidden_layers must be in [1, 65536]"},
		{map[string]any{"num_hidden_layers": 0}, "num_hidden_layers must be in"},
		{map[string]any{"hidden_size": 1 << 62}, "vocab_size x hidden_size"},
		{map[string]any{"vocab_size": 1 << 40}, "vocab_size x hidden_size"},
		{map[string]any{"head_dim": 1 << 36}, "query heads (4) x head_dim x hidden_size"},
		{map[string]any{"num_experts": 1 << 40, "num_experts_per_tok": 1}, "num_experts x moe_intermediate_size x hidden_size"},
		{map[string]any{"intermediate_size": 1 << 40}, "intermediate_size x hidden_size"},
		{map[string]any{"max_position_embeddings": -5}, "max_position_embeddings must be positive"},
		{map[string]any{"max_position_embeddings": 0}, "max_position_embeddings must be positive"},
	}
	for _, c := range cases {
		_, err := ParseHFConfig(tinyHFConfig(t, c.edits))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: got %v, want an error containing %q", c.edits, err, c.want)
		}
	}
}

// FuzzParseHFConfig: any config.json gives a configuration that validates,
// or an error; never a panic. An accepted configuration builds the graph
// or reports why not.
func FuzzParseHFConfig(f *testing.F) {
	for _, p := range []string{"../testdata/fixtures/tiny_yarn_perhead/config.json", "tiny/config.json"} {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(`{"model_type": "laguna", "num_hidden_layers": 2, "layer_types": ["full_attention"]}`))
	f.Add([]byte(`{"model_type": "laguna", "gating": "per-element", "eos_token_id": [2, 24], "rope_parameters": {"full_attention": {"rope_type": "yarn", "factor": 4}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseHFConfig(data)
		if err != nil {
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("accepted a configuration that does not validate: %v", err)
		}
		if c.NumLayers > 64 || c.HiddenSize > 4096 || c.VocabSize > 1<<16 || c.NumExperts > 1024 {
			return // valid, but slow to build in a fuzz loop
		}
		_, _ = BuildLaguna(c)
	})
}
