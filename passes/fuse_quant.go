package passes

import (
	"fmt"
	"strings"

	"lagc/ir"
)

// A fusion that concatenates weights joins their rows as stored: a
// block-quantised row cannot be converted on the way, so the weights must
// share one dtype (ir checks that runs are whole blocks). These helpers
// name the weights that block a fusion, for the pass notes.

// concatBlocker returns why ws cannot be concatenated into one weight
// ("" if they can).
func concatBlocker(ws ...*ir.Value) string {
	var first *ir.Value
	for _, w := range ws {
		if w == nil {
			continue
		}
		if first == nil {
			first = w
			continue
		}
		if w.Type.DType != first.Type.DType {
			return fmt.Sprintf("%s is %s, %s %s", first.Name, first.Type.DType, w.Name, w.Type.DType)
		}
	}
	return ""
}

// qkvgBlocker is concatBlocker over the weights of the projections found.
func qkvgBlocker(projs []*ir.Node) string {
	var ws []*ir.Value
	for _, p := range projs {
		if p != nil {
			ws = append(ws, p.Inputs[1])
		}
	}
	return concatBlocker(ws...)
}

// sharedBlocker returns why the shared expert computed by sd cannot join
// the stacks of moe: its matrices and the stacks differ in dtype.
func sharedBlocker(moe, sd *ir.Node) string {
	sh, ok := matchShared(sd)
	if !ok {
		return ""
	}
	_, stacks, _ := moeParts(moe)
	for _, m := range []*ir.Value{sh.g, sh.u, sh.gu, sh.down} {
		if m == nil {
			continue
		}
		if why := concatBlocker(stacks[0], m); why != "" {
			return why
		}
	}
	return ""
}

// skips counts the candidates a fusion left alone, by reason: the weights'
// dtypes differ (with the first example), or another precondition.
type skips struct {
	n, dtypes int
	example   string
}

// add records one skipped candidate; why is a blocker's answer.
func (s *skips) add(why string) {
	s.n++
	if why != "" {
		if s.dtypes == 0 {
			s.example = why
		}
		s.dtypes++
	}
}

// String reads "N skipped (precondition)", or with dtype blockers
// "N skipped (D: dtypes differ, e.g. W1 is q8_0, W2 q4_k; M: precondition)".
func (s *skips) String() string {
	if s.dtypes == 0 {
		return fmt.Sprintf("%d skipped (precondition)", s.n)
	}
	parts := []string{fmt.Sprintf("%d: dtypes differ, e.g. %s", s.dtypes, s.example)}
	if other := s.n - s.dtypes; other > 0 {
		parts = append(parts, fmt.Sprintf("%d: precondition", other))
	}
	return fmt.Sprintf("%d skipped (%s)", s.n, strings.Join(parts, "; "))
}
