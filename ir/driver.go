package ir

import (
	"fmt"
	"slices"
	"strings"
)

// Graph.Rewrite is a greedy pattern-rewrite driver in the manner of MLIR's:
// a worklist holds the nodes some pattern is rooted at, in topological
// order; each is offered to its patterns in turn; after a rewrite the new
// nodes, their readers and the producers of what the rewrite removed go
// back on the list, until it is empty (a fixpoint). Patterns see the graph
// through a Rewriter, whose mutations keep the use-def information current,
// so a run costs time proportional to the graph plus the rewrites.

// Outcome is what a rewrite pattern did at a node.
type Outcome uint8

const (
	// NoMatch: the node is not this pattern's; nothing changed.
	NoMatch Outcome = iota
	// Applied: the graph was rewritten.
	Applied
	// Declined: the pattern matched but a precondition failed; nothing
	// changed (derived weights the attempt made and nothing reads are
	// dropped by the driver).
	Declined
)

// RewritePattern is a rewrite rooted at one node.
type RewritePattern struct {
	Name  string
	Roots []string // the ops of the nodes it is offered
	Apply func(rw *Rewriter, root *Node) (Outcome, error)
}

// RewriteStats counts, per pattern name, the rewrites applied and the
// nodes at which a pattern declined and that no pattern rewrote later.
type RewriteStats struct {
	Applied, Declined map[string]int
}

// Rewrite applies patterns until none applies. A pattern error stops it;
// so does a run past a bound proportional to the graph (patterns that keep
// undoing each other). Patterns rooted at the same op are offered a node in
// the order given. On return the graph is compacted.
func (g *Graph) Rewrite(patterns ...*RewritePattern) (*RewriteStats, error) {
	st := &RewriteStats{Applied: map[string]int{}, Declined: map[string]int{}}
	order, err := g.Order()
	if err != nil {
		return st, err
	}
	g.buildUseDef()
	roots := map[string][]*RewritePattern{}
	for _, p := range patterns {
		for _, op := range p.Roots {
			roots[op] = append(roots[op], p)
		}
	}
	var queue []*Node
	queued := map[*Node]bool{}
	push := func(n *Node) {
		if n != nil && !n.erased && !queued[n] && len(roots[n.Op]) > 0 {
			queue = append(queue, n)
			queued[n] = true
		}
	}
	for _, n := range order {
		push(n)
	}
	declined := map[*Node]*RewritePattern{}
	rw := &Rewriter{g: g}
	nodes := len(g.Nodes)
	limit, applied := 8*nodes+64, 0
	for head := 0; head < len(queue); head++ {
		n := queue[head]
		queue[head] = nil
		delete(queued, n)
		if n.erased {
			continue
		}
		for _, p := range roots[n.Op] {
			rw.begin()
			out, err := p.Apply(rw, n)
			if err != nil {
				return st, fmt.Errorf("%s at %s: %w", p.Name, n, err)
			}
			if out != Applied {
				if len(rw.created) > 0 || len(rw.erased) > 0 {
					return st, fmt.Errorf("%s at %s: changed the graph but reported no rewrite", p.Name, n)
				}
				rw.dropUnread()
				if out == Declined {
					declined[n] = p
				}
				continue
			}
			st.Applied[p.Name]++
			delete(declined, n)
			if applied++; applied > limit {
				return st, fmt.Errorf("rewriting did not converge: %d rewrites in a graph of %d nodes (last: %s at %s)", applied, nodes, p.Name, n)
			}
			for _, c := range rw.created {
				push(c)
				for _, o := range c.Outputs {
					for _, u := range o.users {
						push(u)
					}
				}
			}
			for _, e := range rw.erased {
				for _, v := range e.Inputs {
					if v != nil {
						push(v.Def)
					}
				}
			}
			push(n)
			break
		}
	}
	for n, p := range declined {
		if !n.erased {
			st.Declined[p.Name]++
		}
	}
	g.Compact()
	return st, nil
}

// Rewriter is a pattern's access to the graph during Graph.Rewrite. Its
// mutations record what changed, for the driver's worklist.
type Rewriter struct {
	g       *Graph
	created []*Node  // by the current attempt
	erased  []*Node  // by the current attempt
	derived []*Value // weights added by the current attempt
}

