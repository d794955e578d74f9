// Package prep computes on the host what kernels read but the graph does
// not hold: the rotary embedding's frequency tables and derived weights
// (concatenations the fusion passes ask for). The CPU and the CUDA
// executors both use it, so neither depends on the other.
package prep

import (
	"fmt"
	"math"

	"lagc/config"
)

// RopeParams are the attributes of the rope op for one layer type.
type RopeParams struct {
	RotaryDim int     // rotated channels per head (even); the rest pass through
	Theta     float64 // base
	Type      string  // "default" or "yarn" ("" means default)
	// YaRN only.
	Factor          float64 // s
	OriginalContext int     // L0
	BetaFast        float64 // 0: 32
	BetaSlow        float64 // 0: 1
	AttentionFactor float64 // 0: derived, 0.1*ln(s)+1 (1 when s <= 1)
}

// RopeParamsOf returns the rope attributes of a layer type from the model
// configuration, for heads of headDim channels.
func RopeParamsOf(r config.Rope, headDim int) RopeParams {
	return RopeParams{
		RotaryDim: int(float64(headDim) * r.PartialRotaryFactor),
		Theta:     r.Theta, Type: r.Type, Factor: r.Factor, OriginalContext: r.OriginalContext,
		BetaFast: r.BetaFast, BetaSlow: r.BetaSlow, AttentionFactor: r.AttentionFactor,
	}
}

// RopeTable holds what the rope op needs for one layer type: the inverse
// frequencies of the RotaryDim/2 channel pairs and the factor cos and sin
// are multiplied by.
type RopeTable struct {
	RotaryDim  int
	InvFreq    []float32 // [RotaryDim/2]
	AttnFactor float32
}

// NewRopeTable computes the inverse frequencies and attention factor as
// transformers does (LagunaRotaryEmbedding, _compute_yarn_parameters), in
// float32 with the same rounding steps, so angles match the reference.
func NewRopeTable(p RopeParams) (*RopeTable, error) {
	r := p.RotaryDim
	if r <= 0 || r%2 != 0 {
		return nil, fmt.Errorf("prep.NewRopeTable: rotary_dim = %d must be positive and even", r)
	}
	if !(p.Theta > 0) || math.IsInf(p.Theta, 0) {
		return nil, fmt.Errorf("prep.NewRopeTable: rope theta = %g must be positive and finite", p.Theta)
	}
	half := r / 2
	// pos_freqs = base ** (arange(0, r, 2).float() / r), all float32.
	base := float32(p.Theta)
	posFreq := make([]float32, half)
	for i := range posFreq {
		e := float32(2*i) / float32(r)
		posFreq[i] = float32(math.Pow(float64(base), float64(e)))
	}
	t := &RopeTable{RotaryDim: r, InvFreq: make([]float32, half), AttnFactor: 1}
	switch p.Type {
	case "", "default":
		for i, f := range posFreq {
			t.InvFreq[i] = 1 / f
		}
		return t, nil
	case "yarn":
	default:
		return nil, fmt.Errorf("prep.NewRopeTable: rope type %q: lagc supports \"default\" and \"yarn\"", p.Type)
	}
	if p.Theta == 1 {
		return nil, fmt.Errorf("prep.NewRopeTable: yarn needs rope theta != 1")
	}
	if !(p.Factor > 0) || math.IsInf(p.Factor, 0) || p.OriginalContext <= 0 {
		return nil, fmt.Errorf("prep.NewRopeTable: yarn needs factor > 0 (got %g) and original context > 0 (got %d)", p.Factor, p.OriginalContext)
	}
	bf, bs := p.BetaFast, p.BetaSlow
	if bf == 0 {
		bf = 32
	}
	if bs == 0 {
		bs = 1
	}
	low, high := yarnCorrectionRange(bf, bs, r, p.Theta, p.OriginalContext)
	if low == high {
		high += 0.001 // as transformers: avoids a division by zero in the ramp
	}
	factor := float32(p.Factor)
	span := float32(high - low)
	for i, f := range posFreq {
		extrap := 1 / f
		interp := 1 / float32(factor*f)
		ramp := (float32(i) - float32(low)) / span
		ramp = min(max(ramp, 0), 1)
		ef := 1 - ramp // extrapolation weight
		t.InvFreq[i] = float32(interp*float32(1-ef)) + float32(extrap*ef)
	}
	t.AttnFactor = float32(YarnAttentionFactor(p.Factor, p.AttentionFactor))
	return t, nil
}

// yarnCorrectionRange is transformers' find_correction_range with truncation:
// the channel-pair indices where the ramp from interpolation to
// extrapolation starts and ends, clamped to [0, r-1].
func yarnCorrectionRange(betaFast, betaSlow float64, r int, theta float64, origCtx int) (low, high float64) {
	corr := func(rot float64) float64 {
		return (float64(r) * math.Log(float64(origCtx)/(rot*2*math.Pi))) / (2 * math.Log(theta))
	}
	low = max(math.Floor(corr(betaFast)), 0)
	high = min(math.Ceil(corr(betaSlow)), float64(r-1))
	return low, high
}

// YarnAttentionFactor returns the factor YaRN multiplies cos and sin by:
// attentionFactor when non-zero, else 0.1*ln(factor)+1 (1 when factor <= 1).
func YarnAttentionFactor(factor, attentionFactor float64) float64 {
	if attentionFactor != 0 {
		return attentionFactor
	}
	if factor <= 1 {
		return 1
	}
	return 0.1*math.Log(factor) + 1
}

// Angles fills cos and sin (RotaryDim/2 each) for position p: float32(p) *
// inv_freq rounded to float32, as the reference computes the angle, then
// cos and sin times the attention factor.
func (tab *RopeTable) Angles(cos, sin []float32, p int32) {
	fp := float32(p)
	for i, f := range tab.InvFreq {
		a := float64(float32(fp * f))
		cos[i] = float32(math.Cos(a)) * tab.AttnFactor
		sin[i] = float32(math.Sin(a)) * tab.AttnFactor
	}
}
