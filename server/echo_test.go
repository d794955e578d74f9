package server

import (
	"context"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"unicode/utf8"

	"lagc/engine"
	"lagc/sched"
)

// promptRef returns the log-softmax, in float64, of every prompt row of
// prompt fed alone (row i predicts prompt[i+1]).
func promptRef(t *testing.T, prompt []int32) [][]float64 {
	t.Helper()
	m := openTiny(t, 1, 256)
	res, err := m.Generate(context.Background(), prompt, engine.GenOptions{MaxTokens: 1, Logits: true})
	if err != nil {
		t.Fatal(err)
	}
	var rows [][]float64
	for _, row := range res.PromptRows {
		rows = append(rows, logSoftmax64(row))
	}
	return rows
}

// TestEcho: echo puts the prompt before the completion; with logprobs its
// tokens come first (the first with nulls, each other's logprob that of
// the prompt fed alone), and max_tokens 0 scores the prompt only, as
// evaluation harnesses ask; streamed, the same.
func TestEcho(t *testing.T) {
	_, ts := startTiny(t, 2, 256, sched.Config{Budget: 8}) // a prompt over two steps
	tok := tinyTokenizer(t)
	const prompt = "func main() {\n\tfmt.Println("
	ids := tok.Encode(prompt, true)
	rows := promptRef(t, ids)

	var plain, echoed completionResponse
	post(t, ts.URL+"/v1/completions", map[string]any{"prompt": prompt, "max_tokens": 6, "temperature": 0}, &plain)
	post(t, ts.URL+"/v1/completions", map[string]any{"prompt": prompt, "max_tokens": 6, "temperature": 0, "echo": true}, &echoed)
	if echoed.Choices[0].Text != prompt+plain.Choices[0].Text {
		t.Errorf("echo: %q, want the prompt and %q", echoed.Choices[0].Text, plain.Choices[0].Text)
	}

	for _, maxTokens := range []int{0, 6} {
		body := map[string]any{"prompt": prompt, "max_tokens": maxTokens, "temperature": 0, "echo": true, "logprobs": 2}
		var resp completionResponse
		if code := post(t, ts.URL+"/v1/completions", body, &resp); code != 200 {
			t.Fatalf("max_tokens %d: status %d", maxTokens, code)
		}
		c := resp.Choices[0]
		lp := c.Logprobs
		finish := "length"
		if maxTokens > 0 {
			finish = *plain.Choices[0].FinishReason // the tiny model ends its line at the sixth token
		}
		if lp == nil || len(lp.Tokens) != len(ids)+maxTokens || resp.Usage.CompletionTokens != maxTokens || *c.FinishReason != finish {
			t.Fatalf("max_tokens %d: %d tokens, usage %+v, finish %s", maxTokens, len(lp.Tokens), resp.Usage, *c.FinishReason)
		}
		if maxTokens == 0 && c.Text != prompt {
			t.Errorf("max_tokens 0: text %q, want the prompt", c.Text)
		} else if maxTokens > 0 && c.Text != prompt+plain.Choices[0].Text {
			t.Errorf("max_tokens %d: text %q", maxTokens, c.Text)
		}
		if lp.TokenLogprobs[0] != nil || lp.TopLogprobs[0] != nil || lp.TextOffset[0] != 0 {
			t.Errorf("first prompt token: %v %v %d, want nulls at 0", lp.TokenLogprobs[0], lp.TopLogprobs[0], lp.TextOffset[0])
		}
		for i := 1; i < len(ids); i++ {
			want := rows[i-1][ids[i]]
			if v := lpAt(lp, i); math.Abs(v-want) > lpTol || lp.Tokens[i] != tokenText(tok, ids[i]) {
				t.Errorf("prompt token %d %q: logprob %g, alone %g", i, lp.Tokens[i], v, want)
			}
			if len(lp.TopLogprobs[i]) < 1 || len(lp.TopLogprobs[i]) > 3 {
				t.Errorf("prompt token %d: top_logprobs %v", i, lp.TopLogprobs[i])
			}
		}
		// text_offset: the BOS the tokenizer added takes no characters of
		// the echoed text, then each token its own.
		off := 0
		for i := 1; i < len(lp.Tokens); i++ {
			if lp.TextOffset[i] != off {
				t.Errorf("token %d %q: text_offset %d, want %d", i, lp.Tokens[i], lp.TextOffset[i], off)
				break
			}
			off += utf8.RuneCountInString(lp.Tokens[i])
		}
		if maxTokens > 0 {
			var alone completionResponse
			post(t, ts.URL+"/v1/completions", map[string]any{"prompt": prompt, "max_tokens": maxTokens, "temperature": 0, "logprobs": 2}, &alone)
			if got := strings.Join(lp.Tokens[len(ids):], ""); got != strings.Join(alone.Choices[0].Logprobs.Tokens, "") {
				t.Errorf("completion tokens %q after the echo, %q without", got, alone.Choices[0].Logprobs.Tokens)
			}
		}

		// Streamed: the echo first, then the completion; the same records.
		body["stream"] = true
		var text string
		var toks []string
		var vals []float64
		for _, e := range streamEvents(t, ts.URL+"/v1/completions", body) {
			var ch completionResponse
			if e == "[DONE]" || json.Unmarshal([]byte(e), &ch) != nil || len(ch.Choices) == 0 {
				continue
			}
			text += ch.Choices[0].Text
			if l := ch.Choices[0].Logprobs; l != nil {
				toks = append(toks, l.Tokens...)
				vals = append(vals, lpValues(l)...)
			}
		}
		if text != c.Text || strings.Join(toks, "\x00") != strings.Join(lp.Tokens, "\x00") {
			t.Errorf("max_tokens %d streamed %q with %d tokens; whole %q with %d", maxTokens, text, len(toks), c.Text, len(lp.Tokens))
		}
		for i := 1; i < min(len(vals), len(lp.Tokens)); i++ {
			if vals[i] != lpAt(lp, i) {
				t.Errorf("max_tokens %d: streamed logprob %d %g, whole %g", maxTokens, i, vals[i], lpAt(lp, i))
				break
			}
		}
	}

	// Echo of token ids, max_tokens 0 without logprobs: the ids decoded,
	// nothing run.
	var idsOnly completionResponse
	post(t, ts.URL+"/v1/completions", map[string]any{"prompt": ids[1:], "max_tokens": 0, "echo": true}, &idsOnly)
	if c := idsOnly.Choices[0]; c.Text != prompt || c.Logprobs != nil || idsOnly.Usage.CompletionTokens != 0 {
		t.Errorf("ids echoed: %+v", c)
	}
}
