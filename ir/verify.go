package ir

import (
	"fmt"
)

// Verify checks that g is well formed: every value defined exactly once
// (single assignment, unique names), every node input defined in g, known
// ops with valid attributes, declared types equal to the inferred ones, no
// cycles, outputs defined, derived weights consistent. Errors name the node.
func Verify(g *Graph) error {
	g.Compact()
	defined := map[*Value]bool{}
	names := map[string]*Value{}
	// where names the definition in a message; it is called only then.
	define := func(v *Value, where func() string) error {
		if v == nil {
			return fmt.Errorf("%s: nil value", where())
		}
		if defined[v] {
			return fmt.Errorf("%s: value %s is assigned twice", where(), v)
		}
		if o, dup := names[v.Name]; dup && o != v {
			return fmt.Errorf("%s: name %s is used by two values", where(), v)
		}
		if !isName(v.Name) {
			return fmt.Errorf("%s: bad value name %q", where(), v.Name)
		}
		defined[v] = true
		names[v.Name] = v
		return nil
	}
	for _, v := range g.Inputs {
		if err := define(v, func() string { return "input " + v.String() }); err != nil {
			return err
		}
		if v.Kind != Input || v.Def != nil {
			return fmt.Errorf("input %s: kind %s", v, v.Kind)
		}
	}
	for _, v := range g.Weights {
		if err := define(v, func() string { return "weight " + v.String() }); err != nil {
			return err
		}
		if v.Kind != Weight || v.Def != nil {
			return fmt.Errorf("weight %s: kind %s", v, v.Kind)
		}
	}
	for _, v := range append(append([]*Value(nil), g.Inputs...), g.Weights...) {
		if err := checkDims(g, v.Type); err != nil {
			return fmt.Errorf("%s %s: %w", v.Kind, v, err)
		}
	}
	ids := map[int]*Node{}
	for _, n := range g.Nodes {
		if o, dup := ids[n.ID]; dup {
			return fmt.Errorf("%s: same ID %d as %s", n, n.ID, o)
		}
		ids[n.ID] = n
		for _, v := range n.Outputs {
			if err := define(v, n.String); err != nil {
				return err
			}
			if v.Def != n || v.Kind != Activation {
				return fmt.Errorf("%s: output %s does not record this node as its definition", n, v)
			}
		}
	}
	for _, w := range g.Weights {
		if w.From == nil {
			continue
		}
		for _, s := range w.From.Srcs {
			if !defined[s] || s.Kind != Weight {
				return fmt.Errorf("weight %s: derived from %v, which is not a weight of the graph", w, s)
			}
		}
		t, err := transformType(w.From.Op, w.From.Attrs, w.From.Srcs)
		if err != nil {
			return fmt.Errorf("weight %s: %w", w, err)
		}
		if !t.Equal(w.Type) {
			return fmt.Errorf("weight %s: declared %s but its transform gives %s", w, w.Type, t)
		}
	}
	for _, n := range g.Nodes {
		if err := verifyNode(g, n, defined); err != nil {
			return err
		}
	}
	if order, err := g.Order(); err != nil || !g.checkOrder(order) {
		// The kept order and use-def information are stale after a direct
		// edit of the inputs: rebuild both before judging (and naming a cycle).
		g.order, g.useDef = nil, false
		if _, err := g.Order(); err != nil {
			return err
		}
	}
	if len(g.Outputs) == 0 {
		return fmt.Errorf("graph %s has no outputs", g.Name)
	}
	for _, v := range g.Outputs {
		if v == nil || !defined[v] {
			return fmt.Errorf("graph output %v is not defined", v)
		}
	}
	return nil
}

func verifyNode(g *Graph, n *Node, defined map[*Value]bool) error {
	d, ok := n.Def()
	if !ok {
		return fmt.Errorf("%s: unknown op %q", n, n.Op)
	}
	in := make([]Type, len(n.Inputs))
	for i, v := range n.Inputs {
		if v == nil || !defined[v] {
			return fmt.Errorf("%s: input %s reads undefined value %v", n, d.inputName(i), v)
		}
		in[i] = v.Type
	}
	a, err := d.CheckAttrs(n.Attrs)
	if err != nil {
		return fmt.Errorf("%s: %w", n, err)
	}
	want, err := d.inferChecked(in, a)
	if err != nil {
		return fmt.Errorf("%s: %w", n, err)
	}
	if len(want) != len(n.Outputs) {
		return fmt.Errorf("%s: has %d outputs, the op gives %d", n, len(n.Outputs), len(want))
	}
	for i, v := range n.Outputs {
		if !v.Type.Equal(want[i]) {
			return fmt.Errorf("%s: output %s declared %s but inputs give %s", n, v, v.Type, want[i])
		}
		if err := checkDims(g, v.Type); err != nil {
			return fmt.Errorf("%s: output %s: %w", n, v, err)
		}
	}
	return nil
}

// checkDims checks that t uses only declared symbols and a valid dtype.
func checkDims(g *Graph, t Type) error {
	if !t.DType.valid() {
		return fmt.Errorf("invalid dtype")
	}
	for _, d := range t.Shape {
		if d.IsConst() {
			if d.N < 0 {
				return fmt.Errorf("negative dimension %d", d.N)
			}
			continue
		}
		if !contains(g.Syms, d.Sym) {
			return fmt.Errorf("undeclared symbol %s in %s", d.Sym, t)
		}
	}
	return nil
}

// isName reports whether s is a valid value name: letters, digits, '_', '.'
// and '-', not empty.
func isName(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !(r == '_' || r == '.' || r == '-' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}
