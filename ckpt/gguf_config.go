package ckpt

import (
	"fmt"
	"lagc/config"
	"math"
	"strconv"
)

// GGUF keys lagc reads beyond llama.cpp's laguna set. llama.cpp has no key
// for the router's logit softcap; lagc writes and reads this one.
const (
	KeyRouterSoftcap = "laguna.router_logit_softcapping"
	// KeyGatePerHead is written by llama.cpp's later laguna converter; the
	// shape of attn_gate decides when both are present.
	KeyGatePerHead = "laguna.attention.gate_per_head"
)

// ggufMeta reads typed values from GGUF metadata with clear errors.
type ggufMeta struct {
	kv  map[string]any
	err error // first type error
}

func (m *ggufMeta) fail(key string, v any, want string) {
	if m.err == nil {
		m.err = fmt.Errorf("GGUF key %s = %v (%T): want %s", key, v, v, want)
	}
}

func (m *ggufMeta) has(key string) bool { _, ok := m.kv[key]; return ok }

// int returns an integer key, or def when absent.
func (m *ggufMeta) int(key string, def int) int {
	v, ok := m.kv[key]
	if !ok {
		return def
	}
	i, ok := asInt(v)
	if !ok || i < 0 || i > 1<<40 {
		m.fail(key, v, "a non-negative integer")
		return def
	}
	return int(i)
}

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }

// float returns a float (or integer) key, or def when absent; NaN and
// infinities are errors (config.Validate checks ranges). float32
// values convert through their shortest decimal form, so 1e-6 stored as
// float32 reads back as exactly 1e-6.
func (m *ggufMeta) float(key string, def float64) float64 {
	v, ok := m.kv[key]
	if !ok {
		return def
	}
	switch x := v.(type) {
	case float32:
		if !finite(float64(x)) {
			m.fail(key, v, "a finite number")
			return def
		}
		f, _ := strconv.ParseFloat(strconv.FormatFloat(float64(x), 'g', -1, 32), 64)
		return f
	case float64:
		if !finite(x) {
			m.fail(key, v, "a finite number")
			return def
		}
		return x
	}
	if i, ok := asInt(v); ok {
		return float64(i)
	}
	m.fail(key, v, "a number")
	return def
}

func (m *ggufMeta) str(key, def string) string {
	v, ok := m.kv[key]
	if !ok {
		return def
	}
	s, ok := v.(string)
	if !ok {
		m.fail(key, v, "a string")
		return def
	}
	return s
}

func (m *ggufMeta) boolean(key string, def bool) bool {
	v, ok := m.kv[key]
	if !ok {
		return def
	}
	b, ok := v.(bool)
	if !ok {
		m.fail(key, v, "a bool")
		return def
	}
	return b
}

// ints returns an integer key that may be a scalar or a per-layer array;
// a scalar is repeated n times.
func (m *ggufMeta) ints(key string, n int) []int {
	v, ok := m.kv[key]
	if !ok {
		return nil
	}
	if i, ok := asInt(v); ok {
		out := make([]int, n)
		for j := range out {
			out[j] = int(i)
		}
		return out
	}
	vals, ok := intSlice(v)
	if !ok {
		m.fail(key, v, "an integer or an array of integers")
		return nil
	}
	if len(vals) != n {
		m.fail(key, v, fmt.Sprintf("%d entries (one per layer)", n))
		return nil
	}
	return vals
}

func intSlice(v any) ([]int, bool) {
	var out []int
	add := func(n int, at func(int) any) bool {
		for i := 0; i < n; i++ {
			x, ok := asInt(at(i))
			if !ok || x < 0 || x > 1<<40 {
				return false
			}
			out = append(out, int(x))
		}
		return true
	}
	var ok bool
	switch s := v.(type) {
	case []uint8:
		ok = add(len(s), func(i int) any { return s[i] })
	case []int8:
		ok = add(len(s), func(i int) any { return s[i] })
	case []uint16:
		ok = add(len(s), func(i int) any { return s[i] })
	case []int16:
		ok = add(len(s), func(i int) any { return s[i] })
	case []uint32:
		ok = add(len(s), func(i int) any { return s[i] })
	case []int32:
		ok = add(len(s), func(i int) any { return s[i] })
	case []uint64:
		ok = add(len(s), func(i int) any { return s[i] })
	case []int64:
		ok = add(len(s), func(i int) any { return s[i] })
	}
	return out, ok
}

