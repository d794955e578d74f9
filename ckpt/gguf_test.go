package ckpt_test

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"lagc/ckpt"
	"lagc/ckpt/ckpttest"
	"lagc/config"
	"lagc/quant"
)

// roundedFor returns want with each tensor rounded as WriteGGUF stores it.
func roundedFor(want map[string]*ckpttest.Tensor, dt ckpt.DType) map[string]*ckpttest.Tensor {
	out := map[string]*ckpttest.Tensor{}
	for name, w := range want {
		c := &ckpttest.Tensor{Shape: w.Shape, Data: append([]float32(nil), w.Data...)}
		keepF32 := len(w.Shape) <= 1 || strings.HasSuffix(name, "_norm.weight") || strings.HasSuffix(name, "ffn_gate_inp.weight")
		if !keepF32 {
			ckpttest.Round(c.Data, strings.ToUpper(dt.String()))
		}
		out[name] = c
	}
	return out
}

func TestGGUFRoundTrip(t *testing.T) {
	cases := []struct {
		name string
		cfg  func(*config.Config)
		opt  ckpttest.Options
		out  ckpt.DType
	}{
		{"f32 from f32", nil, ckpttest.Options{Seed: 7}, ckpt.F32},
		{"f16 from f32 fused", nil, ckpttest.Options{Seed: 8, FusedExperts: true}, ckpt.F16},
		{"bf16 from f32", nil, ckpttest.Options{Seed: 9}, ckpt.BF16},
		{"f16 from bf16", nil, ckpttest.Options{Seed: 10, DType: "BF16"}, ckpt.F16},
		{"tied, per-element gating, default rope, attention factor", func(c *config.Config) {
			c.TieWordEmbeddings = true
			c.Gating = config.GatingPerElement
			c.MLPLayerTypes = []string{config.MLPDense, config.MLPDense, config.MLPSparse, config.MLPSparse}
			r := c.RopeParameters[config.FullAttention]
			r.AttentionFactor = 1.25
			c.RopeParameters[config.FullAttention] = r
			c.RouterSoftcap = 0
		}, ckpttest.Options{Seed: 11}, ckpt.F32},
		{"no sliding layers, default rope", func(c *config.Config) {
			c.LayerTypes = []string{config.FullAttention, config.FullAttention, config.FullAttention, config.FullAttention}
			c.RopeParameters[config.FullAttention] = config.Rope{Type: "default", Theta: 10000, PartialRotaryFactor: 1}
			c.SlidingWindow = 0
		}, ckpttest.Options{Seed: 12}, ckpt.F16},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg := ckpttest.TinyConfig()
			if tc.cfg != nil {
				tc.cfg(cfg)
				if err := cfg.Normalize(); err != nil {
					t.Fatal(err)
				}
			}
			hf, err := ckpttest.WriteHF(dir, cfg, tc.opt)
			if err != nil {
				t.Fatal(err)
			}
			src, err := ckpt.Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer src.Close()
			out := filepath.Join(t.TempDir(), "m.gguf")
			var progress int
			opt := ckpt.WriteOptions{DType: tc.out, Name: "tiny", Progress: func(done, total int, _ ckpt.TensorInfo, _ ckpt.DType) {
				progress = done
				if total != len(src.Tensors()) {
					t.Errorf("progress total %d", total)
				}
			}}
			if err := ckpt.WriteGGUFFile(out, src, opt); err != nil {
				t.Fatal(err)
			}
			if progress != len(src.Tensors()) {
				t.Errorf("progress reached %d of %d", progress, len(src.Tensors()))
			}
			g, err := ckpt.Open(out)
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			if g.Format() != "gguf" {
				t.Errorf("format %q", g.Format())
			}
			if !reflect.DeepEqual(g.Config(), cfg) {
				t.Errorf("config after round trip:\n got %+v\nwant %+v", g.Config(), cfg)
			}
			checkTensors(t, g, roundedFor(canonicalFromHF(t, cfg, hf), tc.out))
			if name, _ := g.Metadata()["general.name"].(string); name != "tiny" {
				t.Errorf("general.name = %q", name)
			}
			// Re-writing the GGUF as it is reproduces it byte for byte.
			var again bytes.Buffer
			if err := ckpt.WriteGGUF(&again, g, ckpt.WriteOptions{KeepDType: true, Name: "tiny"}); err != nil {
				t.Fatal(err)
			}
			orig, _ := os.ReadFile(out)
			if !bytes.Equal(orig, again.Bytes()) {
				t.Errorf("GGUF -> GGUF rewrite differs (%d vs %d bytes)", len(orig), again.Len())
			}
		})
	}
}

