// Package sched is lagc's continuous-batching scheduler: it admits requests
// into a backend's fixed sequence slots as slots free up, and runs steps
// that mix one decode row of every running sequence with prefill chunks of
// newly admitted prompts, within a token budget per step.
//
// Slots, not pages: each slot owns its KV caches (linear for full layers, a
// ring of `window` for sliding ones). That is simple, keeps every shape
// fixed (one CUDA graph per batch-size bucket on the GPU) and wastes little
// at the small batches one GPU serves; paging pays off where fragmentation
// at large batches does. A finished sequence's slot keeps its cache, and a
// later prompt that starts with the same tokens continues from it (prefix
// reuse: a repeated system prompt or a chat continued turn by turn).
//
// Every row of a step is computed as if its sequence ran alone (the
// backend's contract), and each request samples with its own sampler, so
// what a request gets does not depend on what else is running.
package sched

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"lagc/engine"
)

// Errors of Submit.
var (
	ErrQueueFull = errors.New("the request queue is full")
	ErrClosed    = errors.New("the scheduler is shut down")
)

// ContextError says a prompt does not fit the context.
type ContextError struct{ Prompt, Context int }

func (e *ContextError) Error() string {
	return fmt.Sprintf("the prompt has %d tokens; the context holds %d", e.Prompt, e.Context)
}

// Config tunes a scheduler.
type Config struct {
	// MaxQueue bounds the requests waiting for a free slot; Submit returns
	// ErrQueueFull beyond it. 0: 4 x the slots.
	MaxQueue int
	// Budget is the tokens of one step: a decode row per running sequence,
	// then prefill chunks. Prefill always gets at least a quarter of it, so
	// prompts progress while many sequences decode. 0: 256.
	Budget int
	// Vocab is the model's vocabulary size; prompt ids must be below it.
	Vocab int
	// OnStep, if set, is called after every step, and OnToken for every
	// token with the time since the request was submitted (the first) or
	// since its previous token. Both run on the scheduler's goroutine: keep
	// them short.
	OnStep  func(StepStats)
	OnToken func(first bool, latency time.Duration)
}

// StepStats describe one step.
type StepStats struct {
	Sequences     int // segments in the step
	DecodeRows    int // sequences generating
	PrefillTokens int // prompt tokens fed
	Duration      time.Duration
}

// Request is one generation.
type Request struct {
	Prompt    []int32
	MaxTokens int                 // tokens to generate, > 0 (or 0 with PromptRow: score the prompt only)
	Sampler   engine.Sampler      // nil: greedy (the backend's argmax)
	Stop      func(id int32) bool // end of generation; nil: never
	// PromptRow, if set, receives the logits of every prompt position but
	// the last (row i predicts Prompt[i+1]), in order, on the scheduler's
	// goroutine. Such a prompt is fed from its start (no prefix reuse), in
	// steps of its own that read every row (Batcher.Step), so the other
	// sequences' rows are computed as before; while they have rows to run,
	// those steps alternate with theirs.
	PromptRow func(i int, logits []float32)
}

// Scheduler runs requests on a Batcher. Its methods are safe for concurrent
// use; one goroutine of its own drives the backend.
type Scheduler struct {
	b   engine.Batcher
	cfg Config

	mu      sync.Mutex
	waiting []*seq
	running int // admitted and not finished
	closed  bool
	wakeC   chan struct{}
	done    chan struct{}

	// Owned by the loop goroutine.
	slots []slotState
	tick  int64
	// scored: the last step was a prompt's alone (PromptRow); the next
	// one is for the others, if any have rows to run.
	scored bool
}

// slotState is what the loop knows of a slot: its sequence (nil when free)
// and the tokens its KV holds, for prefix reuse.
type slotState struct {
	seq     *seq
	tokens  []int32
	lastUse int64
}

// seq is a request in flight.
type seq struct {
	req     Request
	stream  *Stream
	slot    int
	fed     int       // prompt tokens in the slot
	history []int32   // prompt and generated tokens
	pending bool      // the last generated token still has to be fed
	made    int       // tokens generated
	last    time.Time // when the request was submitted, then its latest token
}