// configFromGGUF builds a Laguna configuration from GGUF metadata, using
// the tensor shapes where llama.cpp derives a parameter from them (gating,
// tied embeddings) or where an optional key is absent.
func configFromGGUF(kv map[string]any, shapes map[string][]int) (*config.Config, error) {
	m := &ggufMeta{kv: kv}
	arch := m.str("general.architecture", "")
	if m.err != nil {
		return nil, m.err
	}
	if arch == "" {
		return nil, fmt.Errorf("GGUF metadata has no general.architecture")
	}
	if arch != "laguna" {
		return nil, fmt.Errorf("unsupported architecture: general.architecture is %q, lagc runs \"laguna\"", arch)
	}
	const p = "laguna."
	for _, k := range []string{"block_count", "embedding_length", "attention.head_count", "attention.head_count_kv"} {
		if !m.has(p + k) {
			return nil, fmt.Errorf("GGUF metadata lacks %s%s", p, k)
		}
	}
	c := config.Defaults()
	c.Architecture = arch
	c.NumLayers = m.int(p+"block_count", 0)
	if m.err != nil {
		return nil, m.err
	}
	if c.NumLayers <= 0 || c.NumLayers > config.MaxLayers {
		return nil, fmt.Errorf("GGUF key %sblock_count = %d is out of range", p, c.NumLayers)
	}
	n := c.NumLayers
	blk := func(l int, rest string) []int { return shapes[fmt.Sprintf("blk.%d.%s", l, rest)] }
	c.HiddenSize = m.int(p+"embedding_length", 0)
	c.VocabSize = m.int(p+"vocab_size", 0)
	if s := shapes["token_embd.weight"]; c.VocabSize == 0 && len(s) == 2 {
		c.VocabSize = s[0]
	}
	if toks, ok := kv["tokenizer.ggml.tokens"].([]string); ok && c.VocabSize == 0 {
		c.VocabSize = len(toks)
	}
	c.MaxPositionEmbeddings = m.int(p+"context_length", c.MaxPositionEmbeddings)
	c.HeadsPerLayer = m.ints(p+"attention.head_count", n)
	if m.err == nil && len(c.HeadsPerLayer) > 0 {
		c.NumHeads = c.HeadsPerLayer[0]
	}
	kvh := m.ints(p+"attention.head_count_kv", n)
	for _, h := range kvh {
		if h != kvh[0] {
			return nil, fmt.Errorf("GGUF key %sattention.head_count_kv varies by layer (%v): lagc needs one value", p, kvh)
		}
	}
	if len(kvh) > 0 {
		c.NumKVHeads = kvh[0]
	}
	c.HeadDim = 0
	if c.NumHeads > 0 {
		c.HeadDim = c.HiddenSize / c.NumHeads
	}
	c.HeadDim = m.int(p+"attention.key_length", c.HeadDim)
	if v := m.int(p+"attention.value_length", c.HeadDim); v != c.HeadDim {
		return nil, fmt.Errorf("GGUF keys %sattention.key_length = %d and value_length = %d differ: Laguna has one head_dim", p, c.HeadDim, v)
	}
	c.RMSNormEps = m.float(p+"attention.layer_norm_rms_epsilon", c.RMSNormEps)
	c.SlidingWindow = m.int(p+"attention.sliding_window", 0)

	// Layer types: a bool pattern (true = sliding), a period, layer type
	// names, or the Laguna default (l%4 == 0 full when there is a window).
	c.LayerTypes = make([]string, n)
	pat, hasPat := kv[p+"attention.sliding_window_pattern"]
	names, hasNames := kv[p+"attention.layer_types"]
	for l := range c.LayerTypes {
		c.LayerTypes[l] = config.FullAttention
	}
	switch {
	case hasPat:
		if bs, ok := pat.([]bool); ok {
			if len(bs) != n {
				m.fail(p+"attention.sliding_window_pattern", pat, fmt.Sprintf("%d entries", n))
			}
			for l := 0; l < n && l < len(bs); l++ {
				if bs[l] {
					c.LayerTypes[l] = config.SlidingAttention
				}
			}
		} else if period, ok := asInt(pat); ok && period > 0 {
			for l := range c.LayerTypes {
				if int64(l)%period != 0 {
					c.LayerTypes[l] = config.SlidingAttention
				}
			}
		} else {
			m.fail(p+"attention.sliding_window_pattern", pat, "an array of bools or a positive period")
		}
	case hasNames:
		ss, ok := names.([]string)
		if !ok || len(ss) != n {
			m.fail(p+"attention.layer_types", names, fmt.Sprintf("%d strings", n))
		}
		for l := 0; l < n && l < len(ss); l++ {
			c.LayerTypes[l] = ss[l]
		}
	case c.SlidingWindow > 0:
		for l := range c.LayerTypes {
			if l%4 != 0 {
				c.LayerTypes[l] = config.SlidingAttention
			}
		}
	}

	// Dense or MoE: leading_dense_block_count, else the tensors present.
	c.MLPLayerTypes = make([]string, n)
	lead := m.int(p+"leading_dense_block_count", -1)
	for l := range c.MLPLayerTypes {
		moe := l >= lead
		if lead < 0 {
			moe = blk(l, "ffn_gate_inp.weight") != nil
		}
		c.MLPLayerTypes[l] = config.MLPDense
		if moe {
			c.MLPLayerTypes[l] = config.MLPSparse
		}
	}
	firstOf := func(kind string) int {
		for l := range c.MLPLayerTypes {
			if c.MLPLayerTypes[l] == kind {
				return l
			}
		}
		return -1
	}
	dimOr := func(l int, rest string, axis, def int) int {
		if s := blk(l, rest); l >= 0 && axis < len(s) {
			return s[axis]
		}
		return def
	}
	ffn := m.ints(p+"feed_forward_length", n)
	c.IntermediateSize = 0
	if d := firstOf(config.MLPDense); d >= 0 {
		c.IntermediateSize = dimOr(d, "ffn_gate.weight", 0, 0)
		if ffn != nil {
			c.IntermediateSize = ffn[d]
		}
	} else if ffn != nil {
		c.IntermediateSize = ffn[0]
	}
	s := firstOf(config.MLPSparse)
	c.NumExperts = m.int(p+"expert_count", dimOr(s, "ffn_gate_inp.weight", 0, 0))
	c.NumExpertsPerTok = m.int(p+"expert_used_count", 0)
	c.MoEIntermediateSize = m.int(p+"expert_feed_forward_length", dimOr(s, "ffn_gate_exps.weight", 1, 0))
	c.SharedExpertSize = m.int(p+"expert_shared_feed_forward_length", dimOr(s, "ffn_gate_shexp.weight", 0, 0))
	if !m.boolean(p+"expert_weights_norm", true) {
		return nil, fmt.Errorf("GGUF key %sexpert_weights_norm is false: Laguna normalises the selected expert weights", p)
	}
	if g := m.int(p+"expert_gating_func", 2); g != 2 {
		return nil, fmt.Errorf("GGUF key %sexpert_gating_func = %d: Laguna routes with sigmoid (2)", p, g)
	}
	c.RoutedScaling = m.float(p+"expert_weights_scale", 1)
	c.RouterSoftcap = m.float(KeyRouterSoftcap, 0)

	c.RopeParameters = map[string]config.Rope{}
	full := config.Rope{Type: "default", Theta: m.float(p+"rope.freq_base", 500000)}
	full.PartialRotaryFactor = float64(m.int(p+"rope.dimension_count", c.HeadDim)) / float64(max(c.HeadDim, 1))
	switch st := m.str(p+"rope.scaling.type", "none"); st {
	case "none", "":
	case "yarn":
		full.Type = "yarn"
		full.Factor = m.float(p+"rope.scaling.factor", 0)
		full.OriginalContext = m.int(p+"rope.scaling.original_context_length", 0)
		full.BetaFast = m.float(p+"rope.scaling.yarn_beta_fast", 32)
		full.BetaSlow = m.float(p+"rope.scaling.yarn_beta_slow", 1)
		full.AttentionFactor = m.float(p+"rope.scaling.attn_factor", 0)
		full.AttentionFactor = m.float(p+"rope.scaling.yarn_attn_factor", full.AttentionFactor)
	default:
		return nil, fmt.Errorf("GGUF key %srope.scaling.type = %q: lagc supports none and yarn", p, st)
	}
	swaTheta := m.float(p+"rope.swa.freq_base", full.Theta) // Ollama's spelling
	swaTheta = m.float(p+"rope.freq_base_swa", swaTheta)
	swaDims := m.int(p+"rope.swa.dimension_count", c.HeadDim)
	swaDims = m.int(p+"rope.dimension_count_swa", swaDims)
	c.RopeParameters[config.FullAttention] = full
	c.RopeParameters[config.SlidingAttention] = config.Rope{Type: "default", Theta: swaTheta,
		PartialRotaryFactor: float64(swaDims) / float64(max(c.HeadDim, 1))}

	// Gating from attn_gate's rows (llama.cpp's rule), else the key.
	c.Gating = config.GatingPerHead
	if !m.boolean(KeyGatePerHead, true) {
		c.Gating = config.GatingPerElement
	}
	if g := blk(0, "attn_gate.weight"); len(g) == 2 && len(c.HeadsPerLayer) > 0 {
		switch g[0] {
		case c.HeadsPerLayer[0]:
			c.Gating = config.GatingPerHead
		case c.HeadsPerLayer[0] * c.HeadDim:
			c.Gating = config.GatingPerElement
		}
	}
	c.TieWordEmbeddings = shapes["output.weight"] == nil

	c.BOSTokenID = m.int("tokenizer.ggml.bos_token_id", -1)
	c.PadTokenID = m.int("tokenizer.ggml.padding_token_id", -1)
	c.EOSTokenIDs = nil
	for _, k := range []string{"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id"} {
		if id := m.int(k, -1); id >= 0 && !containsInt(c.EOSTokenIDs, id) {
			c.EOSTokenIDs = append(c.EOSTokenIDs, id)
		}
	}
	if m.err != nil {
		return nil, m.err
	}
	if err := c.Normalize(); err != nil {
		return nil, fmt.Errorf("GGUF metadata: %w", err)
	}
	return c, nil
}

