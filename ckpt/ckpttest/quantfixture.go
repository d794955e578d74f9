package ckpttest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"

	"lagc/ckpt"
	"lagc/config"
	"lagc/quant"
)

// QuantConfig is the model of the quantised fixtures (testdata/quant):
// every matrix has rows of 256 (or a multiple), so every k-quant applies
// without fallbacks. Hidden 256, vocab 64, a dense full-attention layer 0
// and a sliding MoE layer 1 (3 experts, top-2, shared expert), 4 heads of
// 64 over 2 KV heads, per-head gating. 1.4M parameters.
func QuantConfig() *config.Config {
	c := config.Defaults()
	c.VocabSize, c.HiddenSize, c.IntermediateSize = 64, 256, 256
	c.NumLayers, c.NumHeads, c.NumKVHeads, c.HeadDim = 2, 4, 2, 64
	c.MaxPositionEmbeddings, c.SlidingWindow = 128, 8
	c.NumExperts, c.NumExpertsPerTok, c.MoEIntermediateSize, c.SharedExpertSize = 3, 2, 256, 256
	c.LayerTypes = []string{config.FullAttention, config.SlidingAttention}
	c.MLPLayerTypes = []string{config.MLPDense, config.MLPSparse}
	c.HeadsPerLayer = []int{4, 4}
	c.RoutedScaling, c.RouterSoftcap = 2.5, 0
	c.Gating = config.GatingPerHead
	c.RopeParameters = map[string]config.Rope{
		config.FullAttention:    {Type: "default", Theta: 500000, PartialRotaryFactor: 0.5},
		config.SlidingAttention: {Type: "default", Theta: 10000, PartialRotaryFactor: 1},
	}
	c.BOSTokenID, c.EOSTokenIDs, c.PadTokenID = 1, []int{2}, 0
	if err := c.Normalize(); err != nil {
		panic("ckpttest: quant config invalid: " + err.Error()) // a bug in this file, not user input
	}
	return c
}

// QuantSeed seeds the weights of the committed quantised fixtures.
const QuantSeed = 11

// QuantTensors returns float32 weights for cfg under GGUF names, in
// fixtureOrder: normal with standard deviation 1/sqrt(fan-in)
// (embeddings 1, norms around 1), and in matrices every 17th row (from
// row 5) starts with 64 values that stress a quantiser's edge cases in
// turn: zeros, a constant, magnitudes below ggml's GROUP_MAX_EPS, and a
// single outlier.
func QuantTensors(cfg *config.Config, seed uint64) []ckpt.GGUFTensor {
	r := rand.New(rand.NewPCG(seed, 0x9e3779b9))
	var out []ckpt.GGUFTensor
	for _, e := range fixtureOrder(cfg) {
		n := 1
		for _, d := range e.Shape {
			n *= d
		}
		v := make([]float32, n)
		cols := e.Shape[len(e.Shape)-1]
		std, mean := 1/math.Sqrt(float64(cols)), 0.0
		switch {
		case strings.HasSuffix(e.Name, ".bias"):
			std = 0.1
		case len(e.Shape) == 1: // norms
			std, mean = 0.1, 1
		case e.Name == "token_embd.weight":
			std = 1
		}
		for i := range v {
			v[i] = float32(mean + r.NormFloat64()*std)
		}
		if len(e.Shape) >= 2 && cols >= 64 {
			for row := 5; row*cols < n; row += 17 {
				x := v[row*cols : row*cols+64]
				switch (row / 17) % 4 {
				case 0:
					clear(x)
				case 1:
					for i := range x {
						x[i] = 0.0125
					}
				case 2:
					for i := range x {
						x[i] *= 1e-18
					}
				case 3:
					x[row%64] *= 25
				}
			}
		}
		data := make([]byte, 4*n)
		if err := quant.Quantize(quant.F32, data, v); err != nil {
			panic("ckpttest: " + err.Error())
		}
		out = append(out, ckpt.GGUFTensor{Name: e.Name, DType: ckpt.F32, Shape: e.Shape, Data: data})
	}
	return out
}

// QuantF32 returns the metadata and tensors of the f32 GGUF that the
// quantised fixtures were made from.
func QuantF32() ([]ckpt.KV, []ckpt.GGUFTensor, error) {
	cfg := QuantConfig()
	kv, err := ckpt.ConfigMetadata(cfg)
	if err != nil {
		return nil, nil, err
	}
	kv = append(kv, ckpt.KV{Key: "general.file_type", Value: uint32(0)}, ckpt.KV{Key: "general.name", Value: "quant-fixture"})
	return kv, QuantTensors(cfg, QuantSeed), nil
}

type fixtureTensor struct {
	Name  string
	Shape []int
}

// fixtureOrder lists the GGUF tensors of cfg in the order the committed
// quantised fixtures drew their random weights in (the seed's stream
// depends on it, so it must not change). What a checkpoint must hold is
// the graph's business (engine.ExpectedTensors); this only orders a
// generator.
func fixtureOrder(cfg *config.Config) []fixtureTensor {
	V, H, d, kv := cfg.VocabSize, cfg.HiddenSize, cfg.HeadDim, cfg.NumKVHeads
	out := []fixtureTensor{{"token_embd.weight", []int{V, H}}, {"output_norm.weight", []int{H}}}
	if !cfg.TieWordEmbeddings {
		out = append(out, fixtureTensor{"output.weight", []int{V, H}})
	}
	for l := 0; l < cfg.NumLayers; l++ {
		p := fmt.Sprintf("blk.%d.", l)
		nh := cfg.Heads(l)
		out = append(out,
			fixtureTensor{p + "attn_norm.weight", []int{H}},
			fixtureTensor{p + "attn_q.weight", []int{nh * d, H}},
			fixtureTensor{p + "attn_k.weight", []int{kv * d, H}},
			fixtureTensor{p + "attn_v.weight", []int{kv * d, H}},
			fixtureTensor{p + "attn_q_norm.weight", []int{d}},
			fixtureTensor{p + "attn_k_norm.weight", []int{d}},
			fixtureTensor{p + "attn_gate.weight", []int{cfg.GateRows(l), H}},
			fixtureTensor{p + "attn_output.weight", []int{H, nh * d}},
			fixtureTensor{p + "ffn_norm.weight", []int{H}},
		)
		if !cfg.IsMoE(l) {
			I := cfg.IntermediateSize
			out = append(out,
				fixtureTensor{p + "ffn_gate.weight", []int{I, H}},
				fixtureTensor{p + "ffn_up.weight", []int{I, H}},
				fixtureTensor{p + "ffn_down.weight", []int{H, I}})
			continue
		}
		E, Ie, Is := cfg.NumExperts, cfg.MoEIntermediateSize, cfg.SharedExpertSize
		out = append(out,
			fixtureTensor{p + "ffn_gate_inp.weight", []int{E, H}},
			fixtureTensor{p + "exp_probs_b.bias", []int{E}},
			fixtureTensor{p + "ffn_gate_exps.weight", []int{E, Ie, H}},
			fixtureTensor{p + "ffn_up_exps.weight", []int{E, Ie, H}},
			fixtureTensor{p + "ffn_down_exps.weight", []int{E, H, Ie}})
		if Is > 0 {
			out = append(out,
				fixtureTensor{p + "ffn_gate_shexp.weight", []int{Is, H}},
				fixtureTensor{p + "ffn_up_shexp.weight", []int{Is, H}},
				fixtureTensor{p + "ffn_down_shexp.weight", []int{H, Is}})
		}
	}
	return out
}
