package main

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"lagc/cuda/cudatest"
	"lagc/engine"
	"lagc/internal/fixture"
)

// runCapture runs lagc with args, capturing what `lagc run` writes.
func runCapture(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return runChatCapture(t, "", args...)
}

// runChatCapture is runCapture with stdin.
func runChatCapture(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	saved := runIO
	runIO.out, runIO.err, runIO.in = &out, &errb, strings.NewReader(stdin)
	defer func() { runIO = saved }()
	code = runMain(args, &out, &errb)
	return code, out.String(), errb.String()
}

func idList(ids []int32) string {
	var s []string
	for _, id := range ids {
		s = append(s, jsonInt(int(id)))
	}
	return strings.Join(s, ",")
}

func jsonInt(i int) string { b, _ := json.Marshal(i); return string(b) }

// TestRunJSONMatchesTransformers: `lagc run --json` on each fixture, through
// the HF loader and through GGUF conversions in f32 and f16, gives
// transformers' greedy continuation.
func TestRunJSONMatchesTransformers(t *testing.T) {
	dirs := fixture.Dirs(t)
	for _, dir := range dirs {
		g := fixture.Read(t, dir)
		paths := map[string]string{"hf": dir}
		for _, dt := range []string{"f32", "f16"} {
			out := filepath.Join(t.TempDir(), dt+".gguf")
			if code, _, stderr := runCapture(t, "convert", "--model", dir, "-o", out, "--dtype", dt); code != 0 {
				t.Fatalf("convert %s to %s: %s", dir, dt, stderr)
			}
			paths["gguf-"+dt] = out
		}
		for name, path := range paths {
			t.Run(filepath.Base(dir)+"/"+name, func(t *testing.T) {
				code, stdout, stderr := runCapture(t, "run", "--model", path, "--prompt-ids", idList(g.PromptIDs),
					"-n", jsonInt(len(g.Greedy)), "--device", "cpu", "--json", "--logits")
				if code != 0 {
					t.Fatalf("exit %d: %s", code, stderr)
				}
				var res struct {
					PromptIDs    []int32   `json:"prompt_ids"`
					GeneratedIDs []int32   `json:"generated_ids"`
					LastLogits   []float32 `json:"last_logits"`
				}
				if err := json.Unmarshal([]byte(stdout), &res); err != nil {
					t.Fatalf("stdout is not one JSON object: %v\n%s", err, stdout)
				}
				if !slices.Equal(res.PromptIDs, g.PromptIDs) || !slices.Equal(res.GeneratedIDs, g.Greedy) {
					t.Fatalf("generated %v, transformers %v", res.GeneratedIDs, g.Greedy)
				}
				if len(res.LastLogits) != len(g.LastLogits) {
					t.Fatalf("last_logits has %d values, want %d", len(res.LastLogits), len(g.LastLogits))
				}
				if !strings.Contains(stderr, "tok/s") {
					t.Errorf("no speed report on stderr: %q", stderr)
				}
			})
		}
	}
}

