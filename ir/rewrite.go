package ir

import "fmt"

// The rewrite API, for passes: match a pattern of producers rooted at a
// value, build replacement nodes with Apply (types inferred at once), send
// the old value's uses to the new one with ReplaceUses, and let DCE drop
// what is left dead. DeriveWeight records load-time weight transforms.
//
//	for _, m := range g.FindAll(ir.P("matmul", ir.Any("x"), ir.W("w")).As("y")) { ... }

// Pattern matches a value by the op that produced it.
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

// MatchValue reports whether v matches p, with the bindings.
func MatchValue(p *Pattern, v *Value) (Match, bool) {
	m := Match{}
	if !match(p, v, m) {
		return nil, false
	}
	return m, true
}

func match(p *Pattern, v *Value, m Match) bool {
	if v == nil {
		return false
	}
	if p.Weight && v.Kind != Weight {
		return false
	}
	if p.Op != "" {
		n := v.Def
		if n == nil || n.Op != p.Op {
			return false
		}
		if p.Args != nil {
			if len(p.Args) != len(n.Inputs) {
				return false
			}
			for i, a := range p.Args {
				if a != nil && !match(a, n.Inputs[i], m) {
					return false
				}
			}
		}
	}
	if p.Where != nil && !p.Where(v) {
		return false
	}
	if p.Bind != "" {
		if old, ok := m[p.Bind]; ok && old != v {
			return false // the same name bound twice must be the same value
		}
		m[p.Bind] = v
	}
	return true
}

// FindAll returns the matches of p rooted at every node output, in
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
