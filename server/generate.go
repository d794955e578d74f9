package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"lagc/internal/stopseq"
	"net/http"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"lagc/engine"
	"lagc/exec/cpu"
	"lagc/sched"
)

// job is a validated generation: what the scheduler runs and what the
// server does with its text. Its choices (OpenAI's n) are sequences of
// their own, each with its own sampler.
type job struct {
	prompt    []int32
	maxTokens int
	stops     []string
	choices   []choiceJob
	echo      bool
}

// withLogprobs reports whether the choices record logprobs (each has a
// logprobSampler).
func (j *job) withLogprobs() bool { return j.choices[0].logprobs != nil }

// scorePrompt reports whether each choice also records the prompt's tokens
// (sched.Request.PromptRow): echo with logprobs.
func (j *job) scorePrompt() bool { return j.echo && j.withLogprobs() }

type choiceJob struct {
	sampler  engine.Sampler
	logprobs *logprobSampler // nil: no logprobs asked for
}

// newJob checks p against the prompt and the context and builds the job;
// logprobs is the alternatives to report with each token, -1 for none.
func (s *Server) newJob(p *samplingParams, prompt []int32, promptParam string, logprobs int) (*job, error) {
	if param, err := p.check(); err != nil {
		return nil, badRequest(param, "%v", err)
	}
	if err := s.checkModel(p.Model); err != nil {
		return nil, err
	}
	if len(prompt) == 0 {
		return nil, badRequest(promptParam, "the prompt is empty")
	}
	ctx := s.batch.MaxPos()
	room := ctx - len(prompt)
	if room <= 0 {
		return nil, contextError(promptParam, fmt.Sprintf("This model's maximum context length is %d tokens; the prompt has %d tokens, leaving no room for a completion.", ctx, len(prompt)))
	}
	n := 1
	if p.N != nil {
		n = *p.N
	}
	if slots, queue := s.sched.Limits(); n > slots+queue {
		return nil, badRequest("n", "n is %d; this server holds at most %d (%d running at once, %d queued)", n, slots+queue, slots, queue)
	}
	j := &job{prompt: prompt, maxTokens: room, stops: p.Stop, choices: make([]choiceJob, n), echo: p.Echo}
	if n := p.maxTokens(); n != nil {
		if *n > room {
			return nil, contextError("max_tokens", fmt.Sprintf("This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the prompt, %d for the completion).",
				ctx, len(prompt)+*n, len(prompt), *n))
		}
		j.maxTokens = *n
	}
	bias, _ := p.logitBias() // checked above
	for id := range bias {
		if int(id) >= s.vocab {
			return nil, badRequest("logit_bias", "logit_bias: token %d is outside the vocabulary [0, %d)", id, s.vocab)
		}
	}
	seed := uint64(time.Now().UnixNano())
	if p.Seed != nil {
		seed = uint64(*p.Seed)
	}
	for i := range j.choices {
		c := &j.choices[i]
		var err error
		if c.sampler, err = newSampler(p, len(prompt), bias, seed+uint64(i), logprobs >= 0); err != nil {
			return nil, badRequest("", "%v", err)
		}
		if logprobs >= 0 {
			c.logprobs = &logprobSampler{LogprobSampler: &cpu.LogprobSampler{Inner: c.sampler, Top: logprobs}, prompt: prompt}
			c.sampler = c.logprobs
		}
	}
	return j, nil
}

func contextError(param, msg string) *httpError {
	return &httpError{status: http.StatusBadRequest, typ: "invalid_request_error", param: param, code: "context_length_exceeded", msg: msg}
}

// newSampler returns the request's sampler: nil (the backend's argmax) for
// temperature 0 without a penalty or a bias, unless the logits are needed
// anyway (for logprobs). The temperature defaults to 1, as in OpenAI's
// API.
func newSampler(p *samplingParams, promptLen int, bias map[int32]float64, seed uint64, needLogits bool) (engine.Sampler, error) {
	cfg := cpu.SamplerConfig{Temperature: 1, TopP: 1, RepetitionPenalty: 1, PromptLen: promptLen, LogitBias: bias, Seed: seed}
	if p.Temperature != nil {
		cfg.Temperature = *p.Temperature
	}
	if p.TopP != nil {
		cfg.TopP = *p.TopP
	}
	if p.TopK != nil && *p.TopK > 0 {
		cfg.TopK = *p.TopK
	}
	if p.MinP != nil {
		cfg.MinP = *p.MinP
	}
	if p.RepetitionPenalty != nil {
		cfg.RepetitionPenalty = *p.RepetitionPenalty
	}
	if p.PresencePenalty != nil {
		cfg.PresencePenalty = *p.PresencePenalty
	}
	if p.FrequencyPenalty != nil {
		cfg.FrequencyPenalty = *p.FrequencyPenalty
	}
	s, err := cpu.NewSampler(cfg)
	if err != nil || (s.Argmax() && !needLogits) {
		return nil, err
	}
	return s, nil
}

// start submits j's choices, a stream each; they end with ctx (the
// client's connection). If one cannot be submitted, those that were are
// cancelled.
func (s *Server) start(ctx context.Context, j *job) ([]*sched.Stream, error) {
	var sts []*sched.Stream
	for _, c := range j.choices {
		st, err := s.submit(ctx, j, c)
		if err != nil {
			for _, st := range sts {
				st.Cancel()
			}
			return nil, err
		}
		sts = append(sts, st)
	}
	return sts, nil
}

