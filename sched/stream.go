package sched

import (
	"context"
	"sync"
)

// Finish reasons of a stream.
const (
	FinishStop     = "stop"     // Request.Stop accepted a token (kept as the last one)
	FinishLength   = "length"   // MaxTokens were generated
	FinishContext  = "context"  // the sequence filled the context
	FinishCanceled = "canceled" // the request's context ended or Cancel was called
	FinishError    = "error"    // the backend failed; Err says why
)

// Stream is the output of one request: tokens as the scheduler produces
// them, then a finish reason. The scheduler never waits for a reader, so a
// slow client cannot stall the batch.
type Stream struct {
	ctx    context.Context
	cancel context.CancelFunc
	wake   func() // tells the scheduler something changed

	mu      sync.Mutex
	tokens  []int32 // produced and not yet taken
	reason  string  // "" while running
	err     error
	cached  int // prompt tokens reused from a slot's KV
	changed chan struct{}
}

func newStream(ctx context.Context, wake func()) *Stream {
	ctx, cancel := context.WithCancel(ctx)
	return &Stream{ctx: ctx, cancel: cancel, wake: wake, changed: make(chan struct{}, 1)}
}

// Next waits until tokens are produced or the stream finishes, and returns
// the tokens not taken yet and, once it has finished, the reason (and the
// backend's error for FinishError). It returns ctx's error if ctx ends first.
func (s *Stream) Next(ctx context.Context) (tokens []int32, reason string, err error) {
	for {
		s.mu.Lock()
		tokens, s.tokens = s.tokens, nil
		reason, err = s.reason, s.err
		s.mu.Unlock()
		if len(tokens) > 0 || reason != "" {
			return tokens, reason, err
		}
		select {
		case <-s.changed:
		case <-ctx.Done():
			return nil, "", ctx.Err()
		}
	}
}

// Cancel ends the request; its slot is freed at the next step.
func (s *Stream) Cancel() {
	s.cancel()
	s.wake()
}

// CachedTokens returns how many prompt tokens were reused from a slot's KV
// cache instead of being computed (known once the request is admitted).
func (s *Stream) CachedTokens() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cached
}

func (s *Stream) push(id int32) {
	s.mu.Lock()
	s.tokens = append(s.tokens, id)
	s.mu.Unlock()
	s.signal()
}

func (s *Stream) finish(reason string, err error) {
	s.mu.Lock()
	if s.reason == "" {
		s.reason, s.err = reason, err
	}
	s.mu.Unlock()
	s.cancel()
	s.signal()
}

func (s *Stream) setCached(n int) {
	s.mu.Lock()
	s.cached = n
	s.mu.Unlock()
}

func (s *Stream) signal() {
	select {
	case s.changed <- struct{}{}:
	default:
	}
}
