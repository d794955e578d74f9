package server

import (
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
	st, err := s.start(r.Context(), j)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	id, created := newID("cmpl-"), time.Now().Unix()
	offset := 0 // text_offset of the next token
	resp := func(text string, recs []tokenLogprob, finish *string, u *usage) completionResponse {
		c := completionChoice{Text: text, FinishReason: finish}
		if j.logprobs != nil {
			c.Logprobs = completionLogprobsOf(s.cfg.Tokenizer, recs, offset)
			if n := len(c.Logprobs.TextOffset); n > 0 {
				offset = c.Logprobs.TextOffset[n-1] + utf8.RuneCountInString(c.Logprobs.Tokens[n-1])
			}
		}
		return completionResponse{ID: id, Object: "text_completion", Created: created, Model: s.cfg.Name,
			Choices: []completionChoice{c}, Usage: u}
	}
	if !req.Stream {
		var text strings.Builder
		var recs []tokenLogprob
		o, err := s.consume(r.Context(), st, j, func(t string, lp []tokenLogprob) error {
			text.WriteString(t)
			recs = append(recs, lp...)
			return nil
		})
		if err != nil {
			s.fail(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, resp(text.String(), append(recs, o.logprobs...), ptr(o.finish), usageOf(j, o)))
		return
	}
	ev := startSSE(w)
	o, err := s.consume(r.Context(), st, j, func(t string, lp []tokenLogprob) error { return ev.send(resp(t, lp, nil, nil)) })
	if err == nil {
		err = ev.send(resp("", o.logprobs, ptr(o.finish), nil))
	}
	if err == nil && req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
		u := resp("", nil, nil, usageOf(j, o))
		u.Choices = []completionChoice{}
		err = ev.send(u)
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
