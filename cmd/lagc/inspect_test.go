package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"lagc/ckpt"
	"lagc/ckpt/ckpttest"
)

func runInspectCmd(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	inspectStdout = &out
	defer func() { inspectStdout = os.Stdout }()
	code := runMain(append([]string{"inspect"}, args...), &out, &errb)
	return out.String(), errb.String(), code
}

func TestInspectText(t *testing.T) {
	out, stderr, code := runInspectCmd(t, "../../testdata/quant/q4_k_m.gguf")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{
		"architecture:  laguna, name \"quant-fixture\"",
		"2 layers (1 full + 1 sliding attention, window 8; 1 dense + 1 MoE), hidden 256, vocab 64",
		"quantisation:  q4_k_m: weight matrices q4_k; attention, shared expert and LM head q8_0",
		"general.file_type 15 (MOSTLY_Q4_K_M)",
		"parameters:    1.41M total, 1.20M active per token",
		"checks:        the tensors match the configuration",
		"laguna.expert_count = 3",
		"blk.1.ffn_down_exps.weight   q4_k  [3 256 256]  110592  4.50",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// The JSON report's figures, recomputed here from the tensors and the
// configuration.
func TestInspectJSON(t *testing.T) {
	path := "../../testdata/quant/q6_k.gguf"
	out, stderr, code := runInspectCmd(t, path, "--json", "--ctx", "100")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var r inspectJSON
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	ck, err := ckpt.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	cfg := ck.Config()
	var total, active, bytes int64
	for _, ti := range ck.Tensors() {
		n := ti.Elements()
		total += n
		bytes += ti.Size
		switch {
		case ti.Name == "token_embd.weight":
		case strings.HasSuffix(ti.Name, "_exps.weight"):
			active += n * 2 / 3 // top-2 of 3
		default:
			active += n
		}
	}
	// K and V in bf16: a full layer holds the context, a sliding one its window.
	kv := int64(2*2*100*2*64 + 2*2*8*2*64)
	if r.Recipe != "q6_k" || r.Parameters != total || r.ActiveParameters != active || r.WeightBytes != bytes ||
		r.Memory.KVBytes != kv || r.Memory.TotalBytes != bytes+kv || r.Memory.Context != 100 || !r.Valid ||
		len(r.Tensors) != len(ck.Tensors()) || r.Config.NumExperts != cfg.NumExperts || r.FileTypeName != "MOSTLY_Q6_K" {
		t.Errorf("report %+v\nwant parameters %d, active %d, bytes %d, kv %d", r.Report, total, active, bytes, kv)
	}
	if len(r.Types) != 2 || r.Types[0].Type != "q6_k" || r.Types[0].BitsPerWeight != 6.5625 {
		t.Errorf("types %+v", r.Types)
	}
}

// Parameter counts agree with lagc compile's, which counts from the graph.
func TestInspectParametersMatchCompile(t *testing.T) {
	out, _, code := runInspectCmd(t, "../../models/tiny", "--json", "--tensors=false")
	if code != 0 {
		t.Fatalf("inspect: exit %d", code)
	}
	var r inspectJSON
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	cout, cerr, code := runLagc(t, "compile", "--model", "../../models/tiny")
	if code != 0 {
		t.Fatalf("compile: exit %d: %s", code, cerr)
	}
	num := func(re string) int64 {
		m := regexp.MustCompile(re).FindStringSubmatch(cout)
		if m == nil {
			t.Fatalf("compile output lacks %s", re)
		}
		n, _ := strconv.ParseInt(m[1], 10, 64)
		return n
	}
	if total, active := num(`parameters: \S+ total \((\d+)\)`), num(`active per token: \S+ \((\d+);`); r.Parameters != total || r.ActiveParameters != active {
		t.Errorf("inspect: %d total, %d active; compile: %d, %d", r.Parameters, r.ActiveParameters, total, active)
	}
	if r.Recipe != "bf16" || r.Format != "safetensors" || len(r.Metadata) != 0 {
		t.Errorf("recipe %q, format %q, %d metadata keys", r.Recipe, r.Format, len(r.Metadata))
	}
}

// A checkpoint that does not match its configuration is still described,
// with what is wrong.
func TestInspectBrokenCheckpoint(t *testing.T) {
	dir := t.TempDir()
	if _, err := ckpttest.WriteHF(dir, ckpttest.TinyConfig(), ckpttest.Options{Edit: func(ts map[string]*ckpttest.Tensor) {
		delete(ts, "model.layers.1.self_attn.q_norm.weight")
	}}); err != nil {
		t.Fatal(err)
	}
	out, stderr, code := runInspectCmd(t, dir, "--tensors=false")
	if code != 0 || !strings.Contains(out, "checkpoint does not match the model: missing tensor blk.1.attn_q_norm.weight") {
		t.Errorf("exit %d, stderr %q, output:\n%s", code, stderr, out)
	}
	cases := []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "want one checkpoint"},
		{[]string{dir, dir}, 2, "got 2 arguments"},
		{[]string{dir, "--ctx", "-1"}, 2, "--ctx -1"},
		{[]string{filepath.Join(dir, "nope.gguf")}, 1, "no such file"},
	}
	for _, c := range cases {
		_, stderr, code := runInspectCmd(t, c.args...)
		if code != c.code || !strings.Contains(stderr, c.want) {
			t.Errorf("inspect %v: exit %d, stderr %q; want %d with %q", c.args, code, stderr, c.code, c.want)
		}
	}
}