// New starts a scheduler over b's slots. Close stops it.
func New(b engine.Batcher, cfg Config) (*Scheduler, error) {
	if b.Slots() <= 0 {
		return nil, fmt.Errorf("scheduler: the backend has %d sequence slots", b.Slots())
	}
	if cfg.MaxQueue < 0 || cfg.Budget < 0 || cfg.Vocab <= 0 {
		return nil, fmt.Errorf("scheduler: max queue %d and budget %d must not be negative, vocab %d must be positive",
			cfg.MaxQueue, cfg.Budget, cfg.Vocab)
	}
	if cfg.MaxQueue == 0 {
		cfg.MaxQueue = 4 * b.Slots()
	}
	if cfg.Budget == 0 {
		cfg.Budget = 256
	}
	s := &Scheduler{b: b, cfg: cfg, wakeC: make(chan struct{}, 1), done: make(chan struct{}),
		slots: make([]slotState, b.Slots())}
	for i := range s.slots {
		b.ResetSlot(i)
	}
	go s.loop()
	return s, nil
}

// Submit queues a request. The stream ends when ctx does (a client that
// went away), when Cancel is called, or when generation finishes.
func (s *Scheduler) Submit(ctx context.Context, r Request) (*Stream, error) {
	if len(r.Prompt) == 0 {
		return nil, fmt.Errorf("the prompt is empty")
	}
	for i, id := range r.Prompt {
		if id < 0 || int(id) >= s.cfg.Vocab {
			return nil, fmt.Errorf("prompt id %d at index %d is outside the vocabulary [0, %d)", id, i, s.cfg.Vocab)
		}
	}
	if len(r.Prompt) > s.b.MaxPos() {
		return nil, &ContextError{Prompt: len(r.Prompt), Context: s.b.MaxPos()}
	}
	if r.MaxTokens < 0 || (r.MaxTokens == 0 && r.PromptRow == nil) {
		return nil, fmt.Errorf("max tokens must be positive (or 0 to score the prompt only), got %d", r.MaxTokens)
	}
	st := newStream(ctx, s.wake)
	q := &seq{req: r, stream: st, slot: -1, history: append([]int32(nil), r.Prompt...), last: time.Now()}
	s.mu.Lock()
	switch {
	case s.closed:
		s.mu.Unlock()
		return nil, ErrClosed
	case s.running+len(s.waiting) >= len(s.slots)+s.cfg.MaxQueue:
		s.mu.Unlock()
		return nil, ErrQueueFull
	}
	s.waiting = append(s.waiting, q)
	s.mu.Unlock()
	s.wake()
	return st, nil
}

// Limits returns the sequence slots and how many requests may wait for
// one (Config.MaxQueue, or its default).
func (s *Scheduler) Limits() (slots, queue int) { return len(s.slots), s.cfg.MaxQueue }

// Load returns the requests waiting for a slot and those running.
func (s *Scheduler) Load() (waiting, running int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.waiting), s.running
}

// Close cancels every request, stops the scheduler and waits for its
// goroutine. Submit fails afterwards.
func (s *Scheduler) Close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.wake()
	<-s.done
}

func (s *Scheduler) wake() {
	select {
	case s.wakeC <- struct{}{}:
	default:
	}
}

func (s *Scheduler) loop() {
	defer close(s.done)
	for {
		s.mu.Lock()
		closed := s.closed
		s.mu.Unlock()
		if closed {
			s.shutdown()
			return
		}
		s.admit()
		segs, seqs := s.plan()
		if len(segs) == 0 {
			if waiting, _ := s.Load(); waiting == 0 {
				<-s.wakeC
			}
			continue // plan may have freed slots for those waiting
		}
		s.step(segs, seqs)
	}
}

// shutdown cancels everything left.
func (s *Scheduler) shutdown() {
	s.mu.Lock()
	waiting := s.waiting
	s.waiting = nil
	s.mu.Unlock()
	for _, q := range waiting {
		q.stream.finish(FinishCanceled, nil)
	}
	for i := range s.slots {
		if q := s.slots[i].seq; q != nil {
			s.release(q, FinishCanceled, nil)
		}
	}
}

// admit moves waiting requests into free slots, oldest first, dropping
// those already cancelled.
func (s *Scheduler) admit() {
	s.mu.Lock()
	defer s.mu.Unlock()
	kept := s.waiting[:0]
	for _, q := range s.waiting {
		if q.stream.ctx.Err() != nil {
			q.stream.finish(FinishCanceled, nil)
			continue
		}
		slot := s.pickSlot(q.req.Prompt, q.req.PromptRow == nil)
		if slot < 0 {
			kept = append(kept, q)
			continue
		}
		q.slot = slot
		s.slots[slot].seq = q
		s.running++
		q.fed = s.b.SlotLen(slot)
		s.slots[slot].tokens = s.slots[slot].tokens[:q.fed]
		q.stream.setCached(q.fed)
	}
	clear(s.waiting[len(kept):])
	s.waiting = kept
}