func TestRunErrors(t *testing.T) {
	fix := "../../testdata/fixtures/tiny_yarn_perhead"
	for _, c := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no prompt", []string{"run", "--model", fix}, 2, "give one of --prompt, --prompt-file, --prompt-ids or --chat"},
		{"two prompts", []string{"run", "--model", fix, "--prompt-ids", "1", "--prompt", "x"}, 2, "not --prompt and --prompt-ids"},
		{"prompt and chat", []string{"run", "--model", fix, "--chat", "--prompt-file", "-"}, 2, "not --prompt-file and --chat"},
		{"empty prompt", []string{"run", "--model", fix, "--prompt", ""}, 2, "--prompt is empty"},
		{"bad ids", []string{"run", "--model", fix, "--prompt-ids", "1,x"}, 2, "not a token id"},
		{"empty id", []string{"run", "--model", fix, "--prompt-ids", "1,,2"}, 2, `id 2 of "1,,2" is empty`},
		{"trailing comma", []string{"run", "--model", fix, "--prompt-ids", "1,2,"}, 2, "id 3"},
		{"negative temperature", []string{"run", "--model", fix, "--prompt-ids", "1", "--temperature", "-1"}, 2, "--temperature -1: expected 0 (greedy) or more"},
		{"f64 on the CPU", []string{"run", "--model", fix, "--prompt-ids", "1", "--device", "cpu", "--dtype", "f64"}, 2, `--dtype "f64": expected bf16 or f32`},
		{"negative n", []string{"run", "--model", fix, "--prompt-ids", "1", "-n", "-1"}, 2, "-n -1"},
		{"negative chunk", []string{"run", "--model", fix, "--prompt-ids", "1", "--chunk", "-1"}, 2, "--chunk -1"},
		{"empty stop", []string{"run", "--model", fix, "--prompt-ids", "1", "--stop", ""}, 2, "--stop is empty"},
		{"system without chat", []string{"run", "--model", fix, "--prompt-ids", "1", "--system", "x"}, 2, "--system goes with --chat"},
		{"raw with ids", []string{"run", "--model", fix, "--prompt-ids", "1", "--raw"}, 2, "--raw goes with --prompt"},
		{"logits with chat", []string{"run", "--model", fix, "--chat", "--json", "--logits"}, 2, "not --chat"},
		{"unknown pass", []string{"run", "--model", fix, "--prompt-ids", "1", "--passes", "shapes,nope"}, 2, `--passes: unknown pass "nope"`},
		{"missing prompt file", []string{"run", "--model", fix, "--prompt-file", "/nonexistent"}, 1, "--prompt-file: open /nonexistent"},
		{"stop without tokenizer", []string{"run", "--model", fix, "--prompt-ids", "1", "--stop", "x", "--device", "cpu"}, 1, "need a tokenizer"},
		{"logits without json", []string{"run", "--model", fix, "--prompt-ids", "1", "--logits"}, 2, "--logits goes with --json"},
		{"bad device", []string{"run", "--model", fix, "--prompt-ids", "1", "--device", "tpu"}, 2, "expected cpu, cuda or auto"},
		{"out of vocabulary", []string{"run", "--model", fix, "--prompt-ids", "1,99999", "--device", "cpu"}, 1, "outside the vocabulary"},
		{"text without tokenizer", []string{"run", "--model", fix, "--prompt", "hello", "--device", "cpu"}, 1, "no tokenizer"},
		{"missing model", []string{"run", "--model", "/nonexistent", "--prompt-ids", "1", "--device", "cpu"}, 1, "no such file"},
		{"bad sampling", []string{"run", "--model", fix, "--prompt-ids", "1", "--top-p", "2"}, 2, "top"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, _, stderr := runCapture(t, c.args...)
			if code != c.code || !strings.Contains(stderr, c.want) {
				t.Fatalf("exit %d, stderr %q; want exit %d and %q", code, stderr, c.code, c.want)
			}
		})
	}
}

// TestRunSamplerGreedyIsNil: plain greedy decoding passes no sampler, so
// that the engine takes the backend's argmax (on the GPU: no logits copied,
// one step ahead); anything that reads the row gets one.
func TestRunSamplerGreedyIsNil(t *testing.T) {
	for _, tc := range []struct {
		name       string
		temp, pen  float64
		wantNil    bool
		topK, seed int
	}{
		{"greedy", 0, 1, true, 0, 0},
		{"greedy, penalty 0 (off)", 0, 0, true, 0, 0},
		{"greedy with top-k (ignored)", 0, 1, true, 5, 3},
		{"greedy with a repetition penalty", 0, 1.2, false, 0, 0},
		{"sampling", 0.7, 1, false, 0, 0},
	} {
		s, err := runSampler(&runFlags{temperature: tc.temp, repeatPenalty: tc.pen, topK: tc.topK, seed: uint64(tc.seed)})
		if err != nil || (s == nil) != tc.wantNil {
			t.Errorf("%s: sampler %v (%v), want nil %v", tc.name, s, err, tc.wantNil)
		}
	}
	if _, err := runSampler(&runFlags{temperature: 1, topP: 2}); err == nil {
		t.Error("top-p 2 accepted")
	}
}

// TestRunSampling: a fixed seed gives the same tokens twice; top-k 1 is greedy.
func TestRunSampling(t *testing.T) {
	fix := "../../testdata/fixtures/tiny_yarn_perhead"
	g := fixture.Read(t, fix)
	args := []string{"run", "--model", fix, "--prompt-ids", idList(g.PromptIDs), "-n", "16", "--device", "cpu", "--json"}
	_, a, _ := runCapture(t, append(args, "--temperature", "0.9", "--seed", "7")...)
	_, b, _ := runCapture(t, append(args, "--temperature", "0.9", "--seed", "7")...)
	if a != b || a == "" {
		t.Fatalf("same seed, different output:\n%s\n%s", a, b)
	}
	_, k1, _ := runCapture(t, append(args, "--temperature", "0.9", "--top-k", "1", "--seed", "3")...)
	_, greedy, _ := runCapture(t, args...)
	if k1 != greedy {
		t.Fatalf("top-k 1 differs from greedy:\n%s\n%s", k1, greedy)
	}
}

// TestRunGreedyPaths: plain greedy `lagc run` (no sampler: the backend's
// argmax, on the GPU decoded one step ahead) gives the tokens of the
// sampler's path (top-k 1, which reads every step's row), for one prompt
// and for a three-turn chat, whose turns on the GPU continue after a step
// queued ahead and dropped at the end of the turn before.
func TestRunGreedyPaths(t *testing.T) {
	for _, device := range []string{"cpu", "cuda"} {
		t.Run(device, func(t *testing.T) {
			if device == "cuda" {
				cudatest.Device(t) // skip (or fail) without a GPU
			}
			testRunGreedyPaths(t, device)
		})
	}
}

