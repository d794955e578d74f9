package gpu

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"

	"lagc/cuda"
	"lagc/lower"
)

// Greedy decoding one step ahead. A greedy step's token is the argmax the
// step before chose, which step_next already leaves on the device, so the
// executor queues step p+1 before it waits for step p: the GPU runs p+1
// while the host reads p's token and returns it, and the host's round trip
// (about 25 us a token on the H200, lagc bench's graph against
// graph-queued) leaves the GPU's path. Each step's token and logit come
// back in BaseOut's slot for its position's parity, which step_next writes
// to pinned host memory directly, and its row of logits stays in
// BaseKept's (argmax), since the step queued behind it overwrites the
// arena's.
//
// A step queued ahead and then not fed (the caller stops, samples, or
// feeds another token) is dropped: settle forgets it, so the next step
// writes the token and position again and overwrites the cache entry it
// wrote, one past Pos(). Only a sliding layer's ring can tell: that entry
// may have taken the slot of a position still in another's window, which
// Rewind checks (aheadHigh).

// EnvDecodeAhead, set to 0, turns decoding one step ahead off (A/B timing).
const EnvDecodeAhead = "LAGC_DECODE_AHEAD"

// readback is the host side of the decode step's readback.
type readback struct {
	pin *cuda.HostBuffer // BaseOut: two slots of (argmax, logit bits), by position parity
	ev  [2]*cuda.Event   // each slot's step done
	// on: BaseOut is pinned host memory and the events are there; off:
	// SetDecodeAhead(false) (EnvDecodeAhead=0 at New).
	on, off bool
	// ahead: a step is queued at Pos() feeding the last step's argmax
	// (lastNext): every other entry point settles it first, so neither
	// moves under it. aheadHigh: one past the furthest position a dropped
	// step wrote.
	ahead     bool
	aheadHigh int
	// kept: the last step fed was a decode step, whose row BaseKept keeps
	// (at Pos()-1's parity); settle clears it.
	kept bool
}

// allocOut places BaseOut: pinned host memory mapped for the device, or,
// where it cannot be (a dry run, a driver without the mapping), device
// memory nobody reads back (greedy steps then run one at a time).
func (e *Executor) allocOut() (err error) {
	if e.dev != nil {
		if pin, err := e.dev.AllocHost(lower.OutBytes); err == nil {
			if e.out, err = pin.DevicePtr(); err == nil {
				e.rb.pin = pin
				return nil
			}
			_ = pin.Free()
		}
	}
	e.out, err = e.alloc(lower.OutBytes)
	return err
}

// initReadback sets up the readback's events where BaseOut is pinned host
// memory and a stream runs the steps.
func (e *Executor) initReadback() (err error) {
	e.rb.off = os.Getenv(EnvDecodeAhead) == "0"
	if e.s == nil || e.rb.pin == nil {
		return nil
	}
	for i := range e.rb.ev {
		if e.rb.ev[i], err = e.dev.NewEvent(); err != nil {
			return fmt.Errorf("the decode step's readback: %w", err)
		}
	}
	e.rb.on = true
	return nil
}

// planWritesOut reports whether schedule s's step_next writes BaseOut and
// its argmax BaseKept (lower writes them for a decode step with f32
// logits).
func planWritesOut(s *lower.Schedule) bool {
	uses := func(l lower.Launch) bool {
		for _, a := range l.Args {
			if a.Kind == "ptr" && (a.Base == lower.BaseOut || a.Base == lower.BaseKept) {
				return true
			}
		}
		return false
	}
	step, row := false, false
	for _, l := range s.Finish {
		step = step || (l.Kernel == "step_next" && uses(l))
	}
	for _, st := range s.Steps {
		for _, l := range st.Launches {
			row = row || (l.Kernel == "argmax" && uses(l))
		}
	}
	return step && row
}

