package server

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"
)

func (s *Server) completions(w http.ResponseWriter, r *http.Request) {
	var req completionRequest
	if err := s.decodeBody(w, r, &req); err != nil {
		s.fail(w, r, err)
		return
	}
	prompt, err := s.completionPrompt(req.Prompt)
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
	sts, err := s.start(r.Context(), j)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	n := len(sts)
	id, created := newID("cmpl-"), time.Now().Unix()
	offsets := make([]int, n) // each choice's text_offset of its next token
	resp := func(c int, text string, recs []tokenLogprob, finish *string) completionResponse {
		ch := completionChoice{Index: c, Text: text, FinishReason: finish}
		if j.logprobs {
			ch.Logprobs = completionLogprobsOf(s.cfg.Tokenizer, recs, offsets[c])
			if k := len(ch.Logprobs.TextOffset); k > 0 {
				offsets[c] = ch.Logprobs.TextOffset[k-1] + utf8.RuneCountInString(ch.Logprobs.Tokens[k-1])
			}
		}
		return completionResponse{ID: id, Object: "text_completion", Created: created, Model: s.cfg.Name,
			Choices: []completionChoice{ch}}
	}
	outs := make([]outcome, n)
	if !req.Stream {
		texts := make([]strings.Builder, n)
		recs := make([][]tokenLogprob, n)
		err := eachChoice(r.Context(), n, func(ctx context.Context, c int) error {
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
			whole.Choices = append(whole.Choices, resp(c, texts[c].String(), append(recs[c], outs[c].logprobs...), ptr(outs[c].finish)).Choices...)
		}
		writeJSON(w, http.StatusOK, whole)
		return
	}
	ev := startSSE(w)
	err = eachChoice(r.Context(), n, func(ctx context.Context, c int) error {
		o, err := s.consume(ctx, sts[c], j, c, func(t string, lp []tokenLogprob) error { return ev.send(resp(c, t, lp, nil)) })
		outs[c] = o
		if err == nil {
			err = ev.send(resp(c, "", o.logprobs, ptr(o.finish)))
		}
		return err
	})
	if err == nil && req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
		err = ev.send(completionResponse{ID: id, Object: "text_completion", Created: created, Model: s.cfg.Name,
			Choices: []completionChoice{}, Usage: usageOf(j, outs)})
	}
	ev.end(err)
}

// completionPrompt reads "prompt": a string (encoded with the tokenizer's
// special prefix, as `lagc run --prompt` does), an array of token ids, or
// an array holding one of those.
func (s *Server) completionPrompt(raw json.RawMessage) ([]int32, error) {
	return s.promptOf(raw, true)
}

func (s *Server) promptOf(raw json.RawMessage, outer bool) ([]int32, error) {
	var text string
	if err := json.Unmarshal(raw, &text); err == nil {
		return s.cfg.Tokenizer.Encode(text, true), nil
	}
	var ids []int32
	if err := json.Unmarshal(raw, &ids); err == nil {
		return ids, nil
	}
	var list []json.RawMessage
	if err := json.Unmarshal(raw, &list); err == nil && outer {
		if len(list) != 1 {
			return nil, badRequest("prompt", "one prompt per request: got a batch of %d", len(list))
		}
		return s.promptOf(list[0], false)
	}
	return nil, badRequest("prompt", "prompt: expected a string, an array of token ids, or an array holding one of those")
}