func (rw *Rewriter) begin() {
	rw.created, rw.erased, rw.derived = rw.created[:0], rw.erased[:0], rw.derived[:0]
}

// Graph returns the graph being rewritten.
func (rw *Rewriter) Graph() *Graph { return rw.g }

// Users returns the nodes reading v (see Graph.Users).
func (rw *Rewriter) Users(v *Value) []*Node { return rw.g.Users(v) }

// NumUses counts the readers of v, graph outputs included.
func (rw *Rewriter) NumUses(v *Value) int { return rw.g.NumUses(v) }

// Replace swaps the nodes old for one new node applying op to inputs: the
// new node's outputs take the names of outs (the values it replaces), and
// every use of outs[i] reads output i. Types are checked before the graph
// is touched, so a failed precondition leaves it as it was.
func (rw *Rewriter) Replace(old []*Node, op string, inputs []*Value, attrs Attrs, outs ...*Value) (*Node, error) {
	g := rw.g
	in := make([]Type, len(inputs))
	for i, v := range inputs {
		in[i] = v.Type
	}
	types, err := InferTypes(op, in, attrs)
	if err != nil {
		return nil, err
	}
	if len(types) != len(outs) {
		return nil, fmt.Errorf("%s gives %d outputs for %d replaced values", op, len(types), len(outs))
	}
	for i, t := range types {
		if !t.Equal(outs[i].Type) {
			return nil, fmt.Errorf("%s output %d is %s, the value it replaces %s is %s", op, i, t, outs[i], outs[i].Type)
		}
	}
	names := make([]string, len(outs))
	for i, v := range outs {
		names[i] = v.Name
	}
	for _, n := range old {
		rw.erase(n)
	}
	n, err := g.AddNode(op, inputs, attrs, names...)
	if err != nil {
		return nil, err // cannot happen: InferTypes accepted the same call
	}
	rw.created = append(rw.created, n)
	for i, v := range outs {
		g.ReplaceUses(v, n.Outputs[i])
	}
	return n, nil
}

func (rw *Rewriter) erase(n *Node) {
	if !n.erased {
		rw.g.EraseNode(n)
		rw.erased = append(rw.erased, n)
	}
}

// EraseDead erases the candidates nothing reads any more (pure ops only),
// repeating as erasures free their inputs' producers among them.
func (rw *Rewriter) EraseDead(candidates ...*Node) {
	for again := true; again; {
		again = false
		for _, n := range candidates {
			if n == nil || n.erased {
				continue
			}
			if d, ok := n.Def(); !ok || d.SideEffect {
				continue
			}
			read := false
			for _, v := range n.Outputs {
				read = read || rw.g.NumUses(v) > 0
			}
			if !read {
				rw.erase(n)
				again = true
			}
		}
	}
}

// Derive returns a weight computed at load time by op from srcs (see
// Graph.DeriveWeight), reusing an identical derivation already in the
// graph (two nodes sharing weights).
func (rw *Rewriter) Derive(name, op string, attrs Attrs, srcs ...*Value) (*Value, error) {
	if len(srcs) > 0 {
		key := attrs.Key()
		for _, w := range rw.g.Derivations(srcs[0]) {
			if w.From.Op == op && slices.Equal(w.From.Srcs, srcs) && w.From.Attrs.Key() == key {
				return w, nil
			}
		}
	}
	w, err := rw.g.DeriveWeight(name, op, attrs, srcs...)
	if err != nil {
		return nil, err
	}
	rw.derived = append(rw.derived, w)
	return w, nil
}

// dropUnread erases the weights the current attempt derived that nothing
// reads (a precondition failed after they were made).
func (rw *Rewriter) dropUnread() {
	for i := len(rw.derived) - 1; i >= 0; i-- {
		if w := rw.derived[i]; rw.g.NumUses(w) == 0 && len(w.derivs) == 0 {
			rw.g.EraseWeight(w)
		}
	}
}

// Key returns a canonical text of the attributes: equal attributes give
// equal keys.
func (a Attrs) Key() string {
	var b strings.Builder
	for _, k := range a.Keys() {
		fmt.Fprintf(&b, "%s=%#v;", k, a[k])
	}
	return b.String()
}
