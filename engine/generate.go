package engine

import (
	"context"
	"fmt"
	"time"
)

// Sampler picks the next token from a row of logits (cpu.Sampler is one).
type Sampler interface {
	Sample(logits []float32, history []int32) (int32, error)
	Greedy() bool
}

// GenOptions control one generation.
type GenOptions struct {
	MaxTokens int     // tokens to generate after the prompt
	Sampler   Sampler // nil: greedy, the backend's own argmax
	// Chunk splits the prompt into prefill steps of at most this many
	// tokens; 0 feeds the whole prompt in one step.
	Chunk   int
	Stop    func(id int32) bool  // end of generation (eos/eot); nil: never
	OnToken func(id int32) error // called as each token is produced
	Logits  bool                 // keep every prompt position's logits
}

// GenResult is what a generation produced.
type GenResult struct {
	Prompt      []int32
	Generated   []int32
	PromptNext  []int32     // argmax at every prompt position
	LastLogits  []float32   // the prompt's last-position logits
	PromptRows  [][]float32 // every prompt position's logits, with GenOptions.Logits
	StopReason  string      // "length", "stop" (an end token), "context" or "canceled"
	PrefillTime time.Duration
	DecodeTime  time.Duration
}

// Generate feeds the prompt, then generates up to o.MaxTokens tokens one
// step at a time, continuing the backend's sequence from position 0.
func (m *Model) Generate(ctx context.Context, prompt []int32, o GenOptions) (*GenResult, error) {
	if len(prompt) == 0 {
		return nil, fmt.Errorf("the prompt is empty")
	}
	V := m.Config.VocabSize
	for i, id := range prompt {
		if id < 0 || int(id) >= V {
			return nil, fmt.Errorf("prompt id %d at index %d is outside the vocabulary [0, %d)", id, i, V)
		}
	}
	b := m.Backend
	if max := b.MaxPos(); len(prompt) > max {
		return nil, fmt.Errorf("the prompt has %d tokens, longer than the context of %d", len(prompt), max)
	}
	if o.MaxTokens < 0 {
		return nil, fmt.Errorf("max tokens must not be negative, got %d", o.MaxTokens)
	}
	b.Reset()
	res := &GenResult{Prompt: prompt}
	chunk := o.Chunk
	if chunk <= 0 {
		chunk = len(prompt)
	}
	t0 := time.Now()
	var last []float32
	var lastNext int32
	var steps [][]int32 // what was fed, to locate non-finite logits
	for s := 0; s < len(prompt); s += chunk {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		part := prompt[s:min(s+chunk, len(prompt))]
		logits, next, err := b.Forward(part)
		if err != nil {
			return nil, fmt.Errorf("prefill at position %d: %w", s, err)
		}
		if err := checkStep(logits, next, len(part), V); err != nil {
			return nil, fmt.Errorf("prefill at position %d: %w", s, err)
		}
		steps = append(steps, part)
		if e := checkFinite(fmt.Sprintf("prefill at position %d", s), logits, len(part), V, o.Logits); e != nil {
			return nil, locate(b, steps, e)
		}
		res.PromptNext = append(res.PromptNext, next...)
		if o.Logits {
			for t := range part {
				res.PromptRows = append(res.PromptRows, logits[t*V:(t+1)*V])
			}
		}
		last, lastNext = logits[(len(part)-1)*V:], next[len(part)-1]
	}
	res.LastLogits = last
	res.PrefillTime = time.Since(t0)

	t1 := time.Now()
	history := append([]int32(nil), prompt...)
	res.StopReason = "length"
	for len(res.Generated) < o.MaxTokens {
		id := lastNext
		if o.Sampler != nil {
			var err error
			if id, err = o.Sampler.Sample(last, history); err != nil {
				return nil, err
			}
		}
		res.Generated = append(res.Generated, id)
		history = append(history, id)
		if o.OnToken != nil {
			if err := o.OnToken(id); err != nil {
				return nil, err
			}
		}
		if o.Stop != nil && o.Stop(id) {
			res.StopReason = "stop"
			break
		}
		if len(res.Generated) == o.MaxTokens {
			break
		}
		if b.Pos() >= b.MaxPos() {
			res.StopReason = "context"
			break
		}
		if ctx.Err() != nil {
			res.StopReason = "canceled"
			break
		}
		logits, next, err := b.Forward([]int32{id})
		if err == nil && !(logits == nil && o.Sampler == nil && len(next) == 1) {
			// (Greedy decoding needs only next: a backend may skip the logits.)
			err = checkStep(logits, next, 1, V)
		}
		if err != nil {
			return nil, fmt.Errorf("decode at position %d: %w", b.Pos(), err)
		}
		steps = append(steps, []int32{id})
		if logits != nil {
			if e := checkFinite(fmt.Sprintf("decode at position %d", b.Pos()-1), logits, 1, V, false); e != nil {
				return nil, locate(b, steps, e)
			}
		}
		last, lastNext = logits, next[0]
	}
	res.DecodeTime = time.Since(t1)
	return res, nil
}

// checkStep checks that a backend returned T rows of V logits and T ids.
func checkStep(logits []float32, next []int32, T, V int) error {
	if len(logits) != T*V || len(next) != T {
		return fmt.Errorf("the backend returned %d logits and %d next ids for %d tokens; expected %d x vocab %d and %d",
			len(logits), len(next), T, T, V, T)
	}
	return nil
}