// pickSlot returns a free slot for prompt, rewound to the longest prefix of
// prompt it holds (at most len-1 tokens: the last one is fed to get the
// logits), or reset; -1 when none is free. Without a reusable prefix (or
// reuse) it takes the least recently used slot, keeping recent caches for
// reuse.
func (s *Scheduler) pickSlot(prompt []int32, reuse bool) int {
	type match struct{ slot, n int }
	var matches []match
	lru := -1
	for i := range s.slots {
		st := &s.slots[i]
		if st.seq != nil {
			continue
		}
		if n := commonPrefix(st.tokens, prompt[:len(prompt)-1]); n > 0 && reuse {
			matches = append(matches, match{i, n})
		}
		if lru < 0 || st.lastUse < s.slots[lru].lastUse {
			lru = i
		}
	}
	// Longest first; a failed Rewind changes nothing.
	slices.SortStableFunc(matches, func(a, b match) int { return b.n - a.n })
	for _, m := range matches {
		if s.b.Rewind(m.slot, m.n) == nil {
			s.slots[m.slot].tokens = s.slots[m.slot].tokens[:m.n]
			return m.slot
		}
	}
	if lru >= 0 {
		s.b.ResetSlot(lru)
		s.slots[lru].tokens = nil
	}
	return lru
}

func commonPrefix(a, b []int32) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// plan builds the next step: a decode row for every sequence with a token
// to feed, then prefill chunks in admission order within the budget. It
// first finishes the sequences whose request was cancelled.
func (s *Scheduler) plan() ([]engine.Segment, []*seq) {
	var segs []engine.Segment
	var seqs []*seq
	var prefill []*seq
	for i := range s.slots {
		q := s.slots[i].seq
		switch {
		case q == nil:
		case q.stream.ctx.Err() != nil:
			s.release(q, FinishCanceled, nil)
		case q.pending:
			segs = append(segs, engine.Segment{Slot: q.slot, Tokens: q.history[len(q.history)-1:]})
			seqs = append(seqs, q)
		default:
			prefill = append(prefill, q)
		}
	}
	// A prompt whose every row is read runs alone, in a step that reads
	// every row, every other step while others have rows to run.
	others := len(segs) > 0
	for _, q := range prefill {
		others = others || q.req.PromptRow == nil
	}
	if !s.scored || !others {
		for _, q := range prefill {
			if q.req.PromptRow != nil {
				s.scored = true
				n := min(len(q.req.Prompt)-q.fed, max(s.cfg.Budget, 1))
				return []engine.Segment{{Slot: q.slot, Tokens: q.req.Prompt[q.fed : q.fed+n]}}, []*seq{q}
			}
		}
	}
	s.scored = false
	room := max(s.cfg.Budget-len(segs), s.cfg.Budget/4, 1)
	for _, q := range prefill {
		if room == 0 {
			break
		}
		if q.req.PromptRow != nil {
			continue // in a step of its own
		}
		n := min(len(q.req.Prompt)-q.fed, room)
		segs = append(segs, engine.Segment{Slot: q.slot, Tokens: q.req.Prompt[q.fed : q.fed+n]})
		seqs = append(seqs, q)
		room -= n
	}
	return segs, seqs
}

// step runs one forward pass and hands each sequence its next token.
func (s *Scheduler) step(segs []engine.Segment, seqs []*seq) {
	t0 := time.Now()
	T, decode := 0, 0
	for i, sg := range segs {
		T += len(sg.Tokens)
		if seqs[i].pending {
			decode++
		}
	}
	logits, next, compact, err := s.forward(segs, seqs, T)
	if err != nil {
		for _, q := range seqs {
			s.b.ResetSlot(q.slot)
			s.slots[q.slot].tokens = nil
			s.release(q, FinishError, fmt.Errorf("forward step of %d rows: %w", T, err))
		}
		return
	}
	s.tick++
	row := 0
	for i, sg := range segs {
		q := seqs[i]
		st := &s.slots[q.slot]
		st.tokens = append(st.tokens, sg.Tokens...)
		st.lastUse = s.tick
		if !q.pending && q.req.PromptRow != nil && !compact {
			for r := range sg.Tokens {
				if pos := q.fed + r; pos+1 < len(q.req.Prompt) {
					q.req.PromptRow(pos, logits[(row+r)*s.cfg.Vocab:(row+r+1)*s.cfg.Vocab])
				}
			}
		}
		row += len(sg.Tokens)
		if !q.pending {
			q.fed += len(sg.Tokens)
			if q.fed < len(q.req.Prompt) {
				continue // more prompt to feed
			}
			if q.req.MaxTokens == 0 {
				s.release(q, FinishLength, nil) // the prompt scored, nothing to generate
				continue
			}
		}
		lr := row - 1 // the segment's last row in logits
		if compact {
			lr = i
		}
		var lrow []float32 // none where the step copied no logits (greedy rows alone)
		if logits != nil {
			lrow = logits[lr*s.cfg.Vocab : (lr+1)*s.cfg.Vocab]
		}
		s.emit(q, lrow, next[row-1])
	}
	if s.cfg.OnStep != nil {
		s.cfg.OnStep(StepStats{Sequences: len(segs), DecodeRows: decode, PrefillTokens: T - decode, Duration: time.Since(t0)})
	}
}

