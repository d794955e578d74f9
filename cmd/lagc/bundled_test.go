package main

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
)

// TestRunBundledPromptMatchesTransformers: `lagc run --prompt TEXT` with no
// --model runs the bundled model (extracted into a fresh cache), tokenizes
// as the HF tokenizer did, and continues exactly as transformers did.
func TestRunBundledPromptMatchesTransformers(t *testing.T) {
	t.Setenv("LAGC_CACHE_DIR", t.TempDir())
	b, err := os.ReadFile("../../models/tiny/golden.json")
	if err != nil {
		t.Fatal(err)
	}
	var g struct {
		Prompts []struct {
			Name       string  `json:"name"`
			Text       string  `json:"text"`
			PromptIDs  []int32 `json:"prompt_ids"`
			Greedy     []int32 `json:"greedy"`
			GreedyText string  `json:"greedy_text"`
		} `json:"prompts"`
	}
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	for _, p := range g.Prompts {
		t.Run(p.Name, func(t *testing.T) {
			code, stdout, stderr := runCapture(t, "run", "--prompt", p.Text, "-n", jsonInt(len(p.Greedy)), "--device", "cpu", "--json")
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			var res struct {
				PromptIDs    []int32 `json:"prompt_ids"`
				GeneratedIDs []int32 `json:"generated_ids"`
				Text         string  `json:"text"`
			}
			if err := json.Unmarshal([]byte(stdout), &res); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(res.PromptIDs, p.PromptIDs) {
				t.Fatalf("prompt ids %v, HF tokenizer %v", res.PromptIDs, p.PromptIDs)
			}
			if !slices.Equal(res.GeneratedIDs, p.Greedy) {
				t.Fatalf("generated %v, transformers %v", res.GeneratedIDs, p.Greedy)
			}
			if res.Text != p.GreedyText {
				t.Fatalf("text %q, transformers %q", res.Text, p.GreedyText)
			}
		})
	}
	// Streaming text mode prints the prompt and the continuation.
	code, stdout, stderr := runCapture(t, "run", "--prompt", "func main() {", "-n", "12", "--device", "cpu")
	if code != 0 || !strings.HasPrefix(stdout, "func main() {\n// Copyright") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}

// TestRunChat drives --chat with one user line and checks a reply streams.
func TestRunChat(t *testing.T) {
	t.Setenv("LAGC_CACHE_DIR", t.TempDir())
	code, stdout, stderr := runChatCapture(t, "package main\n\n", "run", "--chat", "-n", "8", "--device", "cpu")
	if code != 0 || len(strings.TrimSpace(stdout)) == 0 || !strings.Contains(stderr, "tok/s") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}

// TestRunConvertedBundledPrompt: the bundled model converted to GGUF keeps
// its tokenizer (bos included), so --prompt gives the HF directory's ids and
// tokens.
func TestRunConvertedBundledPrompt(t *testing.T) {
	t.Setenv("LAGC_CACHE_DIR", t.TempDir())
	out := t.TempDir() + "/tiny.gguf"
	if code, _, stderr := runCapture(t, "convert", "--model", "../../models/tiny", "-o", out); code != 0 {
		t.Fatalf("convert: %s", stderr)
	}
	args := []string{"--prompt", "func main() {", "-n", "8", "--device", "cpu", "--json"}
	_, hf, _ := runCapture(t, append([]string{"run"}, args...)...)
	code, gguf, stderr := runCapture(t, append([]string{"run", "--model", out}, args...)...)
	if code != 0 || hf != gguf {
		t.Fatalf("exit %d (%s)\nGGUF: %s\n  HF: %s", code, stderr, gguf, hf)
	}
}
