package cpu

import (
	"fmt"
	"strings"

	"lagc/ir"
	"lagc/prep"
)

// NonFiniteError names the first node of a step whose output held a NaN or
// an infinity, with the non-finite weights it read.
type NonFiniteError struct {
	Node       *ir.Node
	Output     *ir.Value
	NaN, Inf   int
	First      int      // index of the first non-finite element
	BadWeights []string // weights the node reads that hold non-finite values
}

func (e *NonFiniteError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s first produced non-finite values: %s holds %d NaN and %d infinite (first at element %d)",
		e.Node, e.Output, e.NaN, e.Inf, e.First)
	if len(e.BadWeights) > 0 {
		fmt.Fprintf(&b, "; it reads non-finite weights: %s", strings.Join(e.BadWeights, ", "))
	} else {
		b.WriteString(" from finite inputs")
	}
	return b.String()
}

// checkFinite returns a *NonFiniteError if a float output of n holds a
// non-finite value.
func (e *Executor) checkFinite(n *ir.Node, f32 map[*ir.Value][]float32) error {
	for _, v := range n.Outputs {
		d, ok := f32[v]
		if !ok {
			continue
		}
		nan, inf, first := prep.CountNonFinite(d)
		if first < 0 {
			continue
		}
		err := &NonFiniteError{Node: n, Output: v, NaN: nan, Inf: inf, First: first}
		for _, in := range n.Inputs {
			if w, ok := e.weights[in]; ok && in.Kind == ir.Weight {
				if wn, wi := w.countNonFinite(); wn+wi > 0 {
					err.BadWeights = append(err.BadWeights, fmt.Sprintf("%s (%d NaN, %d infinite)", in, wn, wi))
				}
			}
		}
		return err
	}
	return nil
}

// SetCheckFinite turns on (or off) checking every node's float outputs in
// Forward: the first node producing a NaN or an infinity fails the step with
// a *NonFiniteError. It costs a pass over every activation.
func (e *Executor) SetCheckFinite(on bool) { e.checkNonFinite = on }
