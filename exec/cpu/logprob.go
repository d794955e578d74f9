package cpu

import (
	"fmt"
	"math"
	"slices"
	"sync"
)

// TokenLogprob is a token with its log-probability.
type TokenLogprob struct {
	ID      int32
	Logprob float64
}

// StepLogprobs is a token's log-probability at a step, with the step's
// most likely tokens, best first.
type StepLogprobs struct {
	TokenLogprob
	Top []TokenLogprob
}

// LogprobsOf returns id's log-probability under logits (their log-softmax,
// in float64) and the top most likely tokens.
func LogprobsOf(logits []float32, id int32, top int) (StepLogprobs, error) {
	if id < 0 || int(id) >= len(logits) {
		return StepLogprobs{}, fmt.Errorf("logprobs: token %d is outside the vocabulary [0, %d)", id, len(logits))
	}
	lse, err := LogSumExp(logits)
	if err != nil {
		return StepLogprobs{}, err
	}
	return StepLogprobs{TokenLogprob{id, float64(logits[id]) - lse}, TopLogprobs(logits, top, lse)}, nil
}

// LogprobSampler wraps a sampler (an engine.Sampler) and records each
// drawn token's StepLogprobs, with Top alternatives. One goroutine may
// sample while another takes the records.
type LogprobSampler struct {
	Inner interface {
		Sample(logits []float32, history []int32) (int32, error)
		Greedy() bool
	}
	Top int

	mu   sync.Mutex
	recs []StepLogprobs
}

func (l *LogprobSampler) Greedy() bool { return l.Inner.Greedy() }

// Sample draws with Inner and records the drawn token's log-probability.
func (l *LogprobSampler) Sample(logits []float32, history []int32) (int32, error) {
	id, err := l.Inner.Sample(logits, history)
	if err != nil {
		return id, err
	}
	rec, err := LogprobsOf(logits, id, l.Top)
	if err != nil {
		return id, err
	}
	l.mu.Lock()
	l.recs = append(l.recs, rec)
	l.mu.Unlock()
	return id, nil
}

// Take removes and returns the oldest record; ok is false if there is none.
func (l *LogprobSampler) Take() (rec StepLogprobs, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.recs) == 0 {
		return StepLogprobs{}, false
	}
	rec = l.recs[0]
	l.recs = l.recs[1:]
	return rec, true
}

// Records returns the records not taken, oldest first.
func (l *LogprobSampler) Records() []StepLogprobs {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.recs)
}

// LogSumExp is log(sum(exp(logits))) in float64. A NaN or +Inf logit, or
// every logit -Inf, has no distribution to report.
func LogSumExp(logits []float32) (float64, error) {
	m := math.Inf(-1)
	for i, x := range logits {
		switch {
		case x != x:
			return 0, fmt.Errorf("logprobs: logit %d is NaN", i)
		case math.IsInf(float64(x), 1):
			return 0, fmt.Errorf("logprobs: logit %d is +Inf", i)
		}
		m = max(m, float64(x))
	}
	if math.IsInf(m, -1) {
		return 0, fmt.Errorf("logprobs: every logit is -Inf")
	}
	s := 0.0
	for _, x := range logits {
		s += math.Exp(float64(x) - m)
	}
	return m + math.Log(s), nil
}

// TopLogprobs returns the n most likely tokens, best first (ties: lower id
// first), by insertion into a short sorted list: n is at most 20.
func TopLogprobs(logits []float32, n int, lse float64) []TokenLogprob {
	n = min(n, len(logits))
	if n <= 0 {
		return nil
	}
	best := make([]int32, 0, n)
	for i, x := range logits {
		if len(best) == n && x <= logits[best[n-1]] {
			continue
		}
		j := len(best)
		if j < n {
			best = append(best, 0)
		} else {
			j--
		}
		for j > 0 && x > logits[best[j-1]] {
			best[j] = best[j-1]
			j--
		}
		best[j] = int32(i)
	}
	out := make([]TokenLogprob, len(best))
	for k, id := range best {
		out[k] = TokenLogprob{id, float64(logits[id]) - lse}
	}
	return out
}
