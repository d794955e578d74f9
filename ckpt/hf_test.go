package ckpt_test

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"lagc/ckpt"
	"lagc/ckpt/ckpttest"
	"lagc/config"
	"lagc/engine"
)

// canonicalFromHF computes, from the HF tensors ckpttest wrote, what every
// canonical tensor must contain: an oracle independent of ckpt's mapping.
func canonicalFromHF(t *testing.T, cfg *config.Config, hf map[string]*ckpttest.Tensor) map[string]*ckpttest.Tensor {
	t.Helper()
	get := func(names ...string) *ckpttest.Tensor {
		for _, n := range names {
			if x, ok := hf[n]; ok {
				return x
			}
		}
		t.Fatalf("test checkpoint lacks %v", names)
		return nil
	}
	out := map[string]*ckpttest.Tensor{
		"token_embd.weight":  get("model.embed_tokens.weight"),
		"output_norm.weight": get("model.norm.weight"),
	}
	if !cfg.TieWordEmbeddings {
		out["output.weight"] = get("lm_head.weight")
	}
	direct := map[string]string{
		"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
		"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
		"attn_output": "self_attn.o_proj", "attn_gate": "self_attn.g_proj",
		"attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm",
	}
	for l := 0; l < cfg.NumLayers; l++ {
		hp := fmt.Sprintf("model.layers.%d.", l)
		cp := fmt.Sprintf("blk.%d.", l)
		for c, h := range direct {
			out[cp+c+".weight"] = get(hp + h + ".weight")
		}
		if !cfg.IsMoE(l) {
			for _, k := range []string{"gate", "up", "down"} {
				out[cp+"ffn_"+k+".weight"] = get(hp + "mlp." + k + "_proj.weight")
			}
			continue
		}
		out[cp+"ffn_gate_inp.weight"] = get(hp + "mlp.gate.weight")
		out[cp+"exp_probs_b.bias"] = get(hp+"mlp.experts.e_score_correction_bias", hp+"mlp.gate.e_score_correction_bias")
		for _, k := range []string{"gate", "up", "down"} {
			out[cp+"ffn_"+k+"_shexp.weight"] = get(hp+"mlp.shared_expert."+k+"_proj.weight", hp+"mlp.shared_experts."+k+"_proj.weight")
		}
		E, I, H := cfg.NumExperts, cfg.MoEIntermediateSize, cfg.HiddenSize
		if fused, ok := hf[hp+"mlp.experts.gate_up_proj"]; ok {
			g := &ckpttest.Tensor{Shape: []int{E, I, H}}
			u := &ckpttest.Tensor{Shape: []int{E, I, H}}
			for e := 0; e < E; e++ {
				blk := fused.Data[e*2*I*H : (e+1)*2*I*H]
				g.Data = append(g.Data, blk[:I*H]...)
				u.Data = append(u.Data, blk[I*H:]...)
			}
			out[cp+"ffn_gate_exps.weight"], out[cp+"ffn_up_exps.weight"] = g, u
			out[cp+"ffn_down_exps.weight"] = get(hp + "mlp.experts.down_proj")
			continue
		}
		for _, k := range []string{"gate", "up", "down"} {
			st := &ckpttest.Tensor{}
			for e := 0; e < E; e++ {
				x := get(fmt.Sprintf("%smlp.experts.%d.%s_proj.weight", hp, e, k))
				st.Shape = append([]int{E}, x.Shape...)
				st.Data = append(st.Data, x.Data...)
			}
			out[cp+"ffn_"+k+"_exps.weight"] = st
		}
	}
	return out
}