func (s *Server) submit(ctx context.Context, j *job, c choiceJob) (*sched.Stream, error) {
	r := sched.Request{Prompt: j.prompt, MaxTokens: j.maxTokens, Sampler: c.sampler, Stop: s.cfg.Tokenizer.IsEOG}
	if j.scorePrompt() {
		r.PromptRow = c.logprobs.promptRow
	}
	st, err := s.sched.Submit(ctx, r)
	var ce *sched.ContextError
	switch {
	case err == nil:
		s.metrics.promptTokens.Add(float64(len(j.prompt)))
		return st, nil
	case errors.Is(err, sched.ErrQueueFull):
		return nil, &httpError{status: http.StatusTooManyRequests, typ: "rate_limit_error", code: "queue_full", retryAfterS: 1,
			msg: "the server is busy: every sequence slot is taken and the queue is full; retry later"}
	case errors.Is(err, sched.ErrClosed):
		return nil, &httpError{status: http.StatusServiceUnavailable, typ: "server_error", code: "shutting_down", msg: "the server is shutting down"}
	case errors.As(err, &ce):
		return nil, contextError("", err.Error())
	}
	return nil, badRequest("", "%v", err)
}

// outcome is how a generation ended.
type outcome struct {
	finish     string         // OpenAI's finish_reason: "stop" or "length"
	completion int            // tokens generated
	cached     int            // prompt tokens reused from the KV of a slot
	logprobs   []tokenLogprob // with logprobs: the records not yet passed on with text
}

// errClientGone ends a generation whose client disconnected.
var errClientGone = errors.New("the client went away")

// consume reads st to its end, passing the text on as it is decoded: held
// back only where it may begin a stop string (which ends the generation
// and is not passed on). With logprobs, each token's record goes with the
// first text passed on after it; those left at the end are in the outcome.
// It returns errClientGone when ctx ends first. c is the choice st runs.
func (s *Server) consume(ctx context.Context, st *sched.Stream, j *job, c int, onText func(string, []tokenLogprob) error) (out outcome, err error) {
	defer st.Cancel()
	dec := s.cfg.Tokenizer.NewStreamDecoder(true)
	stop := stopseq.New(j.stops)
	var recs []tokenLogprob
	defer func() { out.logprobs = recs }()
	pass := func(text string) error {
		if text == "" {
			return nil
		}
		r := recs
		recs = nil
		if err := onText(text, r); err != nil { // only writes to the client fail
			s.metrics.canceled.Inc()
			return errClientGone
		}
		return nil
	}
	for {
		ids, reason, err := st.Next(ctx)
		if ctx.Err() != nil {
			s.metrics.canceled.Inc()
			return out, errClientGone
		}
		out.completion += len(ids)
		for _, id := range ids {
			if lp := j.choices[c].logprobs; lp != nil {
				r, ok := lp.Take() // (sampled before pushed: never missing)
				if !ok || r.ID != id {
					return out, fmt.Errorf("logprobs: no record for generated token %d", id)
				}
				recs = append(recs, r)
			}
			text, hit := stop.Add(dec.Add(id))
			if err := pass(text); err != nil {
				return out, err
			}
			if hit {
				out.finish, out.cached = "stop", st.CachedTokens()
				s.metrics.cachedTokens.Add(float64(out.cached))
				return out, nil
			}
		}
		if reason == "" {
			continue
		}
		out.cached = st.CachedTokens()
		s.metrics.cachedTokens.Add(float64(out.cached))
		switch reason {
		case sched.FinishCanceled:
			if ctx.Err() != nil {
				s.metrics.canceled.Inc()
				return out, errClientGone
			}
			return out, &httpError{status: http.StatusServiceUnavailable, typ: "server_error", code: "shutting_down",
				msg: "the server shut down before the generation finished"}
		case sched.FinishError:
			return out, fmt.Errorf("generation failed: %w", err)
		case sched.FinishStop:
			out.finish = "stop"
		default: // max tokens or a full context
			out.finish = "length"
		}
		text, hit := stop.Add(dec.Flush())
		if !hit {
			text += stop.Flush()
		}
		return out, pass(text)
	}
}

// sse writes a server-sent-event stream; the choices of a request send
// from goroutines of their own.
type sse struct {
	mu sync.Mutex
	w  http.ResponseWriter
	rc *http.ResponseController
}

func startSSE(w http.ResponseWriter) *sse {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	e := &sse{w: w, rc: http.NewResponseController(w)}
	e.rc.Flush()
	return e
}

func (e *sse) send(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, err := fmt.Fprintf(e.w, "data: %s\n\n", b); err != nil {
		return err
	}
	return e.rc.Flush()
}

// end closes the stream, after an error event if err is not nil.
func (e *sse) end(err error) {
	if err != nil && !errors.Is(err, errClientGone) {
		var he *httpError
		d := errorDetail{Message: err.Error(), Type: "server_error"}
		if errors.As(err, &he) {
			d.Type = he.typ
		}
		e.send(apiError{Error: d})
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	fmt.Fprint(e.w, "data: [DONE]\n\n")
	e.rc.Flush()
}

func ptr[T any](v T) *T { return &v }

// usageOf counts the prompt once and every choice's tokens; cached_tokens
// is the fewest any choice reused.
func usageOf(j *job, outs []outcome) *usage {
	u := &usage{PromptTokens: len(j.prompt), TotalTokens: len(j.prompt)}
	cached := len(j.prompt)
	for _, o := range outs {
		u.CompletionTokens += o.completion
		cached = min(cached, o.cached)
	}
	u.TotalTokens += u.CompletionTokens
	if cached > 0 {
		u.PromptDetails = &promptDetail{CachedTokens: cached}
	}
	return u
}

// eachChoice runs f for choices 0 to n-1 at once and returns the first
// error, which cancels the ctx the others were given.
func eachChoice(ctx context.Context, n int, f func(ctx context.Context, c int) error) error {
	g, gctx := errgroup.WithContext(ctx)
	for c := range n {
		g.Go(func() error { return f(gctx, c) })
	}
	return g.Wait()
}
