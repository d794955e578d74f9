package config

import (
	"encoding/json"
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
	if c, err := ParseHFConfig(tinyHFConfig(t, map[string]any{"num_hidden_layers": MaxLayers, "layer_types": nil})); err != nil || c.NumLayers != MaxLayers {
		t.Fatalf("%d layers: %v", MaxLayers, err)
	}
	cases := []struct {
		edits map[string]any
		want  string
	}{
		{map[string]any{"num_hidden_layers": 1 << 40, "layer_types": nil}, "num_hidden_layers must be in [1, 1024], got 1099511627776"},
		{map[string]any{"num_hidden_layers": 1025, "layer_types": nil}, "num_hidden_layers must be in [1, 1024], got 1025"},
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

func TestFirstLayers(t *testing.T) {
	full, err := Preset("laguna-s-2.1")
	if err != nil {
		t.Fatal(err)
	}
	c, err := full.FirstLayers(4)
	if err != nil {
		t.Fatal(err)
	}
	if c.NumLayers != 4 || len(c.LayerTypes) != 4 || c.IsMoE(0) || !c.IsMoE(3) || c.IsSliding(0) || !c.IsSliding(1) || full.NumLayers != 48 {
		t.Fatalf("truncated: %+v", c)
	}
	if same, _ := full.FirstLayers(0); same != full {
		t.Fatal("0 layers should keep the config")
	}
}