func testRunGreedyPaths(t *testing.T, device string) {
	t.Setenv("LAGC_CACHE_DIR", t.TempDir())
	model := filepath.Join(fixture.Root(t), "models", "tiny")
	sampled := []string{"--temperature", "0.7", "--top-k", "1", "--seed", "1"}
	one := func(extra ...string) string {
		code, out, stderr := runCapture(t, append([]string{"run", "--model", model, "--device", device, "--prompt", "func main() {", "-n", "64", "--json"}, extra...)...)
		if code != 0 || !strings.Contains(stderr, "on "+device) {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		return out
	}
	if greedy, topk1 := one(), one(sampled...); greedy != topk1 {
		t.Errorf("greedy:\n%s\ntop-k 1:\n%s", greedy, topk1)
	}
	chat := func(extra ...string) string {
		code, out, stderr := runChatCapture(t, "Write a Go function.\nAnother one.\nThanks.\n",
			append([]string{"run", "--chat", "--json", "--device", device, "-n", "40"}, extra...)...)
		if code != 0 || strings.Count(out, `"turn"`) != 3 {
			t.Fatalf("exit %d, %d turns: %s\n%s", code, strings.Count(out, `"turn"`), out, stderr)
		}
		return out
	}
	if greedy, topk1 := chat(), chat(sampled...); greedy != topk1 {
		t.Errorf("chat, greedy:\n%s\ntop-k 1:\n%s", greedy, topk1)
	}
}

// TestRunLogprobs: --logprobs N with --json gives each generated token's
// log-probability (the log-softmax of the logits it was chosen from, here
// recomputed from a pass that keeps every row) and its N best, without
// changing the tokens.
func TestRunLogprobs(t *testing.T) {
	fix := "../../testdata/fixtures/tiny_yarn_perhead"
	g := fixture.Read(t, fix)
	args := []string{"run", "--model", fix, "--prompt-ids", idList(g.PromptIDs), "-n", "8", "--device", "cpu", "--json"}
	code, plain, stderr := runCapture(t, args...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	code, out, stderr := runCapture(t, append(args, "--logprobs", "3")...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var a, b struct {
		Generated []int32 `json:"generated_ids"`
		Logprobs  []struct {
			ID      int32   `json:"id"`
			Logprob float64 `json:"logprob"`
			Top     []struct {
				ID      int32   `json:"id"`
				Logprob float64 `json:"logprob"`
			} `json:"top_logprobs"`
		} `json:"logprobs"`
	}
	if json.Unmarshal([]byte(plain), &a) != nil || json.Unmarshal([]byte(out), &b) != nil {
		t.Fatalf("not JSON:\n%s\n%s", plain, out)
	}
	if !slices.Equal(a.Generated, b.Generated) || len(b.Logprobs) != len(b.Generated) {
		t.Fatalf("with --logprobs %v (%d entries), without %v", b.Generated, len(b.Logprobs), a.Generated)
	}
	m, err := engine.Open(fix, engine.Options{Device: "cpu"})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	all := append(slices.Clone(g.PromptIDs), b.Generated[:len(b.Generated)-1]...)
	res, err := m.Generate(context.Background(), all, engine.GenOptions{MaxTokens: 1, Logits: true})
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range b.Logprobs {
		row := res.PromptRows[len(g.PromptIDs)-1+i]
		lse := 0.0
		mx := float64(slices.Max(row))
		for _, x := range row {
			lse += math.Exp(float64(x) - mx)
		}
		lse = mx + math.Log(lse)
		want := float64(row[e.ID]) - lse
		if e.ID != b.Generated[i] || math.Abs(e.Logprob-want) > 1e-4 || len(e.Top) != 3 || e.Top[0].ID != e.ID || e.Top[2].Logprob > e.Top[1].Logprob {
			t.Errorf("token %d: %+v, want id %d logprob %g, greedy first of 3", i, e, b.Generated[i], want)
		}
	}
	for _, bad := range [][]string{{"--logprobs", "2"}, {"--json", "--logprobs", "21"}, {"--chat", "--json", "--logprobs", "1"}} {
		a := []string{"run", "--model", fix, "--device", "cpu", "-n", "1"}
		if bad[0] != "--chat" {
			a = append(a, "--prompt-ids", "1")
		}
		if code, _, stderr := runCapture(t, append(a, bad...)...); code != 2 || !strings.Contains(stderr, "--logprobs") {
			t.Errorf("%v: exit %d, %s", bad, code, stderr)
		}
	}
}
