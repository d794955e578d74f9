package models

import (
	"lagc/config"
	"os"
	"testing"
)

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
		c, err := config.ParseHFConfig(data)
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