func containsInt(s []int, x int) bool {
	for _, v := range s {
		if v == x {
			return true
		}
	}
	return false
}

// ggufAliases maps other writers' tensor names onto the canonical ones.
var ggufAliases = map[string]string{
	"attn_g.weight": "attn_gate.weight", // Ollama
}

func canonicalGGUFName(name string) string {
	if b, rest, ok := splitBlock(name); ok {
		if c, ok := ggufAliases[rest]; ok {
			return fmt.Sprintf("blk.%d.%s", b, c)
		}
	}
	return name
}

// openGGUF opens a GGUF file.
func openGGUF(path string) (_ Checkpoint, err error) {
	f, err := mapPath(path)
	if err != nil {
		return nil, fmt.Errorf("opening checkpoint: %w", err)
	}
	c := &checkpoint{path: path, format: "gguf", entries: map[string]*entry{}, files: []*mappedFile{f}}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	g, err := parseGGUF(f.data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	c.meta = g.kv
	shapes := map[string][]int{}
	for _, t := range g.tensors {
		name := canonicalGGUFName(t.name)
		src := t.name + " in " + path
		info := TensorInfo{Name: name, DType: t.typ, Shape: t.shape(), Size: t.size}
		p := piece{file: f, off: g.dataStart + int64(t.offset), n: t.size}
		if err := c.add(&entry{info: info, pieces: []piece{p}, source: src}); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		shapes[name] = info.Shape
	}
	if c.cfg, err = configFromGGUF(g.kv, shapes); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	c.sortOrder()
	return c, nil
}
