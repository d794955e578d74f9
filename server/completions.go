package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"lagc/sched"
)

func (s *Server) completions(w http.ResponseWriter, r *http.Request) {
	var req completionRequest
	if err := s.decodeBody(w, r, &req); err != nil {
		s.fail(w, r, err)
		return
	}
	in, err := s.completionPrompt(req.Prompt)
	prompt := in.ids
	if err != nil {
		s.fail(w, r, err)
		return
	}
	nlp, err := completionLogprobsParam(req.Logprobs)
	if err != nil {
		s.fail(w, r, badRequest("logprobs", "%v", err))
		return
	}
	j, err := s.newJob(&req.samplingParams, prompt, "prompt", nlp)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	// echo: the prompt's text goes before the completion, and with
	// logprobs its tokens' records (scored by the scheduler) before the
	// completion's. With max_tokens 0 and no logprobs nothing runs.
	var echo string
	prefix := 0
	switch {
	case req.Echo && in.isText:
		echo = in.text
		prefix, _ = s.cfg.Tokenizer.PostProcessorLen()
	case req.Echo:
		echo = s.cfg.Tokenizer.Decode(prompt)
	}
	var sts []*sched.Stream
	if j.maxTokens > 0 || j.scorePrompt() {
		if sts, err = s.start(r.Context(), j); err != nil {
			s.fail(w, r, err)
			return
		}
	}
	n := len(j.choices)
	id, created := newID("cmpl-"), time.Now().Unix()
	offsets := make([]int, n) // each choice's text_offset of its next token
	// echoed is choice c's echo, once its prompt has been fed.
	echoed := func(c int) (string, *completionLogprobs, error) {
		if !j.scorePrompt() {
			return echo, nil, nil
		}
		recs, err := j.choices[c].logprobs.promptRecords()
		if err == nil && len(recs) != len(prompt)-1 {
			err = fmt.Errorf("%d of the prompt's %d positions were scored", len(recs), len(prompt)-1)
		}
		if err != nil {
			return "", nil, fmt.Errorf("echo with logprobs: %w", err)
		}
		lp, end := promptLogprobsOf(s.cfg.Tokenizer, prompt, recs, prefix)
		offsets[c] = end
		return echo, lp, nil
	}
	resp := func(c int, text string, recs []tokenLogprob, finish *string, pre *completionLogprobs) completionResponse {
		ch := completionChoice{Index: c, Text: text, FinishReason: finish}
		if j.withLogprobs() {
			ch.Logprobs, offsets[c] = completionLogprobsOf(s.cfg.Tokenizer, recs, offsets[c])
			if pre != nil {
				pre.concat(ch.Logprobs)
				ch.Logprobs = pre
			}
		}
		return completionResponse{ID: id, Object: "text_completion", Created: created, Model: s.cfg.Name,
			Choices: []completionChoice{ch}}
	}
	outs := make([]outcome, n)
	for c := range outs {
		outs[c].finish = "length" // where nothing runs
	}
	if !req.Stream {
		texts := make([]strings.Builder, n)
		recs := make([][]tokenLogprob, n)
		err := eachChoice(r.Context(), len(sts), func(ctx context.Context, c int) error {
			var err error
			outs[c], err = s.consume(ctx, sts[c], j, c, func(t string, lp []tokenLogprob) error {
				texts[c].WriteString(t)
				recs[c] = append(recs[c], lp...)
				return nil
			})
			return err
		})
		if err != nil {
			s.fail(w, r, err)
			return
		}
		whole := completionResponse{ID: id, Object: "text_completion", Created: created, Model: s.cfg.Name, Usage: usageOf(j, outs)}
		for c := range n {
			et, elp, err := echoed(c)
			if err != nil {
				s.fail(w, r, err)
				return
			}
			whole.Choices = append(whole.Choices, resp(c, et+texts[c].String(), append(recs[c], outs[c].logprobs...), ptr(outs[c].finish), elp).Choices...)
		}
		writeJSON(w, http.StatusOK, whole)
		return
	}
	ev := startSSE(w)
	err = eachChoice(r.Context(), n, func(ctx context.Context, c int) error {
		sent := !req.Echo
		sendEcho := func() error {
			if sent {
				return nil
			}
			sent = true
			et, elp, err := echoed(c)
			if err != nil {
				return err
			}
			return ev.send(resp(c, et, nil, nil, elp))
		}
		if sts != nil {
			o, err := s.consume(ctx, sts[c], j, c, func(t string, lp []tokenLogprob) error {
				if err := sendEcho(); err != nil {
					return err
				}
				return ev.send(resp(c, t, lp, nil, nil))
			})
			if outs[c] = o; err != nil {
				return err
			}
		}
		if err := sendEcho(); err != nil {
			return err
		}
		return ev.send(resp(c, "", outs[c].logprobs, ptr(outs[c].finish), nil))
	})
	if err == nil && req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
		err = ev.send(completionResponse{ID: id, Object: "text_completion", Created: created, Model: s.cfg.Name,
			Choices: []completionChoice{}, Usage: usageOf(j, outs)})
	}
	ev.end(err)
}

// completionInput is a completion's prompt: its ids and, when it came as
// a string, that string (what echo returns).
type completionInput struct {
	ids    []int32
	text   string
	isText bool
}

// completionPrompt reads "prompt": a string (encoded with the tokenizer's
// special prefix, as `lagc run --prompt` does), an array of token ids, or
// an array holding one of those.
func (s *Server) completionPrompt(raw json.RawMessage) (completionInput, error) {
	return s.promptOf(raw, true)
}

func (s *Server) promptOf(raw json.RawMessage, outer bool) (completionInput, error) {
	var text string
	if err := json.Unmarshal(raw, &text); err == nil {
		return completionInput{ids: s.cfg.Tokenizer.Encode(text, true), text: text, isText: true}, nil
	}
	var ids []int32
	if err := json.Unmarshal(raw, &ids); err == nil {
		return completionInput{ids: ids}, nil
	}
	var list []json.RawMessage
	if err := json.Unmarshal(raw, &list); err == nil && outer {
		if len(list) != 1 {
			return completionInput{}, badRequest("prompt", "one prompt per request: got a batch of %d", len(list))
		}
		return s.promptOf(list[0], false)
	}
	return completionInput{}, badRequest("prompt", "prompt: expected a string, an array of token ids, or an array holding one of those")
}
