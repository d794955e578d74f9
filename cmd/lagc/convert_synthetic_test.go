package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"lagc/ckpt"
	"lagc/config"
	"lagc/engine"
)

// TestConvertSynthetic: the file opens and validates, holds exactly the
// tensors the model graph reads at their shapes, in the recipe's types,
// and inspect accepts it; the seed fixes the bytes.
func TestConvertSynthetic(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, args ...string) string {
		t.Helper()
		out := filepath.Join(dir, name)
		var stdout, stderr bytes.Buffer
		args = append([]string{"convert", "--synthetic", "--preset", "synthetic-tiny", "-o", out}, args...)
		if code := runMain(args, &stdout, &stderr); code != 0 {
			t.Fatalf("%q: exit %d: %s", args, code, stderr.String())
		}
		if !strings.Contains(stderr.String(), "reads back and validates") {
			t.Errorf("stderr %q", stderr.String())
		}
		return out
	}
	out := write("a.gguf", "--quant", "q8_0", "--layers", "3")
	ck, err := ckpt.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	if err := engine.CheckCheckpoint(ck); err != nil {
		t.Fatal(err)
	}
	full, _ := config.Preset("synthetic-tiny")
	if ck.Config().NumLayers != 3 || ck.Config().HiddenSize != full.HiddenSize {
		t.Errorf("config: %d layers, hidden %d", ck.Config().NumLayers, ck.Config().HiddenSize)
	}
	g, err := engine.BuildGraph(ck.Config(), "")
	if err != nil {
		t.Fatal(err)
	}
	want, _ := engine.ExpectedTensors(g)
	r, _ := ckpt.ParseRecipe("q8_0")
	if len(ck.Tensors()) != len(want) {
		t.Errorf("%d tensors, the graph reads %d", len(ck.Tensors()), len(want))
	}
	types := map[ckpt.DType]int{}
	for _, e := range want {
		ti, ok := ck.Tensor(e.Name)
		if !ok {
			t.Errorf("%s missing", e.Name)
			continue
		}
		if wt := r.TypeFor(ckpt.TensorInfo{Name: e.Name, Shape: e.Shape}); ti.DType != wt {
			t.Errorf("%s is %s, the recipe gives %s", e.Name, ti.DType, wt)
		}
		types[ti.DType]++
		f, err := ck.ReadF32(e.Name)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range f {
			if v != v || v > 4 || v < -4 {
				t.Fatalf("%s holds %v", e.Name, v)
			}
		}
	}
	if types[ckpt.Q8_0] == 0 || types[ckpt.F32] == 0 {
		t.Errorf("types %v: want q8_0 matrices and f32 norms", types)
	}
	code, stdout, stderr := runInspectOut(t, out)
	if code != 0 || !strings.Contains(stdout, "checks:        the tensors match the configuration") {
		t.Errorf("inspect: exit %d: %s%s", code, stdout, stderr)
	}
	// The same seed writes the same file; another seed another.
	a, b, c := readFile(t, write("b.gguf", "--quant", "q8_0", "--layers", "3")), readFile(t, out), readFile(t, write("c.gguf", "--quant", "q8_0", "--layers", "3", "--seed", "2"))
	if !bytes.Equal(a, b) || bytes.Equal(a, c) {
		t.Error("the seed does not fix the file")
	}
	// Without --quant: bf16 matrices.
	ck2, err := ckpt.Open(write("d.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	defer ck2.Close()
	if ti, _ := ck2.Tensor("blk.1.ffn_gate_exps.weight"); ti.DType != ckpt.BF16 {
		t.Errorf("default matrices are %s, want bf16", ti.DType)
	}
}

func runInspectOut(t *testing.T, path string) (int, string, string) {
	out, stderr, code := runInspectCmd(t, path, "--tensors=false")
	return code, out, stderr
}

func readFile(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestConvertSyntheticUsage(t *testing.T) {
	out := filepath.Join(t.TempDir(), "x.gguf")
	for _, args := range [][]string{
		{"--synthetic", "-o", out},
		{"--preset", "synthetic-tiny", "-o", out},
		{"--synthetic", "--preset", "synthetic-tiny"},
		{"--synthetic", "--preset", "nope", "-o", out},
		{"--synthetic", "--preset", "synthetic-tiny", "--model", "x", "-o", out},
		{"--synthetic", "--preset", "synthetic-tiny", "--layers", "-1", "-o", out},
		{"--synthetic", "--preset", "synthetic-tiny", "--quant", "q9", "-o", out},
		{"--synthetic", "--preset", "synthetic-tiny", "--quant", "q8_0", "--dtype", "f16", "-o", out},
		{"--model", "x", "--layers", "2", "-o", out},
		{"--model", "x", "--tokenizer", ".", "-o", out},
	} {
		var stdout, stderr bytes.Buffer
		if code := runMain(append([]string{"convert"}, args...), &stdout, &stderr); code != 2 {
			t.Errorf("convert %q: exit %d (%s), want 2", args, code, stderr.String())
		}
	}
}

// TestConvertSyntheticTokenizer: --tokenizer embeds a directory's
// tokenizer.json, padded to the preset's vocabulary, so that the file
// loads the tokenizer lagc serve needs; a directory without one, or a
// vocabulary larger than the preset's, is an error naming it.
func TestConvertSyntheticTokenizer(t *testing.T) {
	dir := t.TempDir()
	tokDir := filepath.Join(dir, "tok")
	if err := os.Mkdir(tokDir, 0o755); err != nil {
		t.Fatal(err)
	}
	js := `{"model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":["a b"]},` +
		`"added_tokens":[{"id":3,"content":"<|end|>","special":true}]}`
	if err := os.WriteFile(filepath.Join(tokDir, "tokenizer.json"), []byte(js), 0o644); err != nil {
		t.Fatal(err)
	}
	convert := func(tok, out string) (int, string) {
		var stdout, stderr bytes.Buffer
		code := runMain([]string{"convert", "--synthetic", "--preset", "synthetic-tiny", "--layers", "1", "--quant", "q8_0",
			"--tokenizer", tok, "-o", out}, &stdout, &stderr)
		return code, stderr.String()
	}
	out := filepath.Join(dir, "t.gguf")
	if code, msg := convert(tokDir, out); code != 0 {
		t.Fatalf("exit %d: %s", code, msg)
	}
	ck, err := ckpt.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	full, _ := config.Preset("synthetic-tiny")
	if toks, _ := ck.Metadata()["tokenizer.ggml.tokens"].([]string); len(toks) != full.VocabSize || toks[3] != "<|end|>" {
		t.Fatalf("tokens %q, want %d of them with <|end|> at 3", toks, full.VocabSize)
	}
	tk, err := engine.LoadTokenizer(ck)
	if err != nil {
		t.Fatal(err)
	}
	if ids := tk.Encode("abab", false); len(ids) != 2 || ids[0] != 2 || ids[1] != 2 {
		t.Errorf(`Encode("abab") = %v, want [2 2]`, ids)
	}
	// A text prompt runs end to end (lagc serve loads the same tokenizer).
	if code, js, stderr := runCapture(t, "run", "--model", out, "--device", "cpu", "--prompt", "abab", "-n", "3", "--json"); code != 0 || !strings.Contains(js, `"text"`) {
		t.Errorf("run on the file: exit %d: %s%s", code, js, stderr)
	}
	for _, c := range []struct{ tok, want string }{
		{filepath.Join(dir, "none"), "no tokenizer.json"},
		{"../../testdata/tokenizer", "outside vocab_size 64"},
	} {
		if code, msg := convert(c.tok, filepath.Join(dir, "x.gguf")); code == 0 || !strings.Contains(msg, c.want) {
			t.Errorf("--tokenizer %s: exit %d, %q; want an error saying %q", c.tok, code, msg, c.want)
		}
	}
}