// TestInspectGPUWeights: inspect reports the weights as the GPU plan holds
// them, and which block-quantised weights it converts on upload: a q3_k
// file (no GPU kernels for q3_k) takes 4.6 times its stored bytes in bf16.
func TestInspectGPUWeights(t *testing.T) {
	out, stderr, code := runInspectCmd(t, "../../testdata/quant/q3_k.gguf", "--json", "--tensors=false")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var r struct {
		GPUWeightBytes int64 `json:"gpu_weight_bytes"`
		GPUConversions []struct {
			Source  string `json:"source_dtype"`
			DType   string `json:"dtype"`
			Tensors int    `json:"tensors"`
		} `json:"gpu_conversions"`
		Memory struct {
			WeightBytes int64 `json:"weight_bytes"`
		} `json:"gpu_memory"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	if len(r.GPUConversions) != 1 || r.GPUConversions[0].Source != "q3_k" || r.GPUConversions[0].Tensors != 10 ||
		r.GPUWeightBytes < 4*r.Memory.WeightBytes {
		t.Errorf("gpu weights %d (stored %d), conversions %+v; want the 10 q3_k matrices in bf16, over 4x the file's bytes",
			r.GPUWeightBytes, r.Memory.WeightBytes, r.GPUConversions)
	}
	text, _, _ := runInspectCmd(t, "../../testdata/quant/q3_k.gguf", "--tensors=false")
	if !strings.Contains(text, "gpu memory:    2.77 MiB at context 128: weights 2.70 MiB as the GPU holds them") ||
		!strings.Contains(text, "10 q3_k tensors converted to bf16 on upload (no GPU kernel reads their type there): 592.1 KiB as stored, 2.69 MiB on the GPU") {
		t.Errorf("text:\n%s", text)
	}
}

// TestInspectPrefillDequant: inspect says what the GPU plan's prefill
// dequantises every chunk: with LAGC_QMOE_SHAPE=noq6k, llama.cpp's Q4_K_M
// of the fixture model its one q6_k down stack (3 experts of 256 x 256,
// 512 KiB of bf16 rows); by default nothing, as for lagc's q4_k_m recipe
// (the field absent).
func TestInspectPrefillDequant(t *testing.T) {
	if out, _, _ := runInspectCmd(t, "../../testdata/quant/q4_k_m-llama.gguf", "--json", "--tensors=false"); strings.Contains(out, "gpu_prefill_dequant") {
		t.Errorf("llama.cpp's Q4_K_M: a prefill dequantisation reported by default")
	}
	t.Setenv("LAGC_QMOE_SHAPE", "noq6k")
	out, stderr, code := runInspectCmd(t, "../../testdata/quant/q4_k_m-llama.gguf", "--json", "--tensors=false")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var r struct {
		D *struct {
			Matrices int   `json:"matrices"`
			Bytes    int64 `json:"bytes"`
			Experts  int   `json:"expert_stacks"`
		} `json:"gpu_prefill_dequant"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	if r.D == nil || r.D.Matrices != 1 || r.D.Experts != 1 || r.D.Bytes != 512<<10 {
		t.Errorf("gpu_prefill_dequant %+v, want the one q6_k down stack, 512 KiB", r.D)
	}
	text, _, _ := runInspectCmd(t, "../../testdata/quant/q4_k_m-llama.gguf", "--tensors=false")
	if !strings.Contains(text, "gpu prefill:   dequantises 1 matrix (1 expert stack) into the workspace every chunk, 512.0 KiB written and read back\n") {
		t.Errorf("text:\n%s", text)
	}
	out, _, _ = runInspectCmd(t, "../../testdata/quant/q4_k_m.gguf", "--json", "--tensors=false")
	if strings.Contains(out, "gpu_prefill_dequant") {
		t.Errorf("lagc's q4_k_m: a prefill dequantisation reported")
	}
}
