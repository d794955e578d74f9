package config

import (
	"fmt"
	"math"
)

// floatRange is the range a float key must lie in; the bounds are loose
// (real values are in parentheses) and only keep NaN, infinities and values
// that overflow float32 arithmetic out.
type floatRange struct {
	name     string
	v        float64
	min, max float64
	minOpen  bool // min itself is excluded
}

// checkFloats checks every float of the configuration: a NaN or infinite
// one (possible in GGUF metadata) or an absurd one made generation emit
// token 0 forever.
func (c *Config) checkFloats() error {
	ranges := []floatRange{
		{"rms_norm_eps", c.RMSNormEps, 0, 1, true},                       // 1e-6
		{"moe_routed_scaling_factor", c.RoutedScaling, 0, 1e6, true},     // 2.5
		{"moe_router_logit_softcapping", c.RouterSoftcap, 0, 1e6, false}, // 0 (off) or 30
	}
	for k, r := range c.RopeParameters {
		p := "rope_parameters." + k + "."
		ranges = append(ranges,
			floatRange{p + "rope_theta", r.Theta, 0, 1e15, true},                       // 10000, 500000
			floatRange{p + "partial_rotary_factor", r.PartialRotaryFactor, 0, 1, true}, // 0.5, 1
			floatRange{p + "factor", r.Factor, 0, 1e6, false},                          // 0 (none) or 32
			floatRange{p + "beta_fast", r.BetaFast, 0, 1e6, false},                     // 32
			floatRange{p + "beta_slow", r.BetaSlow, 0, 1e6, false},                     // 1
			floatRange{p + "attention_factor", r.AttentionFactor, 0, 1e6, false},       // 0 (derived)
		)
	}
	for _, r := range ranges {
		ok := !math.IsNaN(r.v) && r.v <= r.max && (r.v > r.min || !r.minOpen && r.v == r.min)
		if !ok {
			lo := "["
			if r.minOpen {
				lo = "("
			}
			return fmt.Errorf("%s = %g: want a number in %s%g, %g]", r.name, r.v, lo, r.min, r.max)
		}
	}
	return nil
}
