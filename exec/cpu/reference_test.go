package cpu

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"

	"lagc/config"
	"lagc/prep"
)

// This test runs the whole Laguna forward pass, composed from this
// package's kernels, against transformers 5.17 (LagunaForCausalLM, float32,
// CPU) on two tiny models. testdata/torch_reference.py made
// testdata/torch_reference.json on the H200 machine; the weights are not
// stored but regenerated here bit for bit from their names.

type torchReference struct {
	Transformers string `json:"transformers"`
	Models       []struct {
		Name    string          `json:"name"`
		Config  json.RawMessage `json:"config"`
		Tensors []struct {
			Name   string  `json:"name"`
			Shape  []int   `json:"shape"`
			Offset float64 `json:"offset"`
			Scale  float64 `json:"scale"`
		} `json:"tensors"`
		Prompt []int32 `json:"prompt"`
		Rope   map[string]struct {
			InvFreq          []float64 `json:"inv_freq"`
			AttentionScaling float64   `json:"attention_scaling"`
		} `json:"rope"`
		LayerOutputs [][][]float64 `json:"layer_outputs"` // [layer][T][H]
		Logits       [][]float64   `json:"logits"`        // [T][V]
	} `json:"models"`
}

// refValues is torch_reference.py's generator: splitmix64 seeded with the
// FNV-1a hash of the name, offset + scale*u with u = 24 bits/2^23 - 1.
func refValues(name string, n int, offset, scale float64) []float32 {
	state := uint64(0xcbf29ce484222325)
	for _, b := range []byte(name) {
		state = (state ^ uint64(b)) * 0x100000001b3
	}
	out := make([]float32, n)
	for i := range out {
		state += 0x9e3779b97f4a7c15
		z := state
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
		z = (z ^ (z >> 27)) * 0x94d049bb133111eb
		z ^= z >> 31
		u := float64(z>>40)/8388608.0 - 1
		out[i] = float32(offset + scale*u)
	}
	return out
}

// lagunaRef is a minimal Laguna forward over the kernels, in HF weight names.
type lagunaRef struct {
	cfg    *config.Config
	w      map[string][]float32
	ropes  map[string]*prep.RopeTable
	caches []*KVCache
}

