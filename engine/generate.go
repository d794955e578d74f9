package engine

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Sampler picks the next token from a row of logits (cpu.Sampler is one).
type Sampler interface {
	Sample(logits []float32, history []int32) (int32, error)
	Greedy() bool
}

// ErrStop, returned by GenOptions.OnToken, ends generation after that token
// with StopReason "stop" (a stop string was completed, say).
var ErrStop = errors.New("stop generation")

// GenOptions control one generation.
type GenOptions struct {
	MaxTokens int     // tokens to generate after the prompt
	Sampler   Sampler // nil: greedy, the backend's own argmax
	// Chunk splits the prompt into prefill steps of at most this many
	// tokens; 0 feeds the whole prompt in one step.
	Chunk int
	// ChunkTime, when positive, sizes prefill steps (at most Chunk tokens)
	// to take about this long each, so that a cancelled context is noticed
	// promptly on a slow backend. The first step is at most firstChunk
	// tokens; later ones follow the measured time per token.
	ChunkTime time.Duration
	Stop      func(id int32) bool  // end of generation (eos/eot); nil: never
	OnToken   func(id int32) error // called as each token is produced; may return ErrStop
	Logits    bool                 // keep every prompt position's logits
	// LastOnly lets a backend that can (TailForwarder, the GPU) compute,
	// after the last layer's attention, only what each prefill step's last
	// position needs: GenResult.PromptNext then holds each step's last
	// argmax alone. Ignored with Logits.
	LastOnly bool
}

// firstChunk bounds the first prefill step under GenOptions.ChunkTime,
// before any step has been timed.
const firstChunk = 16

// GenResult is what a generation produced.
type GenResult struct {
	Start       int     // tokens already in the sequence before Prompt
	Prompt      []int32 // the tokens this call fed before generating
	Fed         int     // how many of Prompt were fed (fewer when cancelled)
	Generated   []int32
	PromptNext  []int32     // argmax at every fed prompt position (with GenOptions.LastOnly, maybe each step's last)
	LastLogits  []float32   // the prompt's last-position logits
	PromptRows  [][]float32 // every prompt position's logits, with GenOptions.Logits
	StopReason  string      // "length", "stop" (an end token or ErrStop), "context" or "canceled"
	PrefillTime time.Duration
	DecodeTime  time.Duration
}

// Sequence returns the tokens the backend holds (its KV caches), in order:
// what Continue extends. The last generated token is not among them until
// the next call feeds it. The slice is valid until the next call that
// changes the sequence and must not be modified.
func (m *Model) Sequence() []int32 { return m.seq }

// Reset starts a new, empty sequence.
func (m *Model) Reset() {
	m.Backend.Reset()
	m.seq = nil
}

// Generate starts a new sequence: it feeds the prompt from position 0, then
// generates up to o.MaxTokens tokens one step at a time.
func (m *Model) Generate(ctx context.Context, prompt []int32, o GenOptions) (*GenResult, error) {
	if len(prompt) == 0 {
		return nil, fmt.Errorf("the prompt is empty")
	}
	m.Reset()
	return m.Continue(ctx, prompt, o)
}

// Continue feeds tokens after Sequence() (keeping the KV caches of what
// came before, as a chat turn or a server request with a cached prefix
// does), then generates as Generate does. A cancelled context ends prefill
// or decode with StopReason "canceled" and what was produced so far; the
// sequence then holds the tokens fed. A backend error resets the sequence.
func (m *Model) Continue(ctx context.Context, tokens []int32, o GenOptions) (*GenResult, error) {
	if len(tokens) == 0 {
		return nil, fmt.Errorf("nothing to feed: continuing a sequence needs at least one new token")
	}
	V := m.Config.VocabSize
	for i, id := range tokens {
		if id < 0 || int(id) >= V {
			return nil, fmt.Errorf("prompt id %d at index %d is outside the vocabulary [0, %d)", id, i, V)
		}
	}
	b := m.Backend
	if b.Pos() != len(m.seq) {
		return nil, fmt.Errorf("the backend is at position %d but the model recorded %d tokens: it was driven outside Generate/Continue", b.Pos(), len(m.seq))
	}
	start := len(m.seq)
	if max := b.MaxPos(); start+len(tokens) > max {
		if start == 0 {
			return nil, fmt.Errorf("the prompt has %d tokens, longer than the context of %d", len(tokens), max)
		}
		return nil, fmt.Errorf("%d new tokens after the %d in the cache exceed the context of %d", len(tokens), start, max)
	}
	if o.MaxTokens < 0 {
		return nil, fmt.Errorf("max tokens must not be negative, got %d", o.MaxTokens)
	}
	res := &GenResult{Start: start, Prompt: tokens}
	last, lastNext, err := m.prefill(ctx, tokens, o, res)
	if err != nil {
		m.Reset()
		return nil, err
	}
	if res.StopReason == "canceled" {
		return res, nil
	}
	if err := m.decode(ctx, last, lastNext, o, res); err != nil {
		m.Reset()
		return nil, err
	}
	return res, nil
}