// checkTensors compares every canonical tensor of ck with want.
func checkTensors(t *testing.T, ck ckpt.Checkpoint, want map[string]*ckpttest.Tensor) {
	t.Helper()
	if got := len(ck.Tensors()); got != len(want) {
		t.Errorf("%d tensors, want %d", got, len(want))
	}
	for name, w := range want {
		info, ok := ck.Tensor(name)
		if !ok {
			t.Errorf("missing %s", name)
			continue
		}
		if !slices.Equal(info.Shape, w.Shape) {
			t.Errorf("%s: shape %v, want %v", name, info.Shape, w.Shape)
			continue
		}
		got, err := ck.ReadF32(name)
		if err != nil {
			t.Errorf("ReadF32(%s): %v", name, err)
			continue
		}
		if i := firstDiff(got, w.Data); i >= 0 {
			t.Errorf("%s: element %d is %v, want %v", name, i, got[i], w.Data[i])
		}
		raw, err := ck.Raw(name)
		if err != nil || int64(len(raw)) != info.Size {
			t.Errorf("Raw(%s): %d bytes, err %v; want %d bytes", name, len(raw), err, info.Size)
		}
	}
}

func firstDiff(a, b []float32) int {
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return i
		}
	}
	return -1
}

func TestOpenHF(t *testing.T) {
	cases := []struct {
		name string
		opt  ckpttest.Options
	}{
		{"f32 per-expert", ckpttest.Options{Seed: 1}},
		{"f16 fused gate_up", ckpttest.Options{Seed: 2, DType: "F16", FusedExperts: true}},
		{"bf16 shared_experts bias on gate", ckpttest.Options{Seed: 3, DType: "BF16", SharedExperts: true, BiasOnGate: true}},
		{"sharded per-expert", ckpttest.Options{Seed: 4, Shards: 3}},
		{"sharded fused bf16", ckpttest.Options{Seed: 5, Shards: 2, FusedExperts: true, DType: "BF16"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg := ckpttest.TinyConfig()
			hf, err := ckpttest.WriteHF(dir, cfg, tc.opt)
			if err != nil {
				t.Fatal(err)
			}
			ck, err := ckpt.Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer ck.Close()
			if !reflect.DeepEqual(ck.Config(), cfg) {
				t.Errorf("config:\n got %+v\nwant %+v", ck.Config(), cfg)
			}
			if ck.Format() != "safetensors" {
				t.Errorf("format %q", ck.Format())
			}
			checkTensors(t, ck, canonicalFromHF(t, cfg, hf))
			wantDT := map[string]ckpt.DType{"": ckpt.F32, "F16": ckpt.F16, "BF16": ckpt.BF16}[tc.opt.DType]
			for _, ti := range ck.Tensors() {
				if ti.DType != wantDT {
					t.Errorf("%s: dtype %s, want %s", ti.Name, ti.DType, wantDT)
				}
			}
			// Tensors lists globals first, then blocks in order.
			names := ck.Tensors()
			if names[0].Name != "token_embd.weight" || !strings.HasPrefix(names[len(names)-1].Name, "blk.3.") {
				t.Errorf("order: first %s, last %s", names[0].Name, names[len(names)-1].Name)
			}
		})
	}
}

func TestTiedEmbeddings(t *testing.T) {
	for _, withHead := range []bool{false, true} {
		dir := t.TempDir()
		cfg := ckpttest.TinyConfig()
		cfg.TieWordEmbeddings = true
		opt := ckpttest.Options{Edit: func(ts map[string]*ckpttest.Tensor) {
			if withHead { // some exporters still save the tied head; it is ignored
				ts["lm_head.weight"] = ts["model.embed_tokens.weight"]
			}
		}}
		hf, err := ckpttest.WriteHF(dir, cfg, opt)
		if err != nil {
			t.Fatal(err)
		}
		ck, err := ckpt.Open(dir)
		if err != nil {
			t.Fatalf("lm_head present=%v: %v", withHead, err)
		}
		if _, ok := ck.Tensor("output.weight"); ok {
			t.Errorf("tied checkpoint has output.weight")
		}
		if !ck.Config().TieWordEmbeddings {
			t.Errorf("config not tied")
		}
		checkTensors(t, ck, canonicalFromHF(t, cfg, hf))
		ck.Close()
	}
}

// openChecked opens a checkpoint as loading a model does: ckpt.Open, then
// its tensors against the model's graph.
func openChecked(path string) (ckpt.Checkpoint, error) {
	ck, err := ckpt.Open(path)
	if err != nil {
		return nil, err
	}
	if err := engine.CheckCheckpoint(ck); err != nil {
		ck.Close()
		return nil, err
	}
	return ck, nil
}

