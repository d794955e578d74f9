package ckpt_test

import (
	"path/filepath"
	"strings"
	"testing"

	"lagc/ckpt"
)

func TestRecipeTypeFor(t *testing.T) {
	m := func(name string, shape ...int) ckpt.TensorInfo {
		return ckpt.TensorInfo{Name: name, DType: ckpt.BF16, Shape: shape}
	}
	cases := []struct {
		recipe string
		t      ckpt.TensorInfo
		want   ckpt.DType
	}{
		{"q4_k_m", m("blk.3.ffn_gate_exps.weight", 8, 64, 256), ckpt.Q4_K},
		{"q4_k_m", m("blk.3.ffn_down_shexp.weight", 256, 512), ckpt.Q8_0},
		{"q4_k_m", m("blk.3.attn_gate.weight", 4, 256), ckpt.Q8_0},
		{"q4_k_m", m("output.weight", 64, 256), ckpt.Q8_0},
		{"q4_k_m", m("token_embd.weight", 64, 256), ckpt.Q4_K},
		{"q4_k_m", m("blk.0.ffn_down.weight", 256, 128), ckpt.Q5_0}, // rows of 128: Q4_K falls back
		{"q5_k_m", m("blk.0.ffn_down.weight", 256, 128), ckpt.Q5_1},
		{"q6_k", m("blk.0.ffn_down.weight", 256, 96), ckpt.Q8_0},
		{"q2_k", m("blk.0.ffn_down.weight", 256, 64), ckpt.Q4_0},
		{"iq4_xs", m("blk.0.ffn_down.weight", 256, 64), ckpt.IQ4_NL},
		{"q4_k", m("blk.0.ffn_down.weight", 256, 48), ckpt.F16}, // not even blocks of 32
		{"q8_0", m("blk.0.ffn_down.weight", 256, 48), ckpt.F16},
		{"q8_0", m("blk.0.attn_norm.weight", 256), ckpt.F32},
		{"q8_0", m("blk.0.ffn_gate_inp.weight", 8, 256), ckpt.F32},
		{"q8_0", m("blk.0.exp_probs_b.bias", 8), ckpt.F32},
		{"bf16", m("blk.0.attn_q.weight", 64, 64), ckpt.BF16},
	}
	for _, c := range cases {
		r, err := ckpt.ParseRecipe(c.recipe)
		if err != nil {
			t.Fatal(err)
		}
		if got := r.TypeFor(c.t); got != c.want {
			t.Errorf("%s: %s %v -> %s, want %s", c.recipe, c.t.Name, c.t.Shape, got, c.want)
		}
	}
	for _, bad := range []string{"q4_k_s", "iq2_xxs", "q8_1", ""} {
		if _, err := ckpt.ParseRecipe(bad); err == nil || !strings.Contains(err.Error(), "q4_k_m") {
			t.Errorf("ParseRecipe(%q): %v", bad, err)
		}
	}
}

// Each fixture is recognised as the recipe it was made with; a file no
// recipe describes is "mixed" (llama.cpp's own Q4_K_M mixture, NAME-llama).
func TestMatchRecipe(t *testing.T) {
	for _, path := range quantFixtures(t) {
		ck, err := ckpt.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		name, note := ckpt.MatchRecipe(ck.Tensors())
		want := strings.TrimSuffix(filepath.Base(path), ".gguf")
		if strings.HasSuffix(want, "-llama") {
			want = "mixed"
		}
		if name != want {
			t.Errorf("%s: recipe %q (%s)", path, name, note)
		}
		ck.Close()
	}
	ts := []ckpt.TensorInfo{
		{Name: "blk.0.attn_q.weight", DType: ckpt.Q6_K, Shape: []int{256, 256}},
		{Name: "blk.0.ffn_up.weight", DType: ckpt.Q4_K, Shape: []int{256, 256}},
	}
	if name, note := ckpt.MatchRecipe(ts); name != "mixed" || !strings.Contains(note, "q4_k 50.0%, q6_k 50.0%") {
		t.Errorf("mixed file: %q, %q", name, note)
	}
}
