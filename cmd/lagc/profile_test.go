package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"lagc/exec/gpu"
)

// TestProfileCmd: lagc profile reads a --profile file and prints each
// class's time a step, its kernels summed over the layers (us a step, a
// layer, share), or one layer's launches by node; bad use exits 2.
func TestProfileCmd(t *testing.T) {
	us := time.Microsecond
	entries := []gpu.ProfileEntry{
		{Class: "decode", Node: "blk.0.out", Op: "moe_grouped", Launcher: "moe_gateup_gemv", Layer: 0, Launches: 4, GPU: 400 * us},
		{Class: "decode", Node: "blk.1.out", Op: "moe_grouped", Launcher: "moe_gateup_gemv", Layer: 1, Launches: 4, GPU: 440 * us},
		{Class: "decode", Node: "logits", Op: "matmul", Launcher: "gemv", Layer: -1, Launches: 4, GPU: 160 * us},
		{Class: "prefill", Node: "blk.0.og", Op: "attention_gate", Launcher: "attn_prefill_wg<128, 1, 2, 1>", Layer: 0, Launches: 1, GPU: 300 * us},
		{Class: "prefill", Node: "blk.1.og", Op: "attention_gate", Launcher: "attn_prefill_wg<128, 1, 2, 1>", Layer: 1, Launches: 1, GPU: 200 * us},
		{Class: "prefill", Node: "blk.1.kr", Op: "norm_rope", Launcher: "qk_norm_rope<bf16_t, 1>", Layer: 1, Launches: 1, GPU: 500 * us},
		// One kernel inside the layers and outside them (the routers' and
		// the head's cuBLASLt GEMM): two rows, the head's time not spread
		// over the layers.
		{Class: "prefill", Node: "blk.0.rl", Op: "matmul", Launcher: "cublaslt_gemm<f32>", Layer: 0, Launches: 1, GPU: 10 * us},
		{Class: "prefill", Node: "blk.1.rl", Op: "matmul", Launcher: "cublaslt_gemm<f32>", Layer: 1, Launches: 1, GPU: 14 * us},
		{Class: "prefill", Node: "logits", Op: "matmul", Launcher: "cublaslt_gemm<f32>", Layer: -1, Launches: 1, GPU: 1976 * us},
	}
	p, err := gpu.BuildProfile(entries, map[string]int{"decode": 4, "prefill": 1})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "p.pprof")
	f, err := os.Create(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Write(f); err != nil {
		t.Fatal(err)
	}
	f.Close()
	run := func(args ...string) (string, string, int) {
		var out, errb bytes.Buffer
		profileStdout = &out
		defer func() { profileStdout = os.Stdout }()
		code := runMain(append([]string{"profile"}, args...), &out, &errb)
		return out.String(), errb.String(), code
	}
	for _, c := range []struct {
		args    []string
		want    []string // substrings of the output, in order
		notWant []string
	}{
		{[]string{file}, []string{
			"decode: 4 steps, 250.0 us of GPU time a step over 2 layers and 40.0 outside them",
			"moe_grouped", "moe_gateup_gemv", "2", "2.0", "210.0", "105.0", "84.0%",
			"matmul", "gemv", "outside", "1.0", "40.0", "-", "16.0%",
			"prefill: 1 step, 3000.0 us of GPU time a step over 2 layers and 1976.0 outside them\n",
			"matmul", "cublaslt_gemm<f32>", "outside", "1.0", "1976.0", "-", "65.9%",
			"attention_gate", "attn_prefill_wg<128, 1, 2, 1>", "2", "2.0", "500.0", "250.0", "16.7%",
			"matmul", "cublaslt_gemm<f32>", "2", "2.0", "24.0", "12.0", "0.8%"}, nil},
		{[]string{"--class", "prefill", "--layer", "1", file}, []string{
			"prefill: 1 step", "layer 1, 714.0 us a step",
			"blk.1.kr", "norm_rope", "qk_norm_rope<bf16_t, 1>", "1.0", "500.0", "16.7%",
			"blk.1.og", "attention_gate", "200.0", "6.7%"}, []string{"decode", "blk.0.og"}},
		{[]string{"--class", "decode", "--layer", "outside", file}, []string{"outside the layers, 40.0 us a step", "logits", "gemv"}, []string{"blk.0"}},
		{[]string{"--top", "2", "--class", "prefill", file}, []string{"cublaslt_gemm<f32>", "attn_prefill_wg", "(2 more: --top 0 lists all)"}, []string{"qk_norm_rope"}},
	} {
		out, errs, code := run(c.args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", c.args, code, errs)
		}
		rest := out
		for _, w := range c.want {
			i := strings.Index(rest, w)
			if i < 0 {
				t.Fatalf("%v: %q not found in order in\n%s", c.args, w, out)
			}
			rest = rest[i+len(w):]
		}
		for _, w := range c.notWant {
			if strings.Contains(out, w) {
				t.Errorf("%v: %q in\n%s", c.args, w, out)
			}
		}
	}
	notProfile := filepath.Join(dir, "x.txt")
	if err := os.WriteFile(notProfile, []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "want one profile file"},
		{[]string{"--layer", "x", file}, 2, "--layer"},
		{[]string{"--top", "-1", file}, 2, "--top"},
		{[]string{"--class", "train", file}, 2, "--class"},
		{[]string{notProfile}, 1, "not a pprof profile"},
		{[]string{filepath.Join(dir, "missing.pprof")}, 1, "missing.pprof"},
	} {
		_, errs, code := run(c.args...)
		if code != c.code || !strings.Contains(errs, c.want) {
			t.Errorf("%v: exit %d, %q; want %d and %q", c.args, code, errs, c.code, c.want)
		}
	}
}

// FuzzPrintProfile: whatever parses as a pprof profile, printProfile
// returns an error or prints; it never panics.
func FuzzPrintProfile(f *testing.F) {
	p, err := gpu.BuildProfile([]gpu.ProfileEntry{{Class: "decode", Node: "n", Op: "o", Launcher: "k", Layer: 1, Launches: 2, GPU: time.Millisecond}},
		map[string]int{"decode": 2})
	if err != nil {
		f.Fatal(err)
	}
	var seed bytes.Buffer
	if err := p.WriteUncompressed(&seed); err != nil {
		f.Fatal(err)
	}
	f.Add(seed.Bytes())
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := profile.ParseData(data)
		if err != nil {
			return
		}
		for _, o := range []profileOpts{{layer: allLayers, top: 3}, {layer: 1}, {class: "decode", layer: -1}} {
			_ = printProfile(io.Discard, p, o)
		}
	})
}