func TestOpenErrors(t *testing.T) {
	type tc struct {
		name  string
		opt   ckpttest.Options
		after func(t *testing.T, dir string) // damage the written files
		want  []string                       // substrings of the error
	}
	del := func(names ...string) func(map[string]*ckpttest.Tensor) {
		return func(ts map[string]*ckpttest.Tensor) {
			for _, n := range names {
				delete(ts, n)
			}
		}
	}
	cases := []tc{
		{name: "missing tensor", opt: ckpttest.Options{Edit: del("model.layers.2.self_attn.k_proj.weight")},
			want: []string{"missing tensor blk.2.attn_k.weight [16 16]", "model.layers.2.self_attn.k_proj.weight"}},
		{name: "missing lm_head", opt: ckpttest.Options{Edit: del("lm_head.weight")},
			want: []string{"missing tensor output.weight", "absent when embeddings are tied"}},
		{name: "missing expert", opt: ckpttest.Options{Edit: del("model.layers.1.mlp.experts.3.up_proj.weight")},
			want: []string{"blk.1.ffn_up_exps.weight", "expert 3 of 6 is missing"}},
		{name: "wrong shape", opt: ckpttest.Options{Edit: func(ts map[string]*ckpttest.Tensor) {
			ts["model.layers.1.self_attn.q_proj.weight"] = &ckpttest.Tensor{Shape: []int{16, 16}, Data: make([]float32, 256)}
		}}, want: []string{"blk.1.attn_q.weight", "has shape [16 16], expected [32 16]", "[nh * d, H] at laguna.yaml", "nh = 4, d = 8"}},
		{name: "wrong gate width", opt: ckpttest.Options{Edit: func(ts map[string]*ckpttest.Tensor) {
			ts["model.layers.0.self_attn.g_proj.weight"] = &ckpttest.Tensor{Shape: []int{16, 16}, Data: make([]float32, 256)}
		}}, want: []string{"blk.0.attn_gate.weight", "expected [2 16]", "[G, H]", "G = 2"}},
		{name: "experts disagree", opt: ckpttest.Options{Edit: func(ts map[string]*ckpttest.Tensor) {
			ts["model.layers.2.mlp.experts.4.down_proj.weight"] = &ckpttest.Tensor{Shape: []int{16, 11}, Data: make([]float32, 176)}
		}}, want: []string{"blk.2.ffn_down_exps.weight", "experts must agree"}},
		{name: "expert index out of range", opt: ckpttest.Options{Edit: func(ts map[string]*ckpttest.Tensor) {
			ts["model.layers.2.mlp.experts.6.down_proj.weight"] = ts["model.layers.2.mlp.experts.5.down_proj.weight"]
		}}, want: []string{"expert index 6 is out of range"}},
		{name: "unexpected tensor", opt: ckpttest.Options{Edit: func(ts map[string]*ckpttest.Tensor) {
			ts["model.layers.1.self_attn.q_proj.bias"] = &ckpttest.Tensor{Shape: []int{32}, Data: make([]float32, 32)}
		}}, want: []string{"unexpected tensor model.layers.1.self_attn.q_proj.bias"}},
		{name: "both bias spellings", opt: ckpttest.Options{Edit: func(ts map[string]*ckpttest.Tensor) {
			ts["model.layers.1.mlp.gate.e_score_correction_bias"] = ts["model.layers.1.mlp.experts.e_score_correction_bias"]
		}}, want: []string{"blk.1.exp_probs_b.bias is given twice"}},
		{name: "truncated file", after: func(t *testing.T, dir string) {
			p := filepath.Join(dir, "model.safetensors")
			st, _ := os.Stat(p)
			if err := os.Truncate(p, st.Size()-100); err != nil {
				t.Fatal(err)
			}
		}, want: []string{"model.safetensors", "lie past the end of the file", "truncated", "its bytes [", "more after it"}},
		{name: "wrong architecture", after: func(t *testing.T, dir string) {
			rewrite(t, filepath.Join(dir, "config.json"), `"model_type": "laguna"`, `"model_type": "llama"`)
		}, want: []string{"unsupported architecture", `"llama"`}},
		{name: "bad header JSON", after: func(t *testing.T, dir string) {
			writeST(t, filepath.Join(dir, "model.safetensors"), `{"a": [1,2`, 0)
		}, want: []string{"header is not a JSON object"}},
		{name: "header length past EOF", after: func(t *testing.T, dir string) {
			b := make([]byte, 16)
			binary.LittleEndian.PutUint64(b, 1000)
			os.WriteFile(filepath.Join(dir, "model.safetensors"), b, 0o644)
		}, want: []string{"header length 1000 runs past the end", "truncated"}},
		{name: "offsets past EOF", after: func(t *testing.T, dir string) {
			writeST(t, filepath.Join(dir, "model.safetensors"),
				`{"model.norm.weight":{"dtype":"F32","shape":[16],"data_offsets":[64,128]}}`, 64)
		}, want: []string{`tensor "model.norm.weight"`, "lie past the end of the file"}},
		{name: "offsets overflow", after: func(t *testing.T, dir string) {
			// base + data_offsets wraps past math.MaxInt64 to a negative file offset.
			writeST(t, filepath.Join(dir, "model.safetensors"),
				`{"model.norm.weight":{"dtype":"F32","shape":[16],"data_offsets":[9223372036854775700,9223372036854775764]}}`, 64)
		}, want: []string{`tensor "model.norm.weight"`, "lie past the end of the file"}},
		{name: "offsets disagree with shape", after: func(t *testing.T, dir string) {
			writeST(t, filepath.Join(dir, "model.safetensors"),
				`{"model.norm.weight":{"dtype":"F32","shape":[16],"data_offsets":[0,60]}}`, 64)
		}, want: []string{"hold 60 bytes", "needs 64"}},
		{name: "unsupported dtype", after: func(t *testing.T, dir string) {
			writeST(t, filepath.Join(dir, "model.safetensors"),
				`{"model.norm.weight":{"dtype":"I64","shape":[16],"data_offsets":[0,128]}}`, 128)
		}, want: []string{`dtype "I64"`, "F32, F16 and BF16"}},
		{name: "index names a missing tensor", opt: ckpttest.Options{Shards: 2}, after: func(t *testing.T, dir string) {
			rewrite(t, filepath.Join(dir, "model.safetensors.index.json"), `"weight_map": {`, `"weight_map": {"model.extra.weight": "model-00001-of-00002.safetensors",`)
		}, want: []string{"model.extra.weight", "has no such tensor"}},
		{name: "index escapes directory", opt: ckpttest.Options{Shards: 2}, after: func(t *testing.T, dir string) {
			rewrite(t, filepath.Join(dir, "model.safetensors.index.json"), `"weight_map": {`, `"weight_map": {"x": "../evil.safetensors",`)
		}, want: []string{"not a file name in the checkpoint directory"}},
		{name: "no weights", after: func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, "model.safetensors"))
		}, want: []string{"no model.safetensors"}},
		{name: "no config", after: func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, "config.json"))
		}, want: []string{"config.json"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			if _, err := ckpttest.WriteHF(dir, ckpttest.TinyConfig(), c.opt); err != nil {
				t.Fatal(err)
			}
			if c.after != nil {
				c.after(t, dir)
			}
			ck, err := openChecked(dir)
			if err == nil {
				ck.Close()
				t.Fatalf("Open succeeded; want an error containing %q", c.want)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\nlacks %q", err, w)
				}
			}
		})
	}
}

func rewrite(t *testing.T, path, old, new string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	if !strings.Contains(s, old) {
		t.Fatalf("%s lacks %q", path, old)
	}
	if err := os.WriteFile(path, []byte(strings.Replace(s, old, new, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
}

// writeST writes a safetensors file with the given header and n data bytes.
func writeST(t *testing.T, path, header string, n int) {
	t.Helper()
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	b = append(b, header...)
	b = append(b, make([]byte, n)...)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