// tinyGGUF returns the metadata and tensors of a valid tiny GGUF, made by
// converting a synthetic HF checkpoint, for tests that then alter them.
func tinyGGUF(t *testing.T) ([]ckpt.KV, []ckpt.GGUFTensor) {
	t.Helper()
	dir := t.TempDir()
	cfg := ckpttest.TinyConfig()
	if _, err := ckpttest.WriteHF(dir, cfg, ckpttest.Options{Seed: 3}); err != nil {
		t.Fatal(err)
	}
	src, err := ckpt.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	kv, err := ckpt.ConfigMetadata(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var ts []ckpt.GGUFTensor
	for _, ti := range src.Tensors() {
		raw, err := src.Raw(ti.Name)
		if err != nil {
			t.Fatal(err)
		}
		ts = append(ts, ckpt.GGUFTensor{Name: ti.Name, DType: ti.DType, Shape: ti.Shape, Data: append([]byte(nil), raw...)})
	}
	return kv, ts
}

func writeGGUF(t *testing.T, kv []ckpt.KV, ts []ckpt.GGUFTensor) string {
	t.Helper()
	var b bytes.Buffer
	if err := ckpt.EncodeGGUF(&b, kv, ts); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "x.gguf")
	if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestGGUFMetadataTypes(t *testing.T) {
	kv, ts := tinyGGUF(t)
	extra := []ckpt.KV{
		{"x.u8", uint8(200)}, {"x.i8", int8(-5)}, {"x.u16", uint16(60000)}, {"x.i16", int16(-300)},
		{"x.u32", uint32(4e9)}, {"x.i32", int32(-7)}, {"x.f32", float32(1.5)}, {"x.bool", true},
		{"x.str", "héllo"}, {"x.u64", uint64(1 << 60)}, {"x.i64", int64(-1 << 60)}, {"x.f64", 2.25},
		{"x.a.u8", []uint8{1, 2}}, {"x.a.i8", []int8{-1}}, {"x.a.u16", []uint16{3}}, {"x.a.i16", []int16{-3}},
		{"x.a.u32", []uint32{4, 5}}, {"x.a.i32", []int32{-4}}, {"x.a.f32", []float32{0.5}}, {"x.a.bool", []bool{true, false}},
		{"x.a.str", []string{"a", "", "bc"}}, {"x.a.u64", []uint64{9}}, {"x.a.i64", []int64{-9}}, {"x.a.f64", []float64{0.125}},
		{"x.a.empty", []uint32{}},
		{"x.nested", []any{[]uint32{1, 2}, []string{"z"}, []any{[]int8{-1}}}},
		{"general.alignment", uint32(64)},
	}
	p := writeGGUF(t, append(kv, extra...), ts)
	ck, err := ckpt.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	md := ck.Metadata()
	for _, e := range extra {
		if !reflect.DeepEqual(md[e.Key], e.Value) {
			t.Errorf("%s = %#v, want %#v", e.Key, md[e.Key], e.Value)
		}
	}
	// Data placed at 64-byte alignment still reads back.
	for _, g := range ts {
		raw, err := ck.Raw(g.Name)
		if err != nil || !bytes.Equal(raw, g.Data) {
			t.Errorf("%s: data differs at alignment 64 (err %v)", g.Name, err)
		}
	}
}

func TestGGUFQuantisedRead(t *testing.T) {
	kv, ts := tinyGGUF(t)
	var want []float32
	for i := range ts {
		switch ts[i].Name {
		case "blk.1.attn_output.weight": // [16, 32]: 16 blocks of 32
			f := make([]float32, 16*32)
			if err := quant.Dequantize(ts[i].DType, f, ts[i].Data); err != nil {
				t.Fatal(err)
			}
			ts[i].DType, ts[i].Data = ckpt.Q8_0, make([]byte, 16*34)
			if err := quant.Quantize(ckpt.Q8_0, ts[i].Data, f); err != nil {
				t.Fatal(err)
			}
			want = make([]float32, len(f))
			if err := quant.Dequantize(ckpt.Q8_0, want, ts[i].Data); err != nil {
				t.Fatal(err)
			}
		case "blk.2.attn_output.weight": // a type lagc knows the size of but cannot read
			ts[i].DType, ts[i].Data = quant.Q8_1, make([]byte, 16*36)
		}
	}
	ck, err := ckpt.Open(writeGGUF(t, kv, ts))
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	info, _ := ck.Tensor("blk.1.attn_output.weight")
	if info.DType != ckpt.Q8_0 || info.Size != 16*34 {
		t.Errorf("info %+v", info)
	}
	got, err := ck.ReadF32("blk.1.attn_output.weight")
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("ReadF32 of q8_0 differs from quant.Dequantize (err %v)", err)
	}
	if raw, err := ck.Raw("blk.1.attn_output.weight"); err != nil || len(raw) != 16*34 {
		t.Errorf("Raw of q8_0: %d bytes, %v", len(raw), err)
	}
	if _, err := ck.ReadF32("blk.2.attn_output.weight"); err == nil || !strings.Contains(err.Error(), "element type q8_1 is not supported") {
		t.Errorf("ReadF32 of q8_1: %v", err)
	}
	if err := ckpt.WriteGGUF(&bytes.Buffer{}, ck, ckpt.WriteOptions{DType: ckpt.F16}); err == nil || !strings.Contains(err.Error(), "q8_1, which lagc cannot convert to f16") {
		t.Errorf("converting a q8_1 tensor: %v", err)
	}
}

