// Package ckpttest writes small synthetic Laguna checkpoints in the Hugging
// Face layout, for tests of the loaders and of anything that runs a model.
// It writes HF names itself (it does not use ckpt's name mapping), so a test
// that reads its output back checks that mapping independently.
package ckpttest

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"

	"lagc/config"
	"lagc/quant"
)

// TinyConfig is a 4-layer model that exercises what varies between layers:
// hidden 16, heads (2,4,4,4) over 2 KV heads of 8, a dense layer 0, 6
// experts top-2, a sliding window of 5, YaRN with partial rotary on full
// layers, softcapping and routed scaling.
func TinyConfig() *config.Config {
	c := config.Defaults()
	c.VocabSize, c.HiddenSize, c.IntermediateSize = 40, 16, 24
	c.NumLayers, c.NumHeads, c.NumKVHeads, c.HeadDim = 4, 2, 2, 8
	c.MaxPositionEmbeddings, c.SlidingWindow = 64, 5
	c.NumExperts, c.NumExpertsPerTok, c.MoEIntermediateSize, c.SharedExpertSize = 6, 2, 12, 10
	c.LayerTypes = []string{config.FullAttention, config.SlidingAttention, config.SlidingAttention, config.SlidingAttention}
	c.MLPLayerTypes = []string{config.MLPDense, config.MLPSparse, config.MLPSparse, config.MLPSparse}
	c.HeadsPerLayer = []int{2, 4, 4, 4}
	c.RoutedScaling, c.RouterSoftcap = 2.5, 30
	c.RopeParameters = map[string]config.Rope{
		config.FullAttention: {Type: "yarn", Theta: 500000, PartialRotaryFactor: 0.5, Factor: 4,
			OriginalContext: 16, BetaFast: 32, BetaSlow: 1},
		config.SlidingAttention: {Type: "default", Theta: 10000, PartialRotaryFactor: 1},
	}
	c.BOSTokenID, c.EOSTokenIDs, c.PadTokenID = 2, []int{2, 24}, 9
	if err := c.Normalize(); err != nil {
		panic("ckpttest: tiny config invalid: " + err.Error()) // a bug in this file, not user input
	}
	return c
}

// Options selects the checkpoint layout.
type Options struct {
	DType         string // "F32" (default), "F16" or "BF16"
	FusedExperts  bool   // mlp.experts.gate_up_proj / down_proj instead of per-expert tensors
	SharedExperts bool   // spell the shared expert mlp.shared_experts (transformers' name)
	BiasOnGate    bool   // mlp.gate.e_score_correction_bias instead of mlp.experts.
	Shards        int    // > 1 writes that many shards and model.safetensors.index.json
	Seed          uint64
	// Edit, when set, may change, add or delete HF tensors before writing.
	Edit func(map[string]*Tensor)
}

// Tensor is one HF tensor: float32 values already rounded to the file's dtype.
type Tensor struct {
	Shape []int
	Data  []float32
}

// ConfigJSON renders cfg as a transformers config.json.
func ConfigJSON(cfg *config.Config) ([]byte, error) {
	b, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	m["model_type"] = "laguna"
	m["architectures"] = []string{"LagunaForCausalLM"}
	m["gating"] = cfg.Gating
	if cfg.BOSTokenID >= 0 {
		m["bos_token_id"] = cfg.BOSTokenID
	}
	if cfg.PadTokenID >= 0 {
		m["pad_token_id"] = cfg.PadTokenID
	}
	if len(cfg.EOSTokenIDs) > 0 {
		m["eos_token_id"] = cfg.EOSTokenIDs
	}
	return json.MarshalIndent(m, "", "  ")
}

// HFTensors makes random weights for cfg under HF names.
func HFTensors(cfg *config.Config, opt Options) map[string]*Tensor {
	r := rand.New(rand.NewPCG(opt.Seed, 0x1a6c))
	out := map[string]*Tensor{}
	mk := func(name string, norm bool, shape ...int) {
		n := 1
		for _, d := range shape {
			n *= d
		}
		t := &Tensor{Shape: shape, Data: make([]float32, n)}
		for i := range t.Data {
			v := r.Float32()*2 - 1
			if norm {
				v = 1 + 0.2*v
			} else {
				v *= 0.5
			}
			t.Data[i] = v
		}
		out[name] = t
	}
	H, V, d, kv := cfg.HiddenSize, cfg.VocabSize, cfg.HeadDim, cfg.NumKVHeads
	mk("model.embed_tokens.weight", false, V, H)
	mk("model.norm.weight", true, H)
	if !cfg.TieWordEmbeddings {
		mk("lm_head.weight", false, V, H)
	}
	for l := 0; l < cfg.NumLayers; l++ {
		p := fmt.Sprintf("model.layers.%d.", l)
		nh := cfg.Heads(l)
		mk(p+"input_layernorm.weight", true, H)
		mk(p+"post_attention_layernorm.weight", true, H)
		mk(p+"self_attn.q_proj.weight", false, nh*d, H)
		mk(p+"self_attn.k_proj.weight", false, kv*d, H)
		mk(p+"self_attn.v_proj.weight", false, kv*d, H)
		mk(p+"self_attn.o_proj.weight", false, H, nh*d)
		mk(p+"self_attn.g_proj.weight", false, cfg.GateRows(l), H)
		mk(p+"self_attn.q_norm.weight", true, d)
		mk(p+"self_attn.k_norm.weight", true, d)
		if !cfg.IsMoE(l) {
			I := cfg.IntermediateSize
			mk(p+"mlp.gate_proj.weight", false, I, H)
			mk(p+"mlp.up_proj.weight", false, I, H)
			mk(p+"mlp.down_proj.weight", false, H, I)
			continue
		}
		E, Ie, Is := cfg.NumExperts, cfg.MoEIntermediateSize, cfg.SharedExpertSize
		mk(p+"mlp.gate.weight", false, E, H)
		bias := p + "mlp.experts.e_score_correction_bias"
		if opt.BiasOnGate {
			bias = p + "mlp.gate.e_score_correction_bias"
		}
		mk(bias, false, E)
		if opt.FusedExperts {
			mk(p+"mlp.experts.gate_up_proj", false, E, 2*Ie, H)
			mk(p+"mlp.experts.down_proj", false, E, H, Ie)
		} else {
			for e := 0; e < E; e++ {
				mk(fmt.Sprintf("%smlp.experts.%d.gate_proj.weight", p, e), false, Ie, H)
				mk(fmt.Sprintf("%smlp.experts.%d.up_proj.weight", p, e), false, Ie, H)
				mk(fmt.Sprintf("%smlp.experts.%d.down_proj.weight", p, e), false, H, Ie)
			}
		}
		sh := p + "mlp.shared_expert."
		if opt.SharedExperts {
			sh = p + "mlp.shared_experts."
		}
		mk(sh+"gate_proj.weight", false, Is, H)
		mk(sh+"up_proj.weight", false, Is, H)
		mk(sh+"down_proj.weight", false, H, Is)
	}
	return out
}