func (m *lagunaRef) get(t *testing.T, name string) []float32 {
	t.Helper()
	w, ok := m.w[name]
	if !ok {
		t.Fatalf("no tensor %s", name)
	}
	return w
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// mlp is down(silu(gate x) * up x) for x [T,H] and width I.
func (m *lagunaRef) mlp(t *testing.T, x []float32, T, I int, prefix string) []float32 {
	H := m.cfg.HiddenSize
	g := make([]float32, T*I)
	u := make([]float32, T*I)
	must(t, MatMul(g, x, m.get(t, prefix+"gate_proj.weight"), T, H, I))
	must(t, MatMul(u, x, m.get(t, prefix+"up_proj.weight"), T, H, I))
	must(t, SiLU(g, g))
	must(t, Mul(g, g, u))
	out := make([]float32, T*H)
	must(t, MatMul(out, g, m.get(t, prefix+"down_proj.weight"), T, I, H))
	return out
}

// step runs tokens at positions p0.. through the model, appending to the
// caches; it returns each layer's output [T,H] and the logits [T,V].
func (m *lagunaRef) step(t *testing.T, ids []int32, p0 int) ([][]float32, []float32) {
	c := m.cfg
	T, H, d, nkv := len(ids), c.HiddenSize, c.HeadDim, c.NumKVHeads
	eps := float32(c.RMSNormEps)
	pos := make([]int32, T)
	for i := range pos {
		pos[i] = int32(p0 + i)
	}
	h := make([]float32, T*H)
	must(t, Embedding(h, ids, m.get(t, "model.embed_tokens.weight"), c.VocabSize, H))
	var layerOut [][]float32
	for l := 0; l < c.NumLayers; l++ {
		pre := fmt.Sprintf("model.layers.%d.", l)
		nh := c.Heads(l)
		a := make([]float32, T*H)
		must(t, RMSNorm(a, h, m.get(t, pre+"input_layernorm.weight"), T, H, eps))
		q := make([]float32, T*nh*d)
		k := make([]float32, T*nkv*d)
		v := make([]float32, T*nkv*d)
		must(t, MatMul(q, a, m.get(t, pre+"self_attn.q_proj.weight"), T, H, nh*d))
		must(t, MatMul(k, a, m.get(t, pre+"self_attn.k_proj.weight"), T, H, nkv*d))
		must(t, MatMul(v, a, m.get(t, pre+"self_attn.v_proj.weight"), T, H, nkv*d))
		must(t, RMSNorm(q, q, m.get(t, pre+"self_attn.q_norm.weight"), T*nh, d, eps))
		must(t, RMSNorm(k, k, m.get(t, pre+"self_attn.k_norm.weight"), T*nkv, d, eps))
		tab := m.ropes[c.LayerTypes[l]]
		must(t, RoPE(q, q, pos, T, nh, d, tab))
		must(t, RoPE(k, k, pos, T, nkv, d, tab))
		window := 0
		if c.IsSliding(l) {
			window = c.SlidingWindow
		}
		o := make([]float32, T*nh*d)
		must(t, Attention(o, q, k, v, pos, T, nh, nkv, d, window, float32(1/math.Sqrt(float64(d))), m.caches[l]))
		G := c.GateRows(l)
		g := make([]float32, T*G)
		must(t, MatMul(g, a, m.get(t, pre+"self_attn.g_proj.weight"), T, H, G))
		must(t, SoftplusGate(o, o, g, T, nh, d, G))
		attn := make([]float32, T*H)
		must(t, MatMul(attn, o, m.get(t, pre+"self_attn.o_proj.weight"), T, nh*d, H))
		must(t, Add(h, h, attn))

		x := make([]float32, T*H)
		must(t, RMSNorm(x, h, m.get(t, pre+"post_attention_layernorm.weight"), T, H, eps))
		var out []float32
		if !c.IsMoE(l) {
			out = m.mlp(t, x, T, c.IntermediateSize, pre+"mlp.")
		} else {
			E, I, topK := c.NumExperts, c.MoEIntermediateSize, c.NumExpertsPerTok
			logits := make([]float32, T*E)
			must(t, MatMul(logits, x, m.get(t, pre+"mlp.gate.weight"), T, H, E))
			wts := make([]float32, T*topK)
			sel := make([]int32, T*topK)
			must(t, RouterTopK(wts, sel, logits, m.get(t, pre+"mlp.gate.e_score_correction_bias"), T, E, topK,
				float32(c.RouterSoftcap), float32(c.RoutedScaling)))
			gate := make([]float32, E*I*H)
			up := make([]float32, E*I*H)
			must(t, Split([][]float32{gate, up}, m.get(t, pre+"mlp.experts.gate_up_proj"), E, []int{I * H, I * H}))
			out = make([]float32, T*H)
			must(t, MoEExperts(out, x, wts, sel, gate, up, m.get(t, pre+"mlp.experts.down_proj"), T, H, E, I, topK))
			must(t, Add(out, out, m.mlp(t, x, T, c.SharedExpertSize, pre+"mlp.shared_experts.")))
		}
		must(t, Add(h, h, out))
		layerOut = append(layerOut, append([]float32(nil), h...))
	}
	must(t, RMSNorm(h, h, m.get(t, "model.norm.weight"), T, H, eps))
	head := "lm_head.weight"
	if c.TieWordEmbeddings {
		head = "model.embed_tokens.weight"
	}
	logits := make([]float32, T*c.VocabSize)
	must(t, MatMul(logits, h, m.get(t, head), T, H, c.VocabSize))
	return layerOut, logits
}

// run feeds the prompt in chunks of the given sizes (the last repeats) to
// fresh caches and returns layer outputs and logits for every position.
func (m *lagunaRef) run(t *testing.T, prompt []int32, chunks []int) ([][]float32, []float32) {
	var err error
	m.caches, err = NewCaches(m.cfg, 64)
	must(t, err)
	var layers [][]float32
	var logits []float32
	for p0, i := 0, 0; p0 < len(prompt); i++ {
		n := min(chunks[min(i, len(chunks)-1)], len(prompt)-p0)
		lo, lg := m.step(t, prompt[p0:p0+n], p0)
		if layers == nil {
			layers = make([][]float32, len(lo))
		}
		for l := range lo {
			layers[l] = append(layers[l], lo[l]...)
		}
		logits = append(logits, lg...)
		p0 += n
	}
	return layers, logits
}

func flatten(rows [][]float64) []float64 {
	var f []float64
	for _, r := range rows {
		f = append(f, r...)
	}
	return f
}

func TestLagunaForwardMatchesTransformers(t *testing.T) {
	data, err := os.ReadFile("testdata/torch_reference.json")
	if err != nil {
		t.Fatal(err)
	}
	var ref torchReference
	if err := json.Unmarshal(data, &ref); err != nil {
		t.Fatal(err)
	}
	if len(ref.Models) != 2 || !strings.HasPrefix(ref.Transformers, "5.") {
		t.Fatalf("unexpected reference file: %d models, transformers %q", len(ref.Models), ref.Transformers)
	}
	for _, rm := range ref.Models {
		t.Run(rm.Name, func(t *testing.T) {
			cfg, err := config.ParseHFConfig(rm.Config)
			must(t, err)
			m := &lagunaRef{cfg: cfg, w: map[string][]float32{}, ropes: map[string]*prep.RopeTable{}}
			for _, ts := range rm.Tensors {
				n := 1
				for _, s := range ts.Shape {
					n *= s
				}
				m.w[ts.Name] = refValues(ts.Name, n, ts.Offset, ts.Scale)
			}
			// Rotary tables: the same float32 frequencies and factor as transformers.
			for lt, want := range rm.Rope {
				tab, err := prep.NewRopeTable(prep.RopeParamsOf(cfg.RopeParameters[lt], cfg.HeadDim))
				must(t, err)
				m.ropes[lt] = tab
				for i, f := range want.InvFreq {
					if tab.InvFreq[i] != float32(f) {
						t.Errorf("%s inv_freq[%d] = %v, transformers %v", lt, i, tab.InvFreq[i], float32(f))
					}
				}
				if tab.AttnFactor != float32(want.AttentionScaling) {
					t.Errorf("%s attention factor %v, transformers %v", lt, tab.AttnFactor, want.AttentionScaling)
				}
			}
			layers, logits := m.run(t, rm.Prompt, []int{len(rm.Prompt)})
			for l, lo := range rm.LayerOutputs {
				// float32 rounding, which grows with the size of the
				// values: 12 units in the last place of the largest.
				want := flatten(lo)
				tol := 12 * 0x1p-23 * maxAbs(want)
				if d := maxAbsDiff(layers[l], want); d > tol {
					t.Errorf("layer %d output: max |diff| from transformers = %g, more than %g", l, d, tol)
				}
			}
			d := maxAbsDiff(logits, flatten(rm.Logits))
			t.Logf("max |logit diff| from transformers %s over %d positions: %.3g", ref.Transformers, len(rm.Prompt), d)
			if d > 5e-5 {
				t.Errorf("logits: max |diff| = %g", d)
			}
			V := cfg.VocabSize
			got := make([]int32, len(rm.Prompt))
			must(t, ArgMax(got, logits, len(rm.Prompt), V))
			for p, row := range rm.Logits {
				best := 0
				for i, x := range row {
					if x > row[best] {
						best = i
					}
				}
				if int(got[p]) != best {
					t.Errorf("position %d: argmax %d, transformers %d", p, got[p], best)
				}
			}
			// Token by token, and in uneven chunks, the logits are the same bits.
			for _, chunks := range [][]int{{1}, {4, 2, 3}} {
				_, lg := m.run(t, rm.Prompt, chunks)
				requireBitwise(t, fmt.Sprintf("logits, chunks %v", chunks), lg, logits)
			}
		})
	}
}