// prefill feeds tokens in chunks, checking for cancellation between them,
// and returns the last position's logits and argmax.
func (m *Model) prefill(ctx context.Context, tokens []int32, o GenOptions, res *GenResult) ([]float32, int32, error) {
	b, V := m.Backend, m.Config.VocabSize
	limit := o.Chunk
	if limit <= 0 {
		limit = len(tokens)
	}
	chunk := limit
	if o.ChunkTime > 0 {
		chunk = min(limit, firstChunk)
	}
	t0 := time.Now()
	defer func() { res.PrefillTime = time.Since(t0) }()
	var last []float32
	var lastNext int32
	for s := 0; s < len(tokens); {
		if ctx.Err() != nil {
			res.StopReason = "canceled"
			return nil, 0, nil
		}
		part := tokens[s:min(s+chunk, len(tokens))]
		t := time.Now()
		logits, next, err := m.prefillStep(part, o.Logits, o.LastOnly)
		if err != nil {
			return nil, 0, fmt.Errorf("prefill at position %d: %w", res.Start+s, err)
		}
		step, lastRow := fmt.Sprintf("prefill at position %d", res.Start+s), logits[len(logits)-V:]
		if len(logits) == V && len(part) > 1 { // the backend copied the last row only
			if e := checkFinite(step, lastRow, 1, V, false); e != nil {
				e.Row = len(part) - 1
				return nil, 0, locate(b, m.stepsThrough(part), e)
			}
		} else if e := checkFinite(step, logits, len(part), V, o.Logits); e != nil {
			return nil, 0, locate(b, m.stepsThrough(part), e)
		}
		m.seq = append(m.seq, part...)
		s += len(part)
		res.Fed = s
		res.PromptNext = append(res.PromptNext, next...)
		if o.Logits {
			for t := range part {
				res.PromptRows = append(res.PromptRows, logits[t*V:(t+1)*V])
			}
		}
		last, lastNext = lastRow, next[len(next)-1]
		if o.ChunkTime > 0 {
			perToken := time.Since(t) / time.Duration(len(part))
			chunk = limit
			if perToken > 0 {
				chunk = int(min(int64(limit), max(1, int64(o.ChunkTime/perToken))))
			}
		}
	}
	res.LastLogits = last
	return last, lastNext, nil
}

