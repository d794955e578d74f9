package passes

import (
	"fmt"
	"regexp"
	"strings"

	"lagc/ir"
)

// Helpers shared by the fusion passes (fuse_*.go, expert_order.go). A
// fusion checks its precondition, builds the fused node, sends the old
// results' uses to the new ones and deletes the nodes it made dead, so its
// result is clean even when dce does not run.

// FusionPasses are the rewrites of issue 6, in their default order.
var FusionPasses = []string{"qkvg-concat", "gate-up-fuse", "shared-expert-merge", "residual-fold", "expert-order"}

// uses counts the readers of every value (graph outputs count as readers).
func uses(g *ir.Graph) map[*ir.Value]int {
	u := map[*ir.Value]int{}
	for _, n := range g.Nodes {
		for _, v := range n.Inputs {
			u[v]++
		}
	}
	for _, v := range g.Outputs {
		u[v]++
	}
	return u
}

// plainWeight reports whether v is a weight (checkpoint or derived).
func plainWeight(v *ir.Value) bool { return v != nil && v.Kind == ir.Weight }

// sameDType reports whether the values share one dtype (a concatenation of
// weights needs it: block-quantised rows are joined as stored).
func sameDType(vs ...*ir.Value) bool {
	for _, v := range vs[1:] {
		if v.Type.DType != vs[0].Type.DType {
			return false
		}
	}
	return true
}

var blockPrefix = regexp.MustCompile(`^blk\.\d+\.`)

// derivedName names a derived weight after its first source: the local
// name with old replaced by new ("blk.3.ffn_gate.weight", "gate", "gate_up"
// -> "blk.3.ffn_gate_up.weight"), unique in g.
func derivedName(g *ir.Graph, src *ir.Value, old, new string) string {
	name := src.Name
	prefix := blockPrefix.FindString(name)
	local := strings.TrimPrefix(name, prefix)
	if strings.Contains(local, old) {
		local = strings.Replace(local, old, new, 1)
	} else {
		local = strings.TrimSuffix(local, ".weight") + "_" + new + ".weight"
	}
	return g.UniqueName(prefix + local)
}

// derive records a load-time weight transform, reusing an identical one
// already in the graph (two nodes sharing weights).
func derive(g *ir.Graph, name, op string, attrs ir.Attrs, srcs ...*ir.Value) (*ir.Value, error) {
	for _, w := range g.Weights {
		if w.From == nil || w.From.Op != op || len(w.From.Srcs) != len(srcs) || cseAttrs(w.From.Attrs) != cseAttrs(attrs) {
			continue
		}
		same := true
		for i, s := range srcs {
			same = same && w.From.Srcs[i] == s
		}
		if same {
			return w, nil
		}
	}
	return g.DeriveWeight(name, op, attrs, srcs...)
}

// dropUnread removes derived weights that no node and no other derived
// weight reads (left by a rewrite that failed its precondition late).
func dropUnread(g *ir.Graph) {
	for before := -1; before != len(g.Weights); {
		before = len(g.Weights)
		dropUnreadOnce(g)
	}
}

func dropUnreadOnce(g *ir.Graph) {
	read := map[*ir.Value]bool{}
	for _, n := range g.Nodes {
		for _, v := range n.Inputs {
			read[v] = true
		}
	}
	for _, w := range g.Weights {
		if w.From != nil {
			for _, s := range w.From.Srcs {
				read[s] = true
			}
		}
	}
	g.RemoveWeights(func(w *ir.Value) bool { return w.From != nil && !read[w] })
}

func cseAttrs(a ir.Attrs) string {
	var b strings.Builder
	for _, k := range a.Keys() {
		fmt.Fprintf(&b, "%s=%#v;", k, a[k])
	}
	return b.String()
}

// replace swaps the nodes old for one new node applying op to inputs: the
// new node's outputs take the names of outs (the values it replaces), and
// every use of outs[i] reads output i. Types are checked before the graph
// is touched, so a failed precondition leaves it as it was.
func replace(g *ir.Graph, old []*ir.Node, op string, inputs []*ir.Value, attrs ir.Attrs, outs ...*ir.Value) (*ir.Node, error) {
	in := make([]ir.Type, len(inputs))
	for i, v := range inputs {
		in[i] = v.Type
	}
	types, err := ir.InferTypes(op, in, attrs)
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
	dead := map[*ir.Node]bool{}
	for _, n := range old {
		dead[n] = true
	}
	g.RemoveNodes(dead)
	n, err := g.AddNode(op, inputs, attrs, names...)
	if err != nil {
		return nil, err // cannot happen: InferTypes accepted the same call
	}
	for i, v := range outs {
		g.ReplaceUses(v, n.Outputs[i])
	}
	return n, nil
}

// removeDead deletes the candidates nothing reads any more (pure ops only),
// repeating as deletions free their inputs' producers.
func removeDead(g *ir.Graph, candidates ...*ir.Node) {
	for {
		u := uses(g)
		dead := map[*ir.Node]bool{}
		for _, n := range candidates {
			if n == nil {
				continue
			}
			if d, ok := n.Def(); !ok || d.SideEffect {
				continue
			}
			read := false
			for _, v := range n.Outputs {
				read = read || u[v] > 0
			}
			if !read && inGraph(g, n) {
				dead[n] = true
			}
		}
		if len(dead) == 0 {
			return
		}
		g.RemoveNodes(dead)
	}
}

func inGraph(g *ir.Graph, n *ir.Node) bool {
	for _, m := range g.Nodes {
		if m == n {
			return true
		}
	}
	return false
}

// isMoE reports whether n is a routed-experts node of either form.
func isMoE(n *ir.Node) bool { return n != nil && (n.Op == "moe_experts" || n.Op == "moe_grouped") }

// moeAttrs returns the moe_grouped attributes equivalent to n (moe_experts
// is moe_grouped with the defaults).
func moeAttrs(n *ir.Node) ir.Attrs {
	if n.Op != "moe_grouped" {
		return ir.Attrs{"gate_up": ir.GateUpSplit, "shared": 0, "residual": 0, "order": ir.OrderIndex}
	}
	return ir.Attrs{"gate_up": n.AttrString("gate_up"), "shared": n.AttrInt("shared"), "residual": n.AttrInt("residual"),
		"order": n.AttrString("order")}
}

// moeParts splits a MoE node's inputs into x, weights, ids, the stacks and
// the residual (nil if none).
func moeParts(n *ir.Node) (head, stacks []*ir.Value, residual *ir.Value) {
	head = n.Inputs[:3]
	stacks = n.Inputs[3:]
	if n.Op == "moe_grouped" && n.AttrInt("residual") != 0 {
		residual = stacks[len(stacks)-1]
		stacks = stacks[:len(stacks)-1]
	}
	return head, stacks, residual
}

// rebuildMoE replaces the nodes old (a MoE node and what it absorbs) by a
// moe_grouped node with the given inputs and attributes computing out.
func rebuildMoE(g *ir.Graph, old []*ir.Node, head, stacks []*ir.Value, residual *ir.Value, a ir.Attrs, out *ir.Value) (*ir.Node, error) {
	in := append(append([]*ir.Value(nil), head...), stacks...)
	if residual != nil {
		in = append(in, residual)
		a["residual"] = 1
	} else {
		a["residual"] = 0
	}
	return replace(g, old, "moe_grouped", in, a, out)
}
