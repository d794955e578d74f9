package engine

import (
	"fmt"
	"lagc/prep"
)

// NonFiniteLocator is implemented by a Backend that can say which graph
// node first produced a NaN or an infinity. When a step's logits are not
// finite, Generate calls LocateNonFinite with every step fed so far, the
// failing one last: the backend starts a new sequence, feeds the steps in
// order checking each node's outputs, and returns an error naming the first
// node whose output held a non-finite value (nil if none did). The backend
// is left needing Reset. The CPU backend implements it; a GPU backend can
// by checking node outputs in eager mode.
type NonFiniteLocator interface {
	LocateNonFinite(steps [][]int32) error
}

// NonFiniteError reports a step whose logits held NaN or infinite values.
type NonFiniteError struct {
	Step     string // "prefill at position 0", "decode at position 12"
	NaN, Inf int
	Row, Col int   // token (within the step) and vocabulary id of the first
	Cause    error // the backend's location of the first bad node, if any
	Located  bool  // the backend could locate (Cause may still be nil)
}

func (e *NonFiniteError) Error() string {
	msg := fmt.Sprintf("%s: the logits hold %d NaN and %d infinite values (first at token %d of the step, id %d)",
		e.Step, e.NaN, e.Inf, e.Row, e.Col)
	switch {
	case e.Cause != nil:
		return msg + ": " + e.Cause.Error()
	case e.Located:
		return msg + "; re-running the sequence with every node checked found none"
	default:
		return msg + "; this backend cannot say which op produced them"
	}
}

func (e *NonFiniteError) Unwrap() error { return e.Cause }

// checkFinite returns a *NonFiniteError if rows of logits [T, V] hold a
// non-finite value. Only the rows Generate uses are checked: the last, or
// all with all.
func checkFinite(step string, logits []float32, T, V int, all bool) *NonFiniteError {
	first := T - 1
	if all {
		first = 0
	}
	var e *NonFiniteError
	for r := first; r < T; r++ {
		nan, inf, c := prep.CountNonFinite(logits[r*V : (r+1)*V])
		if c < 0 {
			continue
		}
		if e == nil {
			e = &NonFiniteError{Step: step, Row: r, Col: c}
		}
		e.NaN += nan
		e.Inf += inf
	}
	return e
}

// locate asks the backend where the non-finite values came from.
func locate(b Backend, steps [][]int32, e *NonFiniteError) error {
	if l, ok := b.(NonFiniteLocator); ok {
		e.Located = true
		e.Cause = l.LocateNonFinite(steps)
	}
	return e
}

// LocateNonFinite implements NonFiniteLocator.
func (b cpuBackend) LocateNonFinite(steps [][]int32) error {
	b.ex.Reset()
	b.ex.SetCheckFinite(true)
	defer b.ex.SetCheckFinite(false)
	for i, s := range steps {
		if _, err := b.ex.Forward(s); err != nil {
			return fmt.Errorf("step %d of %d (%d tokens at position %d): %w", i+1, len(steps), len(s), b.ex.Pos(), err)
		}
	}
	return nil
}