// A quantised tensor whose rows are not whole blocks is rejected when the
// file is opened, as ggml does, even if its total size is a whole number of
// blocks.
func TestGGUFQuantisedRowWidth(t *testing.T) {
	kv, ts := tinyGGUF(t)
	for i := range ts {
		if ts[i].Name == "blk.1.attn_v.weight" { // [16, 16]: 256 elements, rows of 16
			ts[i].DType, ts[i].Data = ckpt.Q8_0, make([]byte, 8*34)
		}
	}
	var b bytes.Buffer
	err := ckpt.EncodeGGUF(&b, kv, ts)
	if err == nil {
		path := filepath.Join(t.TempDir(), "x.gguf")
		if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err = ckpt.Open(path)
	}
	if err == nil || !strings.Contains(err.Error(), "rows of 16 are not a whole number of q8_0 blocks of 32") {
		t.Errorf("q8_0 rows of 16: %v", err)
	}
}

func TestGGUFOllamaVariant(t *testing.T) {
	kv, ts := tinyGGUF(t)
	for i := range ts {
		if strings.HasSuffix(ts[i].Name, ".attn_gate.weight") {
			ts[i].Name = strings.Replace(ts[i].Name, "attn_gate", "attn_g", 1)
		}
	}
	for i := range kv {
		switch kv[i].Key {
		case "laguna.rope.freq_base_swa":
			kv[i].Key = "laguna.rope.swa.freq_base"
		case "laguna.rope.dimension_count_swa":
			kv[i].Key = "laguna.rope.swa.dimension_count"
		}
	}
	ck, err := ckpt.Open(writeGGUF(t, kv, ts))
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	if !reflect.DeepEqual(ck.Config(), ckpttest.TinyConfig()) {
		t.Errorf("config %+v", ck.Config())
	}
}

func TestGGUFLayerPatterns(t *testing.T) {
	want := []string{config.FullAttention, config.SlidingAttention, config.SlidingAttention, config.SlidingAttention}
	cases := []struct {
		name string
		edit func([]ckpt.KV) []ckpt.KV
	}{
		{"default l%4", func(kv []ckpt.KV) []ckpt.KV { return drop(kv, "laguna.attention.sliding_window_pattern") }},
		{"layer_types strings", func(kv []ckpt.KV) []ckpt.KV {
			return append(drop(kv, "laguna.attention.sliding_window_pattern"), ckpt.KV{Key: "laguna.attention.layer_types", Value: want})
		}},
		{"period", func(kv []ckpt.KV) []ckpt.KV {
			return append(drop(kv, "laguna.attention.sliding_window_pattern"), ckpt.KV{Key: "laguna.attention.sliding_window_pattern", Value: uint32(4)})
		}},
		{"no leading_dense_block_count: from tensors", func(kv []ckpt.KV) []ckpt.KV { return drop(kv, "laguna.leading_dense_block_count") }},
		{"no optional sizes: from tensors", func(kv []ckpt.KV) []ckpt.KV {
			return drop(kv, "laguna.vocab_size", "laguna.feed_forward_length", "laguna.expert_feed_forward_length", "laguna.expert_shared_feed_forward_length", "laguna.attention.gate_per_head")
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			kv, ts := tinyGGUF(t)
			ck, err := ckpt.Open(writeGGUF(t, tc.edit(kv), ts))
			if err != nil {
				t.Fatal(err)
			}
			defer ck.Close()
			if !reflect.DeepEqual(ck.Config(), ckpttest.TinyConfig()) {
				t.Errorf("config %+v", ck.Config())
			}
		})
	}
}

