// Package config is a Laguna model's configuration, the values that bind the
// parameters of models/laguna.yaml: read from a checkpoint's metadata (HF
// config.json, GGUF keys) or taken from a named preset. It imports nothing
// of lagc, so checkpoint readers can use it without the YAML frontend.
package config

import (
	"encoding/json"
	"fmt"
	"math"

	"lagc/internal/fsutil"
)

// Layer and MLP type names, spelled as in HF config.json.
const (
	FullAttention    = "full_attention"
	SlidingAttention = "sliding_attention"
	MLPDense         = "dense"
	MLPSparse        = "sparse"
)

// Gating granularities of the softplus output gate.
const (
	GatingPerHead    = "per-head"
	GatingPerElement = "per-element"
)

// Rope is the rotary embedding of one layer type.
type Rope struct {
	Type                string  `json:"rope_type"` // "default" or "yarn"
	Theta               float64 `json:"rope_theta"`
	PartialRotaryFactor float64 `json:"partial_rotary_factor"`
	// YaRN only.
	Factor          float64 `json:"factor,omitempty"`
	OriginalContext int     `json:"original_max_position_embeddings,omitempty"`
	BetaFast        float64 `json:"beta_fast,omitempty"`
	BetaSlow        float64 `json:"beta_slow,omitempty"`
	AttentionFactor float64 `json:"attention_factor,omitempty"` // 0: derived, 0.1*ln(factor)+1
}

// Config is a Laguna model's hyper-parameters, with HF config.json names.
// After Normalize every per-layer list has NumLayers entries.
type Config struct {
	Architecture          string          `json:"-"` // "laguna"
	VocabSize             int             `json:"vocab_size"`
	HiddenSize            int             `json:"hidden_size"`
	IntermediateSize      int             `json:"intermediate_size"` // dense MLP width
	NumLayers             int             `json:"num_hidden_layers"`
	NumHeads              int             `json:"num_attention_heads"`
	NumKVHeads            int             `json:"num_key_value_heads"`
	HeadDim               int             `json:"head_dim"`
	MaxPositionEmbeddings int             `json:"max_position_embeddings"`
	RMSNormEps            float64         `json:"rms_norm_eps"`
	TieWordEmbeddings     bool            `json:"tie_word_embeddings"`
	SlidingWindow         int             `json:"sliding_window"`
	MoEIntermediateSize   int             `json:"moe_intermediate_size"`
	SharedExpertSize      int             `json:"shared_expert_intermediate_size"`
	NumExpertsPerTok      int             `json:"num_experts_per_tok"`
	NumExperts            int             `json:"num_experts"`
	LayerTypes            []string        `json:"layer_types"`
	MLPLayerTypes         []string        `json:"mlp_layer_types"`
	HeadsPerLayer         []int           `json:"num_attention_heads_per_layer"`
	Gating                string          `json:"-"` // per-head or per-element; see UnmarshalJSON
	RoutedScaling         float64         `json:"moe_routed_scaling_factor"`
	RouterSoftcap         float64         `json:"moe_router_logit_softcapping"`
	RopeParameters        map[string]Rope `json:"rope_parameters"`
	BOSTokenID            int             `json:"-"`
	EOSTokenIDs           []int           `json:"-"`
	PadTokenID            int             `json:"-"`
}

// Rope returns the rotary parameters of layer l.
func (c *Config) Rope(l int) Rope { return c.RopeParameters[c.LayerTypes[l]] }

// IsSliding reports whether layer l uses sliding-window attention.
func (c *Config) IsSliding(l int) bool { return c.LayerTypes[l] == SlidingAttention }

// IsMoE reports whether layer l has a mixture-of-experts MLP.
func (c *Config) IsMoE(l int) bool { return c.MLPLayerTypes[l] == MLPSparse }

// Heads returns the number of query heads of layer l.
func (c *Config) Heads(l int) int { return c.HeadsPerLayer[l] }

// RotaryDim returns the number of rotated channels of each head in layer l.
func (c *Config) RotaryDim(l int) int {
	return int(float64(c.HeadDim) * c.Rope(l).PartialRotaryFactor)
}

// GateRows returns the output width of layer l's g_proj.
func (c *Config) GateRows(l int) int {
	if c.Gating == GatingPerElement {
		return c.Heads(l) * c.HeadDim
	}
	return c.Heads(l)
}