func (e *Executor) closeReadback() {
	for i, ev := range e.rb.ev {
		if ev != nil {
			_ = ev.Close()
			e.rb.ev[i] = nil
		}
	}
	if e.rb.pin != nil {
		_ = e.rb.pin.Free()
		e.rb.pin = nil
	}
	e.rb.on = false
}

// DecodesAhead reports whether greedy decode steps (DecodeNext,
// ForwardArgmax) run one step ahead now: the plan reads its steps back
// through pinned host memory, no profile or check runs, and it is not
// switched off (SetDecodeAhead, EnvDecodeAhead).
func (e *Executor) DecodesAhead() bool { return e.greedyPath() && !e.rb.off }

// SetDecodeAhead switches decoding one step ahead on or off (the default
// is on unless EnvDecodeAhead was 0 at New); the tokens are the same.
func (e *Executor) SetDecodeAhead(on bool) { e.rb.off = !on }

// greedyPath says whether greedy steps (DecodeNext, ForwardArgmax) go
// through greedyStep: the readback is there and nothing watches each step
// alone (hooked).
func (e *Executor) greedyPath() bool { return e.rb.on && !e.hooked() }

// queueStep queues the decode step at position p (the device holding its
// token and position) and the event that says its slot of BaseOut is
// written (step_next stores to the pinned memory itself: no copy sits
// between two steps).
func (e *Executor) queueStep(p int) error {
	if err := e.launchDecode(); err != nil {
		return err
	}
	return e.s.Record(e.rb.ev[p&1])
}

// awaitStep waits for the step at position p and returns its argmax and
// the logit it picked.
func (e *Executor) awaitStep(p int) (int32, float32, error) {
	slot := p & 1
	if err := e.rb.ev[slot].Synchronize(); err != nil {
		return 0, 0, fmt.Errorf("the decode step at position %d: %w", p, err)
	}
	b := e.rb.pin.Bytes()[8*slot:]
	return int32(binary.LittleEndian.Uint32(b)), math.Float32frombits(binary.LittleEndian.Uint32(b[4:])), nil
}

// greedyStep feeds tok at Pos() and returns the step's argmax and the
// logit it picked, queueing the next step (feeding that argmax) before it
// waits where DecodesAhead. A step already queued for tok is used.
func (e *Executor) greedyStep(tok int32) (int32, float32, error) {
	p := e.next
	if !e.rb.ahead || tok != e.lastNext {
		e.settle()
		if !e.devState || tok != e.lastNext {
			if err := e.setScalars([]int32{tok}); err != nil {
				return 0, 0, err
			}
		}
		if err := e.queueStep(p); err != nil {
			return 0, 0, err
		}
	}
	e.rb.ahead = false
	if e.DecodesAhead() && p+2 <= e.plan.MaxContext {
		if err := e.queueStep(p + 1); err != nil {
			return 0, 0, err
		}
		e.rb.ahead = true
	}
	next, logit, err := e.awaitStep(p)
	if err != nil {
		e.rb.ahead = false
		return 0, 0, err
	}
	e.rb.kept = true
	e.next = p + 1
	e.devState, e.lastNext = true, next
	return next, logit, nil
}

// settle drops a step queued ahead that is not going to be fed: the device
// is then past Pos(), so the next step writes its token and position again.
// Every entry point but the greedy steps and StepLogits calls it first (the
// decode steps set kept again after it).
func (e *Executor) settle() {
	e.rb.kept = false
	if !e.rb.ahead {
		return
	}
	e.rb.ahead = false
	e.devState = false
	e.rb.aheadHigh = max(e.rb.aheadHigh, e.next+1)
}

// keptRow copies the row of logits BaseKept keeps for the decode step at
// position p.
func (e *Executor) keptRow(p int) ([]float32, error) {
	out := make([]float32, e.V)
	if err := cuda.Download(e.q, out, e.kept.Add(4*int64(e.V)*int64(p&1))); err != nil {
		return nil, fmt.Errorf("reading the logits: %w", err)
	}
	return out, nil
}
