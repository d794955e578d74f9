package main

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"lagc/ckpt"
	"lagc/ckpt/ckpttest"
)

func TestConvert(t *testing.T) {
	dir := t.TempDir()
	cfg := ckpttest.TinyConfig()
	if _, err := ckpttest.WriteHF(dir, cfg, ckpttest.Options{Seed: 5, DType: "BF16", FusedExperts: true}); err != nil {
		t.Fatal(err)
	}
	for _, dt := range []string{"keep", "f32", "f16", "bf16"} {
		out := filepath.Join(t.TempDir(), "m.gguf")
		var stdout, stderr bytes.Buffer
		if code := runMain([]string{"convert", "--model", dir, "-o", out, "--dtype", dt}, &stdout, &stderr); code != 0 {
			t.Fatalf("--dtype %s: exit %d: %s", dt, code, stderr.String())
		}
		if !strings.Contains(stderr.String(), "reads back and validates") {
			t.Errorf("--dtype %s: stderr %q", dt, stderr.String())
		}
		ck, err := ckpt.Open(out)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(ck.Config(), cfg) {
			t.Errorf("--dtype %s: config differs after conversion", dt)
		}
		want := map[string]ckpt.DType{"keep": ckpt.BF16, "f32": ckpt.F32, "f16": ckpt.F16, "bf16": ckpt.BF16}[dt]
		if info, _ := ck.Tensor("blk.1.ffn_gate_exps.weight"); info.DType != want {
			t.Errorf("--dtype %s: experts stored as %s", dt, info.DType)
		}
		// 1-D tensors, norms and the router are f32 whatever the matrices are
		// (llama.cpp's CPU backend cannot add a bf16 norm to f32 activations).
		for _, name := range []string{"blk.1.ffn_gate_inp.weight", "blk.1.attn_norm.weight", "blk.1.attn_q_norm.weight", "output_norm.weight", "blk.1.exp_probs_b.bias"} {
			if info, _ := ck.Tensor(name); info.DType != ckpt.F32 {
				t.Errorf("--dtype %s: %s stored as %s, want f32", dt, name, info.DType)
			}
		}
		ck.Close()
	}
}

func TestConvertErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := ckpttest.WriteHF(dir, ckpttest.TinyConfig(), ckpttest.Options{Edit: func(ts map[string]*ckpttest.Tensor) {
		delete(ts, "model.layers.1.self_attn.q_norm.weight")
	}}); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "m.gguf")
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"convert", "-o", out}, 2, "--model and -o are required"},
		{[]string{"convert", "--model", dir, "-o", out, "--dtype", "q4_0"}, 2, `--dtype "q4_0": expected keep, f32, f16 or bf16 (quantised types go in --quant)`},
		{[]string{"convert", "--model", dir, "-o", out, "--quant", "q9_k"}, 2, `unknown quantisation "q9_k": want one of`},
		{[]string{"convert", "--model", dir, "-o", out, "--quant", "q8_0", "--dtype", "f16"}, 2, "--dtype f16 and --quant q8_0 exclude each other"},
		{[]string{"convert", "--model", dir, "-o", out}, 1, "missing tensor blk.1.attn_q_norm.weight"},
		{[]string{"convert", "--model", filepath.Join(dir, "nope"), "-o", out}, 1, "no such file"},
	}
	for _, c := range cases {
		var stdout, stderr bytes.Buffer
		code := runMain(c.args, &stdout, &stderr)
		if code != c.code || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d with %q", c.args, code, stderr.String(), c.code, c.want)
		}
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("a failed conversion left %s behind", out)
	}
	left, _ := filepath.Glob(filepath.Join(filepath.Dir(out), "*.tmp"))
	if len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

func TestConvertQuant(t *testing.T) {
	dir := t.TempDir()
	if _, err := ckpttest.WriteHF(dir, ckpttest.QuantConfig(), ckpttest.Options{Seed: 6, DType: "BF16"}); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "m.gguf")
	var stdout, stderr bytes.Buffer
	if code := runMain([]string{"convert", "--model", dir, "-o", out, "--quant", "q4_k_m"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if !strings.Contains(stderr.String(), "(quant q4_k_m)") || !strings.Contains(stderr.String(), "q8_0 14, f32 11, q4_k 7") {
		t.Errorf("stderr %q", stderr.String())
	}
	ck, err := ckpt.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	want := map[string]ckpt.DType{
		"token_embd.weight": ckpt.Q4_K, "output.weight": ckpt.Q8_0, "output_norm.weight": ckpt.F32,
		"blk.0.attn_q.weight": ckpt.Q8_0, "blk.0.attn_gate.weight": ckpt.Q8_0, "blk.0.attn_norm.weight": ckpt.F32,
		"blk.0.ffn_down.weight": ckpt.Q4_K, "blk.1.ffn_gate_inp.weight": ckpt.F32, "blk.1.exp_probs_b.bias": ckpt.F32,
		"blk.1.ffn_up_exps.weight": ckpt.Q4_K, "blk.1.ffn_down_shexp.weight": ckpt.Q8_0,
	}
	for name, dt := range want {
		if info, _ := ck.Tensor(name); info.DType != dt {
			t.Errorf("%s stored as %s, want %s", name, info.DType, dt)
		}
	}
	if ft := ck.Metadata()["general.file_type"]; ft != uint32(15) {
		t.Errorf("general.file_type = %v, want 15 (MOSTLY_Q4_K_M)", ft)
	}

	// Requantising a quantised GGUF works and says what it costs.
	out2 := filepath.Join(t.TempDir(), "m2.gguf")
	stderr.Reset()
	if code := runMain([]string{"convert", "--model", out, "-o", out2, "--quant", "q6_k"}, &stdout, &stderr); code != 0 {
		t.Fatalf("requantising: exit %d: %s", code, stderr.String())
	}
	for _, w := range []string{"requantising 7 tensors from q4_k to q6_k", "requantising 14 tensors from q8_0 to q6_k"} {
		if !strings.Contains(stderr.String(), w) {
			t.Errorf("requantising: stderr %q lacks %q", stderr.String(), w)
		}
	}
}