// decode samples and feeds one token at a time from the prompt's last
// logits until a stop condition.
func (m *Model) decode(ctx context.Context, last []float32, lastNext int32, o GenOptions, res *GenResult) error {
	b, V := m.Backend, m.Config.VocabSize
	t1 := time.Now()
	defer func() { res.DecodeTime = time.Since(t1) }()
	var history []int32 // the whole context, for the repetition penalty
	if o.Sampler != nil {
		history = append([]int32(nil), m.seq...)
	}
	res.StopReason = "length"
	for len(res.Generated) < o.MaxTokens {
		id := lastNext
		if o.Sampler != nil {
			var err error
			if id, err = o.Sampler.Sample(last, history); err != nil {
				return err
			}
		}
		res.Generated = append(res.Generated, id)
		if history != nil {
			history = append(history, id)
		}
		if o.OnToken != nil {
			if err := o.OnToken(id); errors.Is(err, ErrStop) {
				res.StopReason = "stop"
				break
			} else if err != nil {
				return err
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
		if g, ok := b.(GreedyStepper); ok && o.Sampler == nil {
			next, err := m.greedyStep(g, id)
			if err != nil {
				return err
			}
			m.seq = append(m.seq, id)
			lastNext = next
			continue
		}
		logits, next, err := b.Forward([]int32{id})
		if err == nil && !(logits == nil && o.Sampler == nil && len(next) == 1) {
			// (Greedy decoding needs only next: a backend may skip the logits.)
			err = checkStep(logits, next, 1, V)
		}
		if err != nil {
			return fmt.Errorf("decode at position %d: %w", b.Pos(), err)
		}
		if logits != nil {
			if e := checkFinite(fmt.Sprintf("decode at position %d", b.Pos()-1), logits, 1, V, false); e != nil {
				return locate(b, m.stepsThrough([]int32{id}), e)
			}
		}
		m.seq = append(m.seq, id)
		last, lastNext = logits, next[0]
	}
	return nil
}

// GreedyStepper is implemented by a backend that can feed one token and
// return only the argmax, copying no logits (the GPU: 400 KB a step at a
// 100k vocabulary). finite is false when the logit the argmax picked is
// NaN or infinite, which a NaN or +Inf anywhere in the row makes it;
// StepLogits then returns that step's row. Greedy decoding uses it.
type GreedyStepper interface {
	ForwardArgmax(id int32) (next int32, finite bool, err error)
	StepLogits() ([]float32, error)
}

// greedyStep feeds id through g and returns the argmax, or the
// non-finite error Forward's path would have reported for the step.
func (m *Model) greedyStep(g GreedyStepper, id int32) (int32, error) {
	b, V := m.Backend, m.Config.VocabSize
	next, finite, err := g.ForwardArgmax(id)
	if err != nil {
		return 0, fmt.Errorf("decode at position %d: %w", b.Pos(), err)
	}
	if next < 0 || int(next) >= V {
		return 0, fmt.Errorf("decode at position %d: the backend returned token %d outside the vocabulary [0, %d)", b.Pos()-1, next, V)
	}
	if finite {
		return next, nil
	}
	logits, err := g.StepLogits()
	if err != nil {
		return 0, fmt.Errorf("decode at position %d: %w", b.Pos(), err)
	}
	if err := checkStep(logits, []int32{next}, 1, V); err != nil {
		return 0, fmt.Errorf("decode at position %d: %w", b.Pos(), err)
	}
	step := fmt.Sprintf("decode at position %d", b.Pos()-1)
	if e := checkFinite(step, logits, 1, V, false); e != nil {
		return 0, locate(b, m.stepsThrough([]int32{id}), e)
	}
	return 0, fmt.Errorf("%s: the backend reported a non-finite logit the row does not hold", step)
}

// stepsThrough is what the backend has been fed, as steps to feed again,
// through part (fed last, not yet in m.seq): to locate non-finite logits.
func (m *Model) stepsThrough(part []int32) [][]int32 {
	if len(m.seq) == 0 {
		return [][]int32{part}
	}
	return [][]int32{append([]int32(nil), m.seq...), part}
}

// checkStep checks that a backend returned T rows of V logits and T ids.
// LastRowForwarder is implemented by a backend that can feed tokens and
// copy only the last token's row of logits [V], with every token's argmax
// [T]: the GPU, where a prompt chunk of 2048 tokens has 822 MB of f32
// logits. Prefill uses it unless every row's logits are asked for
// (GenOptions.Logits).
type LastRowForwarder interface {
	ForwardLast(tokens []int32) (last []float32, next []int32, err error)
}

// TailForwarder is implemented by a backend that can feed tokens computing,
// after the last layer's attention, only what the last token needs (the GPU:
// the last layer's MLP and the LM head on one row instead of every row),
// returning the last row of logits [V] and its argmax. Prefill uses it with
// GenOptions.LastOnly.
type TailForwarder interface {
	ForwardTail(tokens []int32) (last []float32, next int32, err error)
}

// prefillStep feeds part and returns its logits, every row's with all, else
// at least the last row's ([V] when the backend copies only that one), and
// every row's argmax (the last row's alone with lastOnly, where the backend
// is a TailForwarder), checked for their sizes.
func (m *Model) prefillStep(part []int32, all, lastOnly bool) ([]float32, []int32, error) {
	b, V := m.Backend, m.Config.VocabSize
	if tf, ok := b.(TailForwarder); ok && lastOnly && !all && len(part) > 1 {
		last, next, err := tf.ForwardTail(part)
		if err != nil {
			return nil, nil, err
		}
		if len(last) != V {
			return nil, nil, fmt.Errorf("the backend returned %d logits for the last of %d tokens; expected vocab %d", len(last), len(part), V)
		}
		return last, []int32{next}, nil
	}
	if lr, ok := b.(LastRowForwarder); ok && !all && len(part) > 1 {
		last, next, err := lr.ForwardLast(part)
		if err != nil {
			return nil, nil, err
		}
		if len(last) != V || len(next) != len(part) {
			return nil, nil, fmt.Errorf("the backend returned %d logits and %d next ids for the last of %d tokens; expected vocab %d and %d",
				len(last), len(next), len(part), V, len(part))
		}
		return last, next, nil
	}
	logits, next, err := b.Forward(part)
	if err != nil {
		return nil, nil, err
	}
	return logits, next, checkStep(logits, next, len(part), V)
}

func checkStep(logits []float32, next []int32, T, V int) error {
	if len(logits) != T*V || len(next) != T {
		return fmt.Errorf("the backend returned %d logits and %d next ids for %d tokens; expected %d x vocab %d and %d",
			len(logits), len(next), T, T, V, T)
	}
	return nil
}
