package gpu

import (
	"fmt"

	"lagc/lower"
)

// Chunked prefill: the prompt runs through the prefill schedule in steps of
// at most the plan's prefill size. Each chunk's attention reads the cache
// for earlier positions and the chunk's own keys directly; afterwards a
// full layer appends the chunk to its linear cache and a sliding layer
// compacts the chunk's last window of keys into its ring, so the decode
// steps that follow find exactly what decode-only would have written.

// prefillTokens feeds tokens from position e.next. It returns the rows of
// logits asked for (all [T*V], the last [V], or none) and the argmax of
// every row; with lastOnly (rows not all), of the last row alone: every
// chunk but the last skips its tail and the last runs it on its last row
// (lower.AtTail).
func (e *Executor) prefillTokens(tokens []int32, rows logitRows, lastOnly bool) ([]float32, []int32, error) {
	if lastOnly && rows == logitsAll {
		return nil, nil, fmt.Errorf("gpu: every row's logits from the last row's tail")
	}
	chunk := e.plan.Prefill.Tokens
	var allLogits []float32
	if rows == logitsAll {
		allLogits = make([]float32, 0, len(tokens)*e.V)
	}
	next := make([]int32, 0, len(tokens))
	for s := 0; s < len(tokens); s += chunk {
		part := tokens[s:min(s+chunk, len(tokens))]
		last := s+len(part) == len(tokens)
		tail := chunkTail(lastOnly, last)
		lg, nx, err := e.prefillChunk(part, rows.ofChunk(last), tail)
		if err != nil {
			return nil, nil, fmt.Errorf("prefill at position %d: %w", e.next, err)
		}
		allLogits = append(allLogits, lg...)
		next = append(next, nx...)
	}
	return allLogits, next, nil
}

// chunkTail is the rows a prompt chunk's tail runs on (lower.AtTail): every
// row, or with lastOnly (only the prompt's last row is wanted) its last row
// in the prompt's last chunk and none in the others.
func chunkTail(lastOnly, last bool) lower.Tail {
	switch {
	case !lastOnly:
		return lower.TailAll
	case last:
		return lower.TailLast
	}
	return lower.TailNone
}

func (e *Executor) prefillChunk(part []int32, rows logitRows, tail lower.Tail) ([]float32, []int32, error) {
	T := len(part)
	if err := e.setScalars(part); err != nil {
		return nil, nil, err
	}
	e.devState = false
	p, err := e.prefillTailAt(T, tail)
	if err != nil {
		return nil, nil, err
	}
	if err := e.run(p); err != nil {
		return nil, nil, err
	}
	lg, nx, err := e.readOut(p, T, rows)
	if err != nil {
		return nil, nil, err
	}
	if e.prof != nil {
		if err := e.prof.collect(lower.Prefill); err != nil {
			return nil, nil, err
		}
	}
	e.next += T
	return lg, nx, nil
}

// Prefill feeds tokens without copying logits to the host (benchmarks and
// callers that need only the argmax); it returns the argmax of every row.
func (e *Executor) Prefill(tokens []int32) ([]int32, error) {
	return e.prefillArgmax(tokens, false)
}

// PrefillTail is Prefill computing, after the last layer's attention,
// only what the last token needs (as ForwardTail): it returns the last
// token's argmax, the token a greedy generation feeds next.
func (e *Executor) PrefillTail(tokens []int32) (int32, error) {
	if len(tokens) == 0 {
		return 0, fmt.Errorf("gpu: prefill: no tokens")
	}
	next, err := e.prefillArgmax(tokens, true)
	if err != nil {
		return 0, err
	}
	if len(next) != 1 {
		e.broken = true
		return 0, fmt.Errorf("gpu: prefill: %d argmax values for the last token", len(next))
	}
	return next[0], nil
}

// prefillArgmax prefills tokens without copying logits (tail: the last
// row only after the last attention) and returns the argmax values; a
// failure marks the sequence broken.
func (e *Executor) prefillArgmax(tokens []int32, tail bool) ([]int32, error) {
	e.settle()
	if e.next+len(tokens) > e.plan.MaxContext {
		return nil, fmt.Errorf("gpu: %d tokens at position %d exceed the context length %d", len(tokens), e.next, e.plan.MaxContext)
	}
	_, next, err := e.prefillTokens(tokens, logitsNone, tail)
	if err != nil {
		e.broken = true
	}
	return next, err
}

// DecodeNext runs one decode step without copying logits and returns the
// argmax: the token a greedy generation feeds next.
func (e *Executor) DecodeNext(tok int32) (int32, error) {
	if e.next >= e.plan.MaxContext {
		return 0, fmt.Errorf("gpu: position %d is past the context length %d", e.next, e.plan.MaxContext)
	}
	if e.greedyPath() {
		if err := e.canFeed([]int32{tok}); err != nil {
			return 0, err
		}
		next, _, err := e.greedyStep(tok)
		if err != nil {
			e.broken = true
		}
		return next, err
	}
	next, _, err := e.decodeStep(tok, false)
	if err != nil {
		e.broken = true
	}
	return next, err
}

// DecodeQueued runs n greedy decode steps from tok like n DecodeNext
// calls, but queues them back to back and reads only the last step's
// argmax: each step feeds itself the token the step before chose
// (step_next keeps it on the device), so no host round trip separates
// them. lagc bench times it beside DecodeNext to show what the host's
// reads between steps cost. The tokens in between are not returned.
func (e *Executor) DecodeQueued(tok int32, n int) (int32, error) {
	if n < 1 {
		return 0, fmt.Errorf("gpu: decode: %d queued steps (at least 1)", n)
	}
	e.settle()
	if err := e.canFeed([]int32{tok}); err != nil {
		return 0, err
	}
	if e.next+n > e.plan.MaxContext {
		return 0, fmt.Errorf("gpu: decode: %d steps at position %d exceed the context length %d", n, e.next, e.plan.MaxContext)
	}
	if e.prof != nil { // a profile collects each step
		for i := 0; i < n; i++ {
			var err error
			if tok, err = e.DecodeNext(tok); err != nil {
				return 0, err
			}
		}
		return tok, nil
	}
	if !e.devState || tok != e.lastNext {
		if err := e.setScalars([]int32{tok}); err != nil {
			e.broken = true
			return 0, err
		}
	}
	for i := 0; i < n; i++ {
		if err := e.launchDecode(); err != nil {
			e.broken = true
			return 0, err
		}
	}
	_, next, err := e.readOut(e.decode, 1, logitsNone)
	if err != nil {
		e.broken = true
		return 0, err
	}
	e.next += n
	e.rb.kept = true // the last step's row is BaseKept's
	e.devState, e.lastNext = true, next[0]
	return next[0], nil
}
