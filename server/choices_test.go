package server

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"lagc/sched"
)

// TestCompletionChoices: n choices are n sequences, choice i sampled with
// seed+i, so each equals the one-choice request with that seed; streamed,
// the chunks carry each choice's index and add up to the same. Three
// choices on two slots: one waits in the queue.
func TestCompletionChoices(t *testing.T) {
	_, ts := startTiny(t, 2, 256, sched.Config{})
	body := map[string]any{"prompt": "func main() {", "max_tokens": 16, "temperature": 0.9, "seed": 5, "n": 3, "logprobs": 1}
	var resp completionResponse
	if code := post(t, ts.URL+"/v1/completions", body, &resp); code != 200 || len(resp.Choices) != 3 {
		t.Fatalf("status %d, %d choices", code, len(resp.Choices))
	}
	texts := map[string]bool{}
	total := 0
	for i, c := range resp.Choices {
		var one completionResponse
		post(t, ts.URL+"/v1/completions", map[string]any{"prompt": "func main() {", "max_tokens": 16, "temperature": 0.9, "seed": 5 + i, "logprobs": 1}, &one)
		if c.Index != i || c.Text != one.Choices[0].Text || !slices.Equal(c.Logprobs.Tokens, one.Choices[0].Logprobs.Tokens) {
			t.Errorf("choice %d (index %d) %q; alone with seed %d: %q", i, c.Index, c.Text, 5+i, one.Choices[0].Text)
		}
		texts[c.Text] = true
		total += len(c.Logprobs.Tokens)
	}
	if len(texts) < 2 {
		t.Errorf("three sampled choices, all %q", slices.Collect(maps.Keys(texts)))
	}
	if u := resp.Usage; u.PromptTokens != 5 || u.CompletionTokens != total || u.TotalTokens != 5+total {
		t.Errorf("usage %+v for %d tokens", u, total)
	}

	body["stream"] = true
	body["stream_options"] = map[string]bool{"include_usage": true}
	streamed, finished := make([]string, 3), make([]int, 3)
	var usage *usage
	for _, e := range streamEvents(t, ts.URL+"/v1/completions", body) {
		var c completionResponse
		if e == "[DONE]" || json.Unmarshal([]byte(e), &c) != nil {
			continue
		}
		if c.Usage != nil {
			usage = c.Usage
		}
		for _, ch := range c.Choices {
			streamed[ch.Index] += ch.Text
			if ch.FinishReason != nil {
				finished[ch.Index]++
			}
		}
	}
	for i, c := range resp.Choices {
		if streamed[i] != c.Text || finished[i] != 1 {
			t.Errorf("choice %d streamed %q (%d finish chunks), whole %q", i, streamed[i], finished[i], c.Text)
		}
	}
	if usage == nil || usage.CompletionTokens != resp.Usage.CompletionTokens {
		t.Errorf("streamed usage %+v, whole %+v", usage, resp.Usage)
	}
}

// TestChatChoices: greedy choices are all the one-choice reply, whole and
// streamed (each index with its role chunk first and one finish).
func TestChatChoices(t *testing.T) {
	_, ts := startTiny(t, 2, 512, sched.Config{})
	body := map[string]any{"max_tokens": 20, "temperature": 0, "messages": []map[string]any{{"role": "user", "content": "Write a Go function."}}}
	var one, two chatResponse
	post(t, ts.URL+"/v1/chat/completions", body, &one)
	body["n"] = 2
	post(t, ts.URL+"/v1/chat/completions", body, &two)
	want := mustJSON(t, one.Choices[0].Message)
	if len(two.Choices) != 2 || two.Usage.CompletionTokens != 2*one.Usage.CompletionTokens {
		t.Fatalf("%d choices, usage %+v (one: %+v)", len(two.Choices), two.Usage, one.Usage)
	}
	for i, c := range two.Choices {
		if got := mustJSON(t, c.Message); c.Index != i || got != want || *c.FinishReason != *one.Choices[0].FinishReason {
			t.Errorf("choice %d (index %d): %s, want %s", i, c.Index, got, want)
		}
	}

	body["stream"] = true
	type acc struct {
		reasoning, content string
		finishes, chunks   int
	}
	got := make([]acc, 2)
	for _, e := range streamEvents(t, ts.URL+"/v1/chat/completions", body) {
		var c chatResponse
		if e == "[DONE]" || json.Unmarshal([]byte(e), &c) != nil {
			continue
		}
		for _, ch := range c.Choices {
			a := &got[ch.Index]
			if a.chunks == 0 && ch.Delta.Role != "assistant" {
				t.Errorf("choice %d: first chunk %+v has no role", ch.Index, ch.Delta)
			}
			a.chunks++
			if ch.Delta.ReasoningContent != nil {
				a.reasoning += *ch.Delta.ReasoningContent
			}
			if ch.Delta.Content != nil {
				a.content += *ch.Delta.Content
			}
			if ch.FinishReason != nil {
				a.finishes++
			}
		}
	}
	m := one.Choices[0].Message
	for i, a := range got {
		content := ""
		if m.Content != nil {
			content = *m.Content
		}
		if a.reasoning != *m.ReasoningContent || a.content != content || a.finishes != 1 {
			t.Errorf("choice %d streamed %+v, want reasoning %q content %q", i, a, *m.ReasoningContent, content)
		}
	}
}

// TestChoicesCancel: a client that goes away mid-stream cancels every one
// of its n choices; one whose later choice finds the queue full gets 429
// and its choices already queued are cancelled.
func TestChoicesCancel(t *testing.T) {
	gate := make(chan struct{})
	stop := make(chan struct{})
	defer close(stop)
	go func() { // one step a millisecond
		for {
			select {
			case gate <- struct{}{}:
				time.Sleep(time.Millisecond)
			case <-stop:
				return
			}
		}
	}()
	srv, ts := startScripted(t, 3, strings.Repeat("word ", 300), gate, sched.Config{MaxQueue: 1})
	body := map[string]any{"messages": []map[string]any{{"role": "user", "content": "x"}}, "n": 3, "max_tokens": 400, "stream": true}
	b, _ := json.Marshal(body)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+"/v1/chat/completions", bytes.NewReader(b))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := readEvents(resp.Body, 10); err != nil {
		t.Fatal(err)
	}
	waitLoad(t, srv, 0, 3)
	cancel()
	resp.Body.Close()
	waitLoad(t, srv, 0, 0)

	// Slots 3 + queue 1 hold four: a running request of n 3 leaves room for
	// one more sequence, so n 2 gets 429 and its first choice is withdrawn.
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	req, _ = http.NewRequestWithContext(ctx, "POST", ts.URL+"/v1/chat/completions", bytes.NewReader(b))
	if resp, err = http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	waitLoad(t, srv, 0, 3)
	body["n"], body["stream"] = 2, false
	var e apiError
	if code := post(t, ts.URL+"/v1/chat/completions", body, &e); code != 429 {
		t.Fatalf("n 2 beside 3 running, queue 1: %d %+v", code, e.Error)
	}
	waitLoad(t, srv, 0, 3) // the withdrawn choice left the queue
	cancel()
	waitLoad(t, srv, 0, 0)
}
