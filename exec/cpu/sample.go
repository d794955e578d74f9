package cpu

import (
	"container/heap"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// SamplerConfig chooses how the next token is drawn from the logits. A
// logit bias is added first; the other steps and their order are those of
// Hugging Face generate: repetition
// penalty, then (when sampling) temperature, top-k, top-p, min-p, and a draw
// from the softmax of what is left. OpenAI's presence and frequency
// penalties, which transformers lacks, come right after the repetition
// penalty, as in vLLM.
type SamplerConfig struct {
	Temperature       float64 // <= 0: greedy (argmax, first maximum on ties)
	TopK              int     // keep the k highest logits (ties with the k-th kept); 0: off
	TopP              float64 // keep the smallest prefix of mass >= TopP; 0 or 1: off
	MinP              float64 // drop tokens with p < MinP * max p; 0: off
	RepetitionPenalty float64 // divide positive, multiply negative logits of seen tokens; 0 or 1: off
	// PresencePenalty is subtracted once from the logit of every token
	// generated so far, FrequencyPenalty once per occurrence (OpenAI's
	// definitions; both 0: off). Generated means history after PromptLen.
	PresencePenalty  float64
	FrequencyPenalty float64
	PromptLen        int    // the prompt's tokens at the start of every history
	Seed             uint64 // the draws are a deterministic function of the seed
	// LogitBias is added to the logits of its token ids (OpenAI's
	// logit_bias: -100 bans a token, 100 forces it).
	LogitBias map[int32]float64
}

// Sampler draws tokens; it is not safe for concurrent use.
type Sampler struct {
	cfg     SamplerConfig
	rng     *rand.Rand
	scores  []float32
	seen    []uint32 // generation stamp per token id, for the penalty
	stamp   uint32
	kept    []int32
	weights []float64
	counts  []int32 // occurrences per token id in the generated tokens (zero between calls)
	biasIDs []int32 // LogitBias, sorted by id
	biasAdd []float32
}

// NewSampler validates cfg and returns a sampler seeded with cfg.Seed.
func NewSampler(cfg SamplerConfig) (*Sampler, error) {
	switch {
	case math.IsNaN(cfg.Temperature) || math.IsInf(cfg.Temperature, 0):
		return nil, fmt.Errorf("sampler: temperature %g must be finite", cfg.Temperature)
	case cfg.TopK < 0:
		return nil, fmt.Errorf("sampler: top-k %d must not be negative", cfg.TopK)
	case !(cfg.TopP >= 0 && cfg.TopP <= 1):
		return nil, fmt.Errorf("sampler: top-p %g must be in [0, 1]", cfg.TopP)
	case !(cfg.MinP >= 0 && cfg.MinP <= 1):
		return nil, fmt.Errorf("sampler: min-p %g must be in [0, 1]", cfg.MinP)
	case !(cfg.RepetitionPenalty >= 0) || math.IsInf(cfg.RepetitionPenalty, 0):
		return nil, fmt.Errorf("sampler: repetition penalty %g must be positive and finite", cfg.RepetitionPenalty)
	case !(math.Abs(cfg.PresencePenalty) <= 2):
		return nil, fmt.Errorf("sampler: presence penalty %g must be in [-2, 2]", cfg.PresencePenalty)
	case !(math.Abs(cfg.FrequencyPenalty) <= 2):
		return nil, fmt.Errorf("sampler: frequency penalty %g must be in [-2, 2]", cfg.FrequencyPenalty)
	case cfg.PromptLen < 0:
		return nil, fmt.Errorf("sampler: prompt length %d must not be negative", cfg.PromptLen)
	}
	s := &Sampler{cfg: cfg}
	for id, b := range cfg.LogitBias {
		if id < 0 || !(math.Abs(b) <= 100) {
			return nil, fmt.Errorf("sampler: logit bias %g for token %d: ids must not be negative, biases must be in [-100, 100]", b, id)
		}
		s.biasIDs = append(s.biasIDs, id)
	}
	slices.Sort(s.biasIDs)
	for _, id := range s.biasIDs {
		s.biasAdd = append(s.biasAdd, float32(cfg.LogitBias[id]))
	}
	s.Reseed(cfg.Seed)
	return s, nil
}

// Reseed restarts the random stream as if the sampler were new with seed.
func (s *Sampler) Reseed(seed uint64) {
	s.rng = rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
}

// Greedy reports whether the sampler takes the argmax.
func (s *Sampler) Greedy() bool { return s.cfg.Temperature <= 0 }

// Argmax reports whether the sampler takes the argmax of the logits as
// they are: greedy with no bias and no penalty. A caller may then leave
// the choice to the backend's own argmax (engine.GenOptions.Sampler nil).
func (s *Sampler) Argmax() bool {
	c := s.cfg
	return s.Greedy() && (c.RepetitionPenalty == 0 || c.RepetitionPenalty == 1) &&
		c.PresencePenalty == 0 && c.FrequencyPenalty == 0 && len(c.LogitBias) == 0
}

// Sample returns the next token for logits [V]. history holds the tokens so
// far (prompt and generated), used by the repetition penalty only.
func (s *Sampler) Sample(logits []float32, history []int32) (int32, error) {
	V := len(logits)
	if V == 0 {
		return 0, fmt.Errorf("sampler: no logits")
	}
	sc := grow(&s.scores, V)
	copy(sc, logits)
	for i, id := range s.biasIDs {
		if int(id) >= V {
			return 0, fmt.Errorf("sampler: logit bias for token %d outside the vocabulary [0, %d)", id, V)
		}
		sc[id] += s.biasAdd[i]
	}
	if p := float32(s.cfg.RepetitionPenalty); p != 0 && p != 1 {
		if err := s.penalise(sc, history, p); err != nil {
			return 0, err
		}
	}
	if s.cfg.PresencePenalty != 0 || s.cfg.FrequencyPenalty != 0 {
		if err := s.penaliseGenerated(sc, history); err != nil {
			return 0, err
		}
	}
	if s.Greedy() {
		return int32(argmax(sc)), nil
	}
	for i, x := range sc {
		if x != x {
			return 0, fmt.Errorf("sampler: logit %d is NaN", i)
		}
	}
	// A positive temperature keeps the order, so top-k selects on the raw
	// logits; the temperature divides their differences from the best in
	// float64, where no positive temperature underflows to zero (float32
	// logits divided by 1e-50 became ±Inf, and NaN weights drew garbage).
	kept := s.topK(sc)
	// Probabilities of the kept tokens, best first, unnormalised.
	w := grow(&s.weights, len(kept))
	top := float64(sc[kept[0]])
	if math.IsInf(top, -1) {
		return 0, fmt.Errorf("sampler: every logit is -Inf")
	}
	temp := s.cfg.Temperature
	total := 0.0
	for i, id := range kept {
		w[i] = math.Exp((float64(sc[id]) - top) / temp)
		total += w[i]
	}
	for len(w) > 1 && w[len(w)-1] == 0 { // -Inf logits, or too far below the best
		kept, w = kept[:len(kept)-1], w[:len(w)-1]
	}
	if p := s.cfg.TopP; p > 0 && p < 1 {
		// Keep a token while the mass ranked above it is below p.
		cum := 0.0
		for i := range w {
			if i > 0 && cum >= p*total {
				kept, w = kept[:i], w[:i]
				break
			}
			cum += w[i]
		}
	}
	if mp := s.cfg.MinP; mp > 0 {
		// Normalisation cancels: compare with min_p times the best weight.
		lim := mp * w[0]
		n := 1
		for n < len(w) && w[n] >= lim {
			n++
		}
		kept, w = kept[:n], w[:n]
	}
	total = 0
	for _, x := range w {
		total += x
	}
	u := s.rng.Float64() * total
	for i, x := range w {
		u -= x
		if u < 0 {
			return kept[i], nil
		}
	}
	return kept[len(kept)-1], nil // rounding left u at the very end
}

// penalise applies the repetition penalty once to every distinct id of
// history, as transformers' RepetitionPenaltyLogitsProcessor does.
func (s *Sampler) penalise(sc []float32, history []int32, p float32) error {
	if len(s.seen) != len(sc) {
		s.seen = make([]uint32, len(sc))
		s.stamp = 0
	}
	s.stamp++
	if s.stamp == 0 {
		clear(s.seen)
		s.stamp = 1
	}
	for _, id := range history {
		if id < 0 || int(id) >= len(sc) {
			return fmt.Errorf("sampler: history token %d is outside the vocabulary [0, %d)", id, len(sc))
		}
		if s.seen[id] == s.stamp {
			continue
		}
		s.seen[id] = s.stamp
		if x := sc[id]; x < 0 {
			sc[id] = x * p
		} else {
			sc[id] = x / p
		}
	}
	return nil
}

// penaliseGenerated subtracts the presence and frequency penalties from the
// logits of the tokens generated so far: history after the prompt.
func (s *Sampler) penaliseGenerated(sc []float32, history []int32) error {
	if s.cfg.PromptLen > len(history) {
		return fmt.Errorf("sampler: the history has %d tokens, fewer than the prompt's %d", len(history), s.cfg.PromptLen)
	}
	gen := history[s.cfg.PromptLen:]
	if len(s.counts) != len(sc) {
		s.counts = make([]int32, len(sc))
	}
	for _, id := range gen {
		if id < 0 || int(id) >= len(sc) {
			clear(s.counts)
			return fmt.Errorf("sampler: generated token %d is outside the vocabulary [0, %d)", id, len(sc))
		}
		s.counts[id]++
	}
	pres, freq := s.cfg.PresencePenalty, s.cfg.FrequencyPenalty
	for _, id := range gen {
		if c := s.counts[id]; c > 0 {
			sc[id] -= float32(pres + freq*float64(c))
			s.counts[id] = 0 // once per distinct id; leaves counts zero
		}
	}
	return nil
}

// topK returns the ids of the kept tokens sorted best first (higher score,
// then lower id). With top-k on, a token is kept when its score is at least
// the k-th highest, as in transformers, so ties at the boundary all stay.
func (s *Sampler) topK(sc []float32) []int32 {
	kept := s.kept[:0]
	if k := s.cfg.TopK; k > 0 && k < len(sc) {
		h := minHeap(make([]float32, 0, k))
		for _, x := range sc {
			if len(h) < k {
				heap.Push(&h, x)
			} else if x > h[0] {
				h[0] = x
				heap.Fix(&h, 0)
			}
		}
		lim := h[0]
		for i, x := range sc {
			if x >= lim {
				kept = append(kept, int32(i))
			}
		}
	} else {
		for i := range sc {
			kept = append(kept, int32(i))
		}
	}
	slices.SortFunc(kept, func(a, b int32) int {
		switch {
		case sc[a] > sc[b]:
			return -1
		case sc[a] < sc[b]:
			return 1
		}
		return int(a - b)
	})
	s.kept = kept
	return kept
}

type minHeap []float32

func (h minHeap) Len() int           { return len(h) }
func (h minHeap) Less(i, j int) bool { return h[i] < h[j] }
func (h minHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *minHeap) Push(x any)        { *h = append(*h, x.(float32)) }
func (h *minHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

func grow[T any](buf *[]T, n int) []T {
	if cap(*buf) < n {
		*buf = make([]T, n)
	}
	*buf = (*buf)[:n]
	return *buf
}
