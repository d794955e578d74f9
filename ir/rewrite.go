package ir

import "fmt"

// The rewrite API, for passes: a pattern matches the producers of a value;
// Graph.Rewrite (driver.go) applies rewrite patterns until none applies,
// and a Rewriter gives them the mutations (Replace, Derive, EraseDead).
//
//	m, ok := ir.MatchValue(ir.P("add", ir.Any("r"), ir.P("matmul", ir.Any("x"), ir.W("w")).As("p")), v)

// Pattern matches a value by the op that produced it. The operands of a
// commutative op (OpDef.Commutative: add, mul) match in either order.
type Pattern struct {
	Op     string     // producing op; "" matches any value
	Args   []*Pattern // patterns for the producer's inputs; nil leaves them free
	Weight bool       // the value must be a weight
	Bind   string     // name under which the match records the value
	Where  func(*Value) bool
}

// P matches a value computed by op from values matching args.
func P(op string, args ...*Pattern) *Pattern { return &Pattern{Op: op, Args: args} }

// W matches a weight and records it as bind.
func W(bind string) *Pattern { return &Pattern{Weight: true, Bind: bind} }

// Any matches any value and records it as bind.
func Any(bind string) *Pattern { return &Pattern{Bind: bind} }

// As records the value matched by p as bind.
func (p *Pattern) As(bind string) *Pattern { p.Bind = bind; return p }

// If adds a condition on the matched value.
func (p *Pattern) If(f func(*Value) bool) *Pattern { p.Where = f; return p }

// Match holds the values a pattern bound; Node(name) is a bound value's producer.
type Match map[string]*Value

// Node returns the node producing the value bound to name (nil if none).
func (m Match) Node(name string) *Node {
	if v := m[name]; v != nil {
		return v.Def
	}
	return nil
}

// MatchValue reports whether v matches p, with the bindings of the first
// match (operands of commutative ops in their given order first).
func MatchValue(p *Pattern, v *Value) (Match, bool) {
	var first Match
	matches(p, v, func(m Match) bool { first = m; return true })
	return first, first != nil
}

// Matches returns every way v matches p, in the order MatchValue tries
// them: a rewrite whose precondition fails on one operand order can try
// the next.
func Matches(p *Pattern, v *Value) []Match {
	var out []Match
	matches(p, v, func(m Match) bool { out = append(out, m); return false })
	return out
}

// matches calls found with a copy of the bindings of each match of p at v
// until found returns true.
func matches(p *Pattern, v *Value, found func(Match) bool) {
	m := Match{}
	match(p, v, m, func() bool {
		c := make(Match, len(m))
		for k, x := range m {
			c[k] = x
		}
		return found(c)
	})
}

// match matches p at v and then calls k, backtracking over the operand
// orders of commutative ops: it returns true as soon as k does, and undoes
// its bindings when it returns false.
func match(p *Pattern, v *Value, m Match, k func() bool) bool {
	if v == nil || p.Weight && v.Kind != Weight {
		return false
	}
	var n *Node
	if p.Op != "" {
		if n = v.Def; n == nil || n.Op != p.Op {
			return false
		}
		if p.Args != nil && len(p.Args) != len(n.Inputs) {
			return false
		}
	}
	if p.Where != nil && !p.Where(v) {
		return false
	}
	rest := func() bool {
		if n == nil || p.Args == nil {
			return k()
		}
		if matchArgs(p.Args, n.Inputs, m, k) {
			return true
		}
		d, ok := n.Def()
		if !ok || !d.Commutative || len(n.Inputs) != 2 || n.Inputs[0] == n.Inputs[1] {
			return false
		}
		return matchArgs(p.Args, []*Value{n.Inputs[1], n.Inputs[0]}, m, k)
	}
	if p.Bind == "" {
		return rest()
	}
	if old, ok := m[p.Bind]; ok {
		return old == v && rest() // the same name bound twice must be the same value
	}
	m[p.Bind] = v
	if rest() {
		return true
	}
	delete(m, p.Bind)
	return false
}

func matchArgs(ps []*Pattern, vs []*Value, m Match, k func() bool) bool {
	if len(ps) == 0 {
		return k()
	}
	if ps[0] == nil {
		return matchArgs(ps[1:], vs[1:], m, k)
	}
	return match(ps[0], vs[0], m, func() bool { return matchArgs(ps[1:], vs[1:], m, k) })
}

// FindAll returns the first match of p rooted at every node output, in
// topological order (node order if the graph has a cycle).
func (g *Graph) FindAll(p *Pattern) []Match {
	order, err := g.Order()
	if err != nil {
		order = g.Nodes
	}
	var out []Match
	for _, n := range order {
		for _, v := range n.Outputs {
			if m, ok := MatchValue(p, v); ok {
				out = append(out, m)
			}
		}
	}
	return out
}

// Apply adds a single-output node and returns its output.
func (g *Graph) Apply(op string, attrs Attrs, name string, inputs ...*Value) (*Value, error) {
	n, err := g.AddNode(op, inputs, attrs, name)
	if err != nil {
		return nil, err
	}
	if len(n.Outputs) != 1 {
		return nil, fmt.Errorf("Apply(%s): op has %d outputs", op, len(n.Outputs))
	}
	return n.Outputs[0], nil
}