// forward runs a step of T rows. Its logits are each segment's last row
// (compact) where the backend is an engine.LastRowBatcher, since sampling
// reads no other and on the GPU every row is 4*vocab bytes to copy; else
// every row's; none for a step of greedy sequences' decode rows alone where
// the backend is an engine.ArgmaxBatcher (emit reads only the argmax).
// next is every row's argmax.
func (s *Scheduler) forward(segs []engine.Segment, seqs []*seq, T int) (logits []float32, next []int32, compact bool, err error) {
	V := s.cfg.Vocab
	// A prompt whose every row is read (plan runs it alone) takes Step.
	everyRow := len(seqs) == 1 && !seqs[0].pending && seqs[0].req.PromptRow != nil
	if ab, ok := s.b.(engine.ArgmaxBatcher); ok && !everyRow && greedyDecode(segs, seqs) {
		next, err = ab.StepArgmax(segs)
		if err == nil && len(next) != T {
			err = fmt.Errorf("the backend returned %d next ids for %d rows", len(next), T)
		}
		return nil, next, true, err
	}
	if lb, ok := s.b.(engine.LastRowBatcher); ok && !everyRow {
		logits, next, err = lb.StepLast(segs)
		if err == nil && (len(logits) != len(segs)*V || len(next) != T) {
			err = fmt.Errorf("the backend returned %d logits and %d next ids for the last rows of %d segments of %d rows; expected %d x vocab %d and %d",
				len(logits), len(next), len(segs), T, len(segs), V, T)
		}
		return logits, next, true, err
	}
	logits, next, err = s.b.Step(segs)
	if err == nil && (len(logits) != T*V || len(next) != T) {
		err = fmt.Errorf("the backend returned %d logits and %d next ids for %d rows; expected %d x vocab %d and %d",
			len(logits), len(next), T, T, V, T)
	}
	return logits, next, false, err
}

// greedyDecode reports whether every segment is a decode row (the token a
// sequence generated last) of a sequence that picks the argmax.
func greedyDecode(segs []engine.Segment, seqs []*seq) bool {
	for i, sg := range segs {
		if len(sg.Tokens) != 1 || !seqs[i].pending || seqs[i].req.Sampler != nil {
			return false
		}
	}
	return true
}

// emit samples q's next token from its last row (nil for a greedy q when
// the step copied no logits) and decides whether q goes on.
func (s *Scheduler) emit(q *seq, logits []float32, argmax int32) {
	id := argmax
	if q.req.Sampler != nil {
		var err error
		if id, err = q.req.Sampler.Sample(logits, q.history); err != nil {
			s.release(q, FinishError, fmt.Errorf("sampling: %w", err))
			return
		}
	}
	q.history = append(q.history, id)
	q.made++
	if s.cfg.OnToken != nil {
		now := time.Now()
		s.cfg.OnToken(q.made == 1, now.Sub(q.last))
		q.last = now
	}
	q.pending = true
	q.stream.push(id)
	switch {
	case q.req.Stop != nil && q.req.Stop(id):
		s.release(q, FinishStop, nil)
	case q.made >= q.req.MaxTokens:
		s.release(q, FinishLength, nil)
	case s.b.SlotLen(q.slot) >= s.b.MaxPos():
		s.release(q, FinishContext, nil)
	}
}

// release finishes q and frees its slot, which keeps its KV for reuse.
func (s *Scheduler) release(q *seq, reason string, err error) {
	q.stream.finish(reason, err)
	s.slots[q.slot].seq = nil
	s.mu.Lock()
	s.running--
	s.mu.Unlock()
}
