package config

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// TestFloatRanges: config.json floats outside any plausible range (JSON has
// no NaN, but 1e300 overflows float32 into infinities) are refused, naming
// the key.
func TestFloatRanges(t *testing.T) {
	data, err := os.ReadFile("../testdata/hostile/config/huge_routed_scaling.json")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ParseHFConfig(data); err == nil || !strings.Contains(err.Error(), "moe_routed_scaling_factor = 1e+300: want a number in (0, 1e+06]") {
		t.Errorf("huge_routed_scaling.json: %v", err)
	}
	base, err := os.ReadFile("../testdata/fixtures/tiny_yarn_perhead/config.json")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		edit func(m map[string]any)
		want string
	}{
		{func(m map[string]any) { m["rms_norm_eps"] = 2.0 }, "rms_norm_eps = 2: want a number in (0, 1]"},
		{func(m map[string]any) { m["moe_router_logit_softcapping"] = -1.0 }, "moe_router_logit_softcapping = -1: want a number in [0, 1e+06]"},
		{func(m map[string]any) { m["moe_routed_scaling_factor"] = 0.0 }, "moe_routed_scaling_factor = 0: want a number in (0, 1e+06]"},
		{func(m map[string]any) {
			rp := m["rope_parameters"].(map[string]any)
			rp["sliding_attention"].(map[string]any)["rope_theta"] = 1e30
		}, "rope_parameters.sliding_attention.rope_theta = 1e+30"},
		{func(m map[string]any) {
			rp := m["rope_parameters"].(map[string]any)
			rp["full_attention"].(map[string]any)["beta_fast"] = -32.0
		}, "rope_parameters.full_attention.beta_fast = -32"},
	}
	for _, tc := range tests {
		var m map[string]any
		if err := json.Unmarshal(base, &m); err != nil {
			t.Fatal(err)
		}
		tc.edit(m)
		data, _ := json.Marshal(m)
		if _, err := ParseHFConfig(data); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("got %v, want %q", err, tc.want)
		}
	}
	if _, err := ParseHFConfig(base); err != nil {
		t.Errorf("the fixture's own config: %v", err)
	}
}