// WriteHF writes config.json and safetensors for cfg into dir and returns
// the tensors written (values as stored, after rounding to the dtype).
func WriteHF(dir string, cfg *config.Config, opt Options) (map[string]*Tensor, error) {
	js, err := ConfigJSON(cfg)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), js, 0o644); err != nil {
		return nil, err
	}
	ts := HFTensors(cfg, opt)
	if opt.Edit != nil {
		opt.Edit(ts)
	}
	dt := opt.DType
	if dt == "" {
		dt = "F32"
	}
	for _, t := range ts {
		Round(t.Data, dt)
	}
	names := make([]string, 0, len(ts))
	for n := range ts {
		names = append(names, n)
	}
	sort.Strings(names)
	if opt.Shards <= 1 {
		return ts, WriteSafetensors(filepath.Join(dir, "model.safetensors"), ts, names, dt)
	}
	weightMap := map[string]string{}
	for s := 0; s < opt.Shards; s++ {
		file := fmt.Sprintf("model-%05d-of-%05d.safetensors", s+1, opt.Shards)
		var part []string
		for i, n := range names {
			if i%opt.Shards == s {
				part = append(part, n)
				weightMap[n] = file
			}
		}
		if err := WriteSafetensors(filepath.Join(dir, file), ts, part, dt); err != nil {
			return nil, err
		}
	}
	idx, _ := json.MarshalIndent(map[string]any{"metadata": map[string]any{}, "weight_map": weightMap}, "", "  ")
	return ts, os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), idx, 0o644)
}

// Round rounds values in place to what dtype ("F32", "F16", "BF16") stores.
func Round(v []float32, dtype string) {
	for i, x := range v {
		switch dtype {
		case "F16":
			v[i] = quant.F16ToF32(quant.F32ToF16(x))
		case "BF16":
			v[i] = quant.BF16ToF32(quant.F32ToBF16(x))
		}
	}
}

// WriteSafetensors writes the named tensors (in that order) to path.
func WriteSafetensors(path string, ts map[string]*Tensor, names []string, dtype string) error {
	es := 4
	if dtype != "F32" {
		es = 2
	}
	header := map[string]any{"__metadata__": map[string]string{"format": "pt"}}
	off := 0
	for _, n := range names {
		t := ts[n]
		header[n] = map[string]any{"dtype": dtype, "shape": t.Shape, "data_offsets": []int{off, off + es*len(t.Data)}}
		off += es * len(t.Data)
	}
	hj, err := json.Marshal(header)
	if err != nil {
		return err
	}
	for len(hj)%8 != 0 {
		hj = append(hj, ' ')
	}
	buf := make([]byte, 8, 8+len(hj)+off)
	binary.LittleEndian.PutUint64(buf, uint64(len(hj)))
	buf = append(buf, hj...)
	for _, n := range names {
		for _, x := range ts[n].Data {
			switch dtype {
			case "F32":
				buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(x))
			case "F16":
				buf = binary.LittleEndian.AppendUint16(buf, quant.F32ToF16(x))
			case "BF16":
				buf = binary.LittleEndian.AppendUint16(buf, quant.F32ToBF16(x))
			default:
				return fmt.Errorf("ckpttest: dtype %q", dtype)
			}
		}
	}
	return os.WriteFile(path, buf, 0o644)
}

// WriteOverflowHF writes the tiny model into dir with finite weights whose
// products overflow float32: layer 1's post-attention norm is all 3e38, so
// its output is infinite from finite inputs.
func WriteOverflowHF(dir string) error {
	_, err := WriteHF(dir, TinyConfig(), Options{Seed: 4, Edit: func(ts map[string]*Tensor) {
		w := ts["model.layers.1.post_attention_layernorm.weight"]
		for i := range w.Data {
			w.Data[i] = 3e38
		}
	}})
	return err
}
