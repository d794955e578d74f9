package config

import (
	"fmt"
	"sort"
)

// presets are the shapes of checkpoints lagc cannot load here (LAGUNA.md):
// used by `lagc compile --preset` and synthetic benchmarks.
var presets = map[string]func() *Config{
	"laguna-xs-2":  func() *Config { return lagunaPreset(2048, 40, [4]int{48, 64, 64, 64}, 256, 8, 512, 512, 8192, 0) },
	"laguna-s-2.1": func() *Config { return lagunaPreset(3072, 48, [4]int{48, 72, 72, 72}, 256, 10, 1024, 1024, 12288, 32) },
}

// PresetNames lists the known presets, sorted.
func PresetNames() []string {
	names := make([]string, 0, len(presets))
	for n := range presets {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Preset returns a fresh copy of the named preset's configuration.
func Preset(name string) (*Config, error) {
	f, ok := presets[name]
	if !ok {
		return nil, fmt.Errorf("unknown preset %q (known: %v)", name, PresetNames())
	}
	c := f()
	if err := c.Normalize(); err != nil {
		return nil, fmt.Errorf("preset %s: %w", name, err)
	}
	return c, nil
}

// lagunaPreset builds the published Laguna layout: layer l is full attention
// when l%4 == 0 and sliding otherwise, layer 0 is dense and the rest MoE.
// yarnFactor 0 means default rope on the full layers.
func lagunaPreset(hidden, layers int, heads [4]int, experts, topK, expertWidth, sharedWidth, denseWidth int, yarnFactor float64) *Config {
	c := Defaults()
	c.HiddenSize, c.NumLayers, c.NumExperts, c.NumExpertsPerTok = hidden, layers, experts, topK
	c.MoEIntermediateSize, c.SharedExpertSize, c.IntermediateSize = expertWidth, sharedWidth, denseWidth
	c.NumHeads = heads[0]
	c.LayerTypes = make([]string, layers)
	c.MLPLayerTypes = make([]string, layers)
	c.HeadsPerLayer = make([]int, layers)
	for l := 0; l < layers; l++ {
		c.LayerTypes[l] = SlidingAttention
		if l%4 == 0 {
			c.LayerTypes[l] = FullAttention
		}
		c.MLPLayerTypes[l] = MLPSparse
		c.HeadsPerLayer[l] = heads[l%4]
	}
	c.MLPLayerTypes[0] = MLPDense
	full := Rope{Type: "default", Theta: 500000, PartialRotaryFactor: 0.5}
	if yarnFactor > 0 {
		full = Rope{Type: "yarn", Theta: 500000, PartialRotaryFactor: 0.5, Factor: yarnFactor, OriginalContext: 8192, BetaFast: 32, BetaSlow: 1}
	}
	c.RopeParameters = map[string]Rope{
		FullAttention:    full,
		SlidingAttention: {Type: "default", Theta: 10000, PartialRotaryFactor: 1},
	}
	c.BOSTokenID, c.EOSTokenIDs, c.PadTokenID = 2, []int{2, 24}, 9
	return c
}
