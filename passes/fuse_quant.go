package passes

import (
	"fmt"
	"slices"
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

// qkvgBlocker: the weights of the projections of an attention node.
func qkvgBlocker(rw *ir.Rewriter, at *ir.Node) string {
	var ws []*ir.Value
	for _, v := range qkvgInputs(rw, at) {
		if p, _ := projection(v); p != nil {
			ws = append(ws, p.Inputs[1])
		}
	}
	return concatBlocker(ws...)
}

// swigluBlocker: the gate and up weights of a SwiGLU MLP's mul.
func swigluBlocker(rw *ir.Rewriter, mul *ir.Node) string {
	if m, ok := ir.MatchValue(swiGLU, mul.Outputs[0]); ok {
		return concatBlocker(m["wg"], m["wu"])
	}
	return ""
}

// stacksBlocker: the gate and up stacks of a MoE node.
func stacksBlocker(rw *ir.Rewriter, n *ir.Node) string {
	if _, stacks, _ := moeParts(n); len(stacks) >= 2 {
		return concatBlocker(stacks[0], stacks[1])
	}
	return ""
}

// sharedBlocker: the shared expert's matrices against the routed stacks
// of the add of the two.
func sharedBlocker(rw *ir.Rewriter, add *ir.Node) string {
	m, ok := ir.MatchValue(routedPlusShared, add.Outputs[0])
	if !ok {
		return ""
	}
	sh, ok := matchShared(m.Node("sd"))
	if !ok {
		return ""
	}
	_, stacks, _ := moeParts(m.Node("moe"))
	for _, w := range []*ir.Value{sh.g, sh.u, sh.gu, sh.down} {
		if why := concatBlocker(stacks[0], w); w != nil && why != "" {
			return why
		}
	}
	return ""
}

// blockers records, per root node a fusion declined at, what blocked it;
// the note counts the nodes still declined when the rewrite ends.
type blockers struct{ why map[*ir.Node]string }

func newBlockers() *blockers { return &blockers{why: map[*ir.Node]string{}} }

// wrap returns apply, recording blocker's answer at each root it declines
// (computed before apply runs) and forgetting it once a root is rewritten.
func (b *blockers) wrap(apply func(*ir.Rewriter, *ir.Node) (ir.Outcome, error),
	blocker func(*ir.Rewriter, *ir.Node) string) func(*ir.Rewriter, *ir.Node) (ir.Outcome, error) {
	return func(rw *ir.Rewriter, root *ir.Node) (ir.Outcome, error) {
		why := blocker(rw, root)
		out, err := apply(rw, root)
		switch out {
		case ir.Declined:
			b.why[root] = why
		case ir.Applied:
			delete(b.why, root)
		}
		return out, err
	}
}

// note reads "N skipped (precondition)", or with dtype blockers
// "N skipped (D: dtypes differ, e.g. W1 is q8_0, W2 q4_k; M: precondition)",
// for the declined count the driver reports.
func (b *blockers) note(g *ir.Graph, declined int) string {
	live := map[*ir.Node]bool{}
	for _, n := range g.Nodes {
		live[n] = true
	}
	var roots []*ir.Node
	for n, why := range b.why {
		if live[n] && why != "" {
			roots = append(roots, n)
		}
	}
	if len(roots) == 0 {
		return fmt.Sprintf("%d skipped (precondition)", declined)
	}
	slices.SortFunc(roots, func(x, y *ir.Node) int { return x.ID - y.ID })
	parts := []string{fmt.Sprintf("%d: dtypes differ, e.g. %s", len(roots), b.why[roots[0]])}
	if other := declined - len(roots); other > 0 {
		parts = append(parts, fmt.Sprintf("%d: precondition", other))
	}
	return fmt.Sprintf("%d skipped (%s)", declined, strings.Join(parts, "; "))
}
