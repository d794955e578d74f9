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
		if info, _ := ck.Tensor("blk.1.ffn_gate_inp.weight"); info.DType != ckpt.F32 && dt != "keep" {
			t.Errorf("--dtype %s: router stored as %s, want f32", dt, info.DType)
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
		{[]string{"convert", "--model", dir, "-o", out, "--dtype", "q4_0"}, 2, `--dtype "q4_0": expected keep, f32, f16 or bf16`},
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
