package passes

import (
	"fmt"
	"strings"

	"lagc/ir"
)

// inferShapes recomputes output types so rewrites may leave them stale.
func inferShapes(s *State) error {
	order, err := s.Graph.Order()
	if err != nil {
		return err
	}
	changed := 0
	for _, n := range order {
		in := make([]ir.Type, len(n.Inputs))
		for i, v := range n.Inputs {
			in[i] = v.Type
		}
		out, err := ir.InferTypes(n.Op, in, n.Attrs)
		if err != nil {
			return fmt.Errorf("%s: %w", n, err)
		}
		if len(out) != len(n.Outputs) {
			return fmt.Errorf("%s: %d outputs, the op gives %d", n, len(n.Outputs), len(out))
		}
		for i, v := range n.Outputs {
			if !v.Type.Equal(out[i]) {
				v.Type = out[i]
				changed++
			}
		}
	}
	s.Notef("shapes: %d value types updated", changed)
	return nil
}

// DCE removes nodes that do not contribute to an output or a side effect,
// then weights nothing reads (directly or through a derived weight).
func DCE(s *State) error {
	g := s.Graph
	live := g.Live()
	dead := map[*ir.Node]bool{}
	for _, n := range g.Nodes {
		if !live[n] {
			dead[n] = true
		}
	}
	g.RemoveNodes(dead)
	used := map[*ir.Value]bool{}
	var mark func(v *ir.Value)
	mark = func(v *ir.Value) {
		if v == nil || used[v] {
			return
		}
		used[v] = true
		if v.From != nil {
			for _, src := range v.From.Srcs {
				mark(src)
			}
		}
	}
	for _, n := range g.Nodes {
		for _, v := range n.Inputs {
			if v.Kind == ir.Weight {
				mark(v)
			}
		}
	}
	for _, v := range g.Outputs {
		mark(v)
	}
	before := len(g.Weights)
	g.RemoveWeights(func(w *ir.Value) bool { return !used[w] })
	s.Notef("dce: %d nodes and %d weights removed", len(dead), before-len(g.Weights))
	return nil
}

// CSE merges pure nodes with identical op, attributes and inputs.
func CSE(s *State) error {
	g := s.Graph
	order, err := g.Order()
	if err != nil {
		return err
	}
	seen := map[string]*ir.Node{}
	dead := map[*ir.Node]bool{}
	for _, n := range order {
		if d, ok := n.Def(); !ok || d.SideEffect {
			continue
		}
		key := cseKey(n)
		first, ok := seen[key]
		if !ok {
			seen[key] = n
			continue
		}
		for i, v := range n.Outputs {
			g.ReplaceUses(v, first.Outputs[i])
		}
		dead[n] = true
	}
	g.RemoveNodes(dead)
	s.Notef("cse: %d nodes merged", len(dead))
	return nil
}

func cseKey(n *ir.Node) string {
	var b strings.Builder
	b.WriteString(n.Op)
	b.WriteByte('(')
	for _, v := range n.Inputs {
		// Names are unique in a verified graph.
		b.WriteString(v.String())
		b.WriteByte(',')
	}
	b.WriteByte(')')
	b.WriteString(n.Attrs.Key())
	return b.String()
}