// YarnAttentionFactor is the factor YaRN multiplies cos and sin by.
func (r Rope) YarnAttentionFactor() float64 {
	if r.Type != "yarn" {
		return 1
	}
	if r.AttentionFactor != 0 {
		return r.AttentionFactor
	}
	if r.Factor <= 1 {
		return 1
	}
	return 0.1*math.Log(r.Factor) + 1
}

// MaxConfigBytes bounds config.json (real ones are a few kilobytes).
const MaxConfigBytes = 16 << 20

// LoadHFConfig reads a Hugging Face config.json.
func LoadHFConfig(path string) (*Config, error) {
	data, err := fsutil.ReadFile(path, MaxConfigBytes)
	if err != nil {
		return nil, fmt.Errorf("reading model config: %w", err)
	}
	c, err := ParseHFConfig(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// ParseHFConfig parses the contents of a Hugging Face config.json, fills
// defaults as transformers' LagunaConfig does, and validates the result.
func ParseHFConfig(data []byte) (*Config, error) {
	var raw struct {
		ModelType     string          `json:"model_type"`
		Architectures []string        `json:"architectures"`
		Gating        json.RawMessage `json:"gating"`
		BOS           json.RawMessage `json:"bos_token_id"`
		EOS           json.RawMessage `json:"eos_token_id"`
		Pad           json.RawMessage `json:"pad_token_id"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("config.json is not valid JSON: %w", err)
	}
	if raw.ModelType != "laguna" {
		return nil, fmt.Errorf("unsupported architecture: model_type is %q, lagc runs \"laguna\"", raw.ModelType)
	}
	c := Defaults()
	// Reset the lists so absent keys get transformers' derived defaults.
	c.LayerTypes, c.MLPLayerTypes, c.HeadsPerLayer, c.RopeParameters = nil, nil, nil, nil
	if err := json.Unmarshal(data, c); err != nil {
		return nil, fmt.Errorf("config.json: %w", err)
	}
	c.Architecture = raw.ModelType
	c.Gating = GatingPerHead
	if len(raw.Gating) > 0 {
		var b bool
		var s string
		switch {
		case json.Unmarshal(raw.Gating, &b) == nil:
			if !b {
				return nil, fmt.Errorf("config.json: gating=false (no output gate) is not supported")
			}
		case json.Unmarshal(raw.Gating, &s) == nil && (s == GatingPerHead || s == GatingPerElement):
			c.Gating = s
		default:
			return nil, fmt.Errorf("config.json: gating must be true, \"per-head\" or \"per-element\", got %s", raw.Gating)
		}
	}
	c.BOSTokenID, c.PadTokenID = -1, -1
	_ = json.Unmarshal(raw.BOS, &c.BOSTokenID)
	_ = json.Unmarshal(raw.Pad, &c.PadTokenID)
	var eos int
	if json.Unmarshal(raw.EOS, &eos) == nil {
		c.EOSTokenIDs = []int{eos}
	} else {
		_ = json.Unmarshal(raw.EOS, &c.EOSTokenIDs)
	}
	if err := c.Normalize(); err != nil {
		return nil, fmt.Errorf("config.json: %w", err)
	}
	return c, nil
}

// Defaults returns transformers' LagunaConfig defaults (Laguna-XS.2 sizes).
func Defaults() *Config {
	return &Config{
		Architecture: "laguna", VocabSize: 100352, HiddenSize: 2048, IntermediateSize: 8192,
		NumLayers: 40, NumHeads: 48, NumKVHeads: 8, HeadDim: 128, MaxPositionEmbeddings: 131072,
		RMSNormEps: 1e-6, SlidingWindow: 512, MoEIntermediateSize: 512, SharedExpertSize: 512,
		NumExpertsPerTok: 8, NumExperts: 256, Gating: GatingPerHead, RoutedScaling: 1,
		BOSTokenID: -1, PadTokenID: -1,
	}
}

// Limits of a configuration lagc builds: far beyond any real Laguna model
// (S-2.1 has 48 layers; the deepest published LLMs about 130), and small
// enough that a hostile config.json or GGUF header can neither make graph
// construction and the passes take long or exhaust memory (one set of
// nodes per layer; 1024 layers compile in about 2 s of CPU) nor overflow a
// weight's element count.
const (
	MaxLayers         = 1024
	MaxWeightElements = 1 << 40
)

// FirstLayers is c cut to its first n layers (a model's depth measured
// in part: benchmarks, synthetic files, tests); c itself where n <= 0 or
// n >= NumLayers. c is not changed.
func (c *Config) FirstLayers(n int) (*Config, error) {
	if n <= 0 || n >= c.NumLayers {
		return c, nil
	}
	t := *c
	t.NumLayers = n
	t.LayerTypes = append([]string(nil), c.LayerTypes[:n]...)
	t.MLPLayerTypes = append([]string(nil), c.MLPLayerTypes[:n]...)
	t.HeadsPerLayer = append([]int(nil), c.HeadsPerLayer[:n]...)
	if err := t.Validate(); err != nil {
		return nil, fmt.Errorf("first %d layers: %w", n, err)
	}
	return &t, nil
}

// Normalize fills the per-layer lists as transformers does when they are
// absent, then validates the configuration.
func (c *Config) Normalize() error {
	n := c.NumLayers
	if n <= 0 || n > MaxLayers {
		return fmt.Errorf("num_hidden_layers must be in [1, %d], got %d", MaxLayers, n)
	}
	if c.LayerTypes == nil {
		c.LayerTypes = make([]string, n)
		for i := range c.LayerTypes {
			c.LayerTypes[i] = FullAttention
		}
	}
	if c.MLPLayerTypes == nil {
		c.MLPLayerTypes = make([]string, n)
		for i := range c.MLPLayerTypes {
			c.MLPLayerTypes[i] = MLPSparse
		}
		c.MLPLayerTypes[0] = MLPDense
	}
	if c.HeadsPerLayer == nil {
		c.HeadsPerLayer = make([]int, n)
		for i := range c.HeadsPerLayer {
			c.HeadsPerLayer[i] = c.NumHeads
		}
	}
	if c.RopeParameters == nil {
		c.RopeParameters = map[string]Rope{
			FullAttention:    {Type: "default", Theta: 500000, PartialRotaryFactor: 0.5},
			SlidingAttention: {Type: "default", Theta: 10000, PartialRotaryFactor: 1},
		}
	}
	for k, r := range c.RopeParameters {
		if r.Type == "" {
			r.Type = "default"
		}
		if r.PartialRotaryFactor == 0 {
			r.PartialRotaryFactor = 1
		}
		if r.Type == "yarn" {
			if r.BetaFast == 0 {
				r.BetaFast = 32
			}
			if r.BetaSlow == 0 {
				r.BetaSlow = 1
			}
			if r.OriginalContext == 0 {
				r.OriginalContext = c.MaxPositionEmbeddings
			}
		}
		c.RopeParameters[k] = r
	}
	if c.Gating == "" {
		c.Gating = GatingPerHead
	}
	return c.Validate()
}

// Validate checks that the configuration describes a model lagc can build.
func (c *Config) Validate() error {
	n := c.NumLayers
	if n <= 0 || n > MaxLayers {
		return fmt.Errorf("num_hidden_layers must be in [1, %d], got %d", MaxLayers, n)
	}
	if err := c.checkFloats(); err != nil {
		return err
	}
	pos := []struct {
		name string
		v    int
	}{
		{"vocab_size", c.VocabSize}, {"hidden_size", c.HiddenSize}, {"num_key_value_heads", c.NumKVHeads},
		{"head_dim", c.HeadDim}, {"max_position_embeddings", c.MaxPositionEmbeddings},
	}
	for _, p := range pos {
		if p.v <= 0 {
			return fmt.Errorf("%s must be positive, got %d", p.name, p.v)
		}
	}
	if len(c.LayerTypes) != n || len(c.MLPLayerTypes) != n || len(c.HeadsPerLayer) != n {
		return fmt.Errorf("layer_types (%d), mlp_layer_types (%d) and num_attention_heads_per_layer (%d) must each have num_hidden_layers = %d entries",
			len(c.LayerTypes), len(c.MLPLayerTypes), len(c.HeadsPerLayer), n)
	}
	anyMoE := false
	for l := 0; l < n; l++ {
		switch c.LayerTypes[l] {
		case FullAttention, SlidingAttention:
		default:
			return fmt.Errorf("layer_types[%d] = %q: want %q or %q", l, c.LayerTypes[l], FullAttention, SlidingAttention)
		}
		if _, ok := c.RopeParameters[c.LayerTypes[l]]; !ok {
			return fmt.Errorf("rope_parameters has no entry for %q (layer %d)", c.LayerTypes[l], l)
		}
		switch c.MLPLayerTypes[l] {
		case MLPDense:
			if c.IntermediateSize <= 0 {
				return fmt.Errorf("intermediate_size must be positive for dense layer %d", l)
			}
		case MLPSparse:
			anyMoE = true
		default:
			return fmt.Errorf("mlp_layer_types[%d] = %q: want %q or %q", l, c.MLPLayerTypes[l], MLPDense, MLPSparse)
		}
		h := c.HeadsPerLayer[l]
		if h <= 0 || h%c.NumKVHeads != 0 {
			return fmt.Errorf("layer %d has %d query heads: must be a positive multiple of num_key_value_heads = %d", l, h, c.NumKVHeads)
		}
		if rd := c.RotaryDim(l); rd <= 0 || rd > c.HeadDim || rd%2 != 0 {
			return fmt.Errorf("layer %d: rotary width %d (head_dim %d x partial_rotary_factor %g) must be even and in (0, head_dim]",
				l, rd, c.HeadDim, c.Rope(l).PartialRotaryFactor)
		}
		if c.IsSliding(l) && c.SlidingWindow <= 0 {
			return fmt.Errorf("layer %d is sliding but sliding_window = %d", l, c.SlidingWindow)
		}
	}
	if anyMoE {
		if c.NumExperts <= 0 || c.NumExpertsPerTok <= 0 || c.NumExpertsPerTok > c.NumExperts {
			return fmt.Errorf("num_experts_per_tok = %d must be in [1, num_experts = %d]", c.NumExpertsPerTok, c.NumExperts)
		}
		if c.MoEIntermediateSize <= 0 || c.SharedExpertSize < 0 {
			return fmt.Errorf("moe_intermediate_size = %d and shared_expert_intermediate_size = %d must be positive",
				c.MoEIntermediateSize, c.SharedExpertSize)
		}
	}
	if err := c.checkWeightSizes(); err != nil {
		return err
	}
	for k, r := range c.RopeParameters {
		if r.Type != "default" && r.Type != "yarn" {
			return fmt.Errorf("rope_parameters.%s.rope_type = %q: lagc supports \"default\" and \"yarn\"", k, r.Type)
		}
		if r.Theta <= 0 {
			return fmt.Errorf("rope_parameters.%s.rope_theta must be positive", k)
		}
		if r.Type == "yarn" && (r.Factor <= 0 || r.OriginalContext <= 0) {
			return fmt.Errorf("rope_parameters.%s: yarn needs factor > 0 and original_max_position_embeddings > 0", k)
		}
	}
	if c.RMSNormEps <= 0 {
		return fmt.Errorf("rms_norm_eps must be positive, got %g", c.RMSNormEps)
	}
	return nil
}

// checkWeightSizes checks that every weight the configuration implies has
// at most MaxWeightElements elements (so no size computed from them
// overflows). The sizes have been checked to be positive.
func (c *Config) checkWeightSizes() error {
	type weight struct {
		what string
		dims []int
	}
	V, H, d, kv := c.VocabSize, c.HiddenSize, c.HeadDim, c.NumKVHeads
	ws := []weight{{"vocab_size x hidden_size", []int{V, H}}}
	for l := 0; l < c.NumLayers; l++ {
		nh := c.Heads(l)
		ws = append(ws,
			weight{fmt.Sprintf("layer %d: query heads (%d) x head_dim x hidden_size", l, nh), []int{nh, d, H}},
			weight{"num_key_value_heads x head_dim x hidden_size", []int{kv, d, H}},
			weight{fmt.Sprintf("layer %d: %s gate rows x hidden_size", l, c.Gating), []int{c.GateRows(l), H}})
		if c.IsMoE(l) {
			ws = append(ws,
				weight{"num_experts x moe_intermediate_size x hidden_size", []int{c.NumExperts, c.MoEIntermediateSize, H}},
				weight{"shared_expert_intermediate_size x hidden_size", []int{c.SharedExpertSize, H}})
		} else {
			ws = append(ws, weight{"intermediate_size x hidden_size", []int{c.IntermediateSize, H}})
		}
	}
	for _, w := range ws {
		n := int64(1)
		for _, x := range w.dims {
			if x > 0 && n > MaxWeightElements/int64(x) {
				return fmt.Errorf("%s = %v: a weight of more than %d elements is beyond what lagc builds", w.what, w.dims, int64(MaxWeightElements))
			}
			n *= int64(max(x, 0))
		}
	}
	return nil
}
