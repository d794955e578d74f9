package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sync"
	"unicode/utf8"

	"lagc/exec/cpu"
	"lagc/tokenizer"
)

// maxTopLogprobs bounds top_logprobs (chat) and logprobs (completions), as
// OpenAI's chat API and vLLM do.
const maxTopLogprobs = 20

// minLogprob stands for a log-probability of -Inf, which JSON cannot hold
// (OpenAI's API uses the same value).
const minLogprob = -9999.0

// tokenLogprob is a generated token's log-probability under the model's
// distribution (the log-softmax of its logits, before any penalty or
// temperature) with the most likely tokens at that step, best first.
type tokenLogprob = cpu.StepLogprobs

// logprobSampler wraps a request's sampler and records every drawn token's
// log-probability (cpu.LogprobSampler) and, for an echo, the prompt's. The
// scheduler's goroutine samples; the handler takes the records as the
// tokens reach it: a token is pushed to its stream only after it was
// sampled, so its record is there first.
type logprobSampler struct {
	*cpu.LogprobSampler
	prompt []int32 // the request's prompt, for promptRow

	mu         sync.Mutex
	promptRecs []tokenLogprob // prompt[i+1]'s record at i (echo with logprobs)
	promptErr  error
}

// promptRow records prompt[i+1]'s log-probability from row i: it is the
// sched.Request.PromptRow of an echo with logprobs.
func (l *logprobSampler) promptRow(i int, logits []float32) {
	rec, err := cpu.LogprobsOf(logits, l.prompt[i+1], l.Top)
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		if l.promptErr == nil {
			l.promptErr = fmt.Errorf("prompt position %d: %w", i, err)
		}
		return
	}
	l.promptRecs = append(l.promptRecs, rec)
}

// promptRecords returns the prompt's records (all of them once the prompt
// has been fed), or the error of a row that had none.
func (l *logprobSampler) promptRecords() ([]tokenLogprob, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.promptRecs, l.promptErr
}

// jsonLogprob is lp as JSON can hold it.
func jsonLogprob(lp float64) float64 { return max(lp, minLogprob) }

// tokenText is a token's text: its bytes as a string, invalid UTF-8 (part
// of a character) as U+FFFD, as JSON would write them anyway.
func tokenText(tok *tokenizer.Tokenizer, id int32) string {
	return string(bytes.ToValidUTF8(tok.TokenBytes(id), []byte(string(utf8.RuneError))))
}

// tokenByteList is a token's bytes as a JSON array of numbers (OpenAI's
// "bytes"; a []byte would marshal to base64).
func tokenByteList(tok *tokenizer.Tokenizer, id int32) []int {
	b := tok.TokenBytes(id)
	out := make([]int, len(b))
	for i, c := range b {
		out[i] = int(c)
	}
	return out
}

// completionLogprobs is a completion choice's "logprobs" (OpenAI's legacy
// shape). Each top_logprobs object holds the chosen token with the
// alternatives, keyed by token text; an echoed prompt's first token has
// null for both (nothing predicts it).
type completionLogprobs struct {
	Tokens        []string             `json:"tokens"`
	TokenLogprobs []*float64           `json:"token_logprobs"`
	TopLogprobs   []map[string]float64 `json:"top_logprobs"`
	TextOffset    []int                `json:"text_offset"`
}

func newCompletionLogprobs() *completionLogprobs {
	return &completionLogprobs{Tokens: []string{}, TokenLogprobs: []*float64{}, TopLogprobs: []map[string]float64{}, TextOffset: []int{}}
}

// completionLogprobsOf puts recs in the legacy shape; offset is the length
// in characters of the text before the first of them (text_offset counts
// each token's own text). It returns the offset after the last.
func completionLogprobsOf(tok *tokenizer.Tokenizer, recs []tokenLogprob, offset int) (*completionLogprobs, int) {
	c := newCompletionLogprobs()
	for _, r := range recs {
		offset = c.add(tok, r, offset)
	}
	return c, offset
}

// add appends r at text offset offset and returns the offset after it.
func (c *completionLogprobs) add(tok *tokenizer.Tokenizer, r tokenLogprob, offset int) int {
	text := tokenText(tok, r.ID)
	c.Tokens = append(c.Tokens, text)
	c.TokenLogprobs = append(c.TokenLogprobs, ptr(jsonLogprob(r.Logprob)))
	top := map[string]float64{text: jsonLogprob(r.Logprob)}
	for _, a := range r.Top {
		if t := tokenText(tok, a.ID); a.ID != r.ID {
			if _, dup := top[t]; !dup {
				top[t] = jsonLogprob(a.Logprob)
			}
		}
	}
	c.TopLogprobs = append(c.TopLogprobs, top)
	c.TextOffset = append(c.TextOffset, offset)
	return offset + utf8.RuneCountInString(text)
}