func drop(kv []ckpt.KV, keys ...string) []ckpt.KV {
	var out []ckpt.KV
	for _, e := range kv {
		keep := true
		for _, k := range keys {
			keep = keep && e.Key != k
		}
		if keep {
			out = append(out, e)
		}
	}
	return out
}

func TestGGUFErrors(t *testing.T) {
	set := func(key string, v any) func([]ckpt.KV, []ckpt.GGUFTensor) ([]ckpt.KV, []ckpt.GGUFTensor) {
		return func(kv []ckpt.KV, ts []ckpt.GGUFTensor) ([]ckpt.KV, []ckpt.GGUFTensor) {
			return append(drop(kv, key), ckpt.KV{Key: key, Value: v}), ts
		}
	}
	cases := []struct {
		name string
		edit func([]ckpt.KV, []ckpt.GGUFTensor) ([]ckpt.KV, []ckpt.GGUFTensor)
		cut  int // bytes to cut off the end
		want []string
	}{
		{name: "wrong architecture", edit: set("general.architecture", "llama"), want: []string{"unsupported architecture", `"llama"`}},
		{name: "no architecture", edit: func(kv []ckpt.KV, ts []ckpt.GGUFTensor) ([]ckpt.KV, []ckpt.GGUFTensor) {
			return drop(kv, "general.architecture"), ts
		}, want: []string{"no general.architecture"}},
		{name: "missing tensor", edit: func(kv []ckpt.KV, ts []ckpt.GGUFTensor) ([]ckpt.KV, []ckpt.GGUFTensor) {
			var out []ckpt.GGUFTensor
			for _, x := range ts {
				if x.Name != "blk.3.ffn_up_exps.weight" {
					out = append(out, x)
				}
			}
			return kv, out
		}, want: []string{"missing tensor blk.3.ffn_up_exps.weight [6 12 16]"}},
		{name: "wrong shape", edit: func(kv []ckpt.KV, ts []ckpt.GGUFTensor) ([]ckpt.KV, []ckpt.GGUFTensor) {
			for i := range ts {
				if ts[i].Name == "blk.2.attn_output.weight" {
					ts[i].Shape = []int{32, 16}
				}
			}
			return kv, ts
		}, want: []string{"blk.2.attn_output.weight", "has shape [32 16], expected [16 32]"}},
		{name: "truncated", cut: 200, want: []string{"truncated", "lie past the end of the file", "blk.3."}},
		{name: "bad type of key", edit: set("laguna.block_count", "four"), want: []string{"laguna.block_count", "want a non-negative integer"}},
		{name: "head_count wrong length", edit: set("laguna.attention.head_count", []int32{2, 4}), want: []string{"laguna.attention.head_count", "4 entries"}},
		{name: "softmax gating", edit: set("laguna.expert_gating_func", uint32(1)), want: []string{"expert_gating_func = 1"}},
		{name: "unknown rope scaling", edit: set("laguna.rope.scaling.type", "linear"), want: []string{"rope.scaling.type", "linear"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			kv, ts := tinyGGUF(t)
			if tc.edit != nil {
				kv, ts = tc.edit(kv, ts)
			}
			p := writeGGUF(t, kv, ts)
			if tc.cut > 0 {
				st, _ := os.Stat(p)
				os.Truncate(p, st.Size()-int64(tc.cut))
			}
			ck, err := openChecked(p)
			if err == nil {
				ck.Close()
				t.Fatalf("Open succeeded; want an error with %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\nlacks %q", err, w)
				}
			}
		})
	}
}

func TestWriteRejectsInexpressibleConfig(t *testing.T) {
	cfg := ckpttest.TinyConfig()
	cfg.MLPLayerTypes = []string{config.MLPDense, config.MLPSparse, config.MLPDense, config.MLPSparse}
	if _, err := ckpt.ConfigMetadata(cfg); err == nil || !strings.Contains(err.Error(), "leading_dense_block_count") {
		t.Errorf("dense after MoE: %v", err)
	}
	cfg = ckpttest.TinyConfig()
	cfg.RopeParameters[config.SlidingAttention] = config.Rope{Type: "yarn", Theta: 1, PartialRotaryFactor: 1, Factor: 2, OriginalContext: 8}
	if _, err := ckpt.ConfigMetadata(cfg); err == nil || !strings.Contains(err.Error(), "sliding") {
		t.Errorf("yarn on sliding layers: %v", err)
	}
}