// promptLogprobsOf is an echoed prompt's part of the legacy shape: its
// first token with nulls, then recs (prompt[i+1]'s at i). The first
// prefix tokens (those the tokenizer added to a text prompt, absent from
// the echoed text) take no characters of text_offset. It returns the
// offset after the prompt.
func promptLogprobsOf(tok *tokenizer.Tokenizer, prompt []int32, recs []tokenLogprob, prefix int) (*completionLogprobs, int) {
	c := newCompletionLogprobs()
	offset := 0
	for i, id := range prompt {
		at := offset
		if i == 0 {
			text := tokenText(tok, id)
			c.Tokens = append(c.Tokens, text)
			c.TokenLogprobs = append(c.TokenLogprobs, nil)
			c.TopLogprobs = append(c.TopLogprobs, nil)
			c.TextOffset = append(c.TextOffset, offset)
			offset += utf8.RuneCountInString(text)
		} else if i-1 < len(recs) {
			offset = c.add(tok, recs[i-1], offset)
		}
		if i < prefix {
			offset = at
		}
	}
	return c, offset
}

// concat appends d's entries to c.
func (c *completionLogprobs) concat(d *completionLogprobs) {
	c.Tokens = append(c.Tokens, d.Tokens...)
	c.TokenLogprobs = append(c.TokenLogprobs, d.TokenLogprobs...)
	c.TopLogprobs = append(c.TopLogprobs, d.TopLogprobs...)
	c.TextOffset = append(c.TextOffset, d.TextOffset...)
}

// chatLogprobs is a chat choice's "logprobs".
type chatLogprobs struct {
	Content []chatTokenLogprob `json:"content"`
	Refusal []chatTokenLogprob `json:"refusal"`
}

type chatTokenLogprob struct {
	Token       string           `json:"token"`
	Logprob     float64          `json:"logprob"`
	Bytes       []int            `json:"bytes"`
	TopLogprobs []chatTopLogprob `json:"top_logprobs"`
}

type chatTopLogprob struct {
	Token   string  `json:"token"`
	Logprob float64 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

func chatLogprobsOf(tok *tokenizer.Tokenizer, recs []tokenLogprob) *chatLogprobs {
	c := &chatLogprobs{Content: []chatTokenLogprob{}}
	for _, r := range recs {
		e := chatTokenLogprob{Token: tokenText(tok, r.ID), Logprob: jsonLogprob(r.Logprob), Bytes: tokenByteList(tok, r.ID),
			TopLogprobs: []chatTopLogprob{}}
		for _, a := range r.Top {
			e.TopLogprobs = append(e.TopLogprobs, chatTopLogprob{Token: tokenText(tok, a.ID), Logprob: jsonLogprob(a.Logprob), Bytes: tokenByteList(tok, a.ID)})
		}
		c.Content = append(c.Content, e)
	}
	return c
}

// completionLogprobsParam reads /v1/completions' "logprobs": null or absent
// (off, as are false and 0 for clients that send those), or the number of
// alternatives to return with each token. It returns -1 for off.
func completionLogprobsParam(raw json.RawMessage) (int, error) {
	raw = bytes.TrimSpace(raw)
	switch string(raw) {
	case "", "null", "false":
		return -1, nil
	}
	var n int
	if err := json.Unmarshal(raw, &n); err != nil {
		return 0, fmt.Errorf("logprobs must be an integer in [0, %d], got %s", maxTopLogprobs, raw)
	}
	if n < 0 || n > maxTopLogprobs {
		return 0, fmt.Errorf("logprobs must be in [0, %d], got %d", maxTopLogprobs, n)
	}
	return n, nil
}

// chatLogprobsParam reads /v1/chat/completions' "logprobs" (a boolean) and
// "top_logprobs"; it returns -1 for off.
func chatLogprobsParam(raw json.RawMessage, top *int) (n int, param string, err error) {
	on := false
	switch r := string(bytes.TrimSpace(raw)); r {
	case "", "null", "false", "0":
	case "true":
		on = true
	default:
		return 0, "logprobs", fmt.Errorf("logprobs must be true or false, got %s", r)
	}
	if top != nil && (*top < 0 || *top > maxTopLogprobs) {
		return 0, "top_logprobs", fmt.Errorf("top_logprobs must be in [0, %d], got %d", maxTopLogprobs, *top)
	}
	if !on {
		if top != nil && *top > 0 {
			return 0, "top_logprobs", fmt.Errorf("top_logprobs needs logprobs: true")
		}
		return -1, "", nil
	}
	if top == nil {
		return 0, "", nil
	}
	return *top, "", nil
}
