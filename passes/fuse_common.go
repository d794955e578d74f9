package passes

import (
	"regexp"
	"slices"
	"strings"

	"lagc/ir"
)

// Helpers shared by the fusion passes (fuse_*.go, expert_order.go). A
// fusion is a set of rewrite patterns for ir.Graph.Rewrite: each checks
// its precondition, builds the fused node through the ir.Rewriter (which
// sends the old results' uses to the new ones) and erases the nodes it made
// dead, so its result is clean even when dce does not run.

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

// moeOps are the two forms of a routed-experts node.
var moeOps = []string{"moe_experts", "moe_grouped"}

// isMoE reports whether n is a routed-experts node of either form.
func isMoE(n *ir.Node) bool { return n != nil && slices.Contains(moeOps, n.Op) }

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
func rebuildMoE(rw *ir.Rewriter, old []*ir.Node, head, stacks []*ir.Value, residual *ir.Value, a ir.Attrs, out *ir.Value) (*ir.Node, error) {
	in := append(append([]*ir.Value(nil), head...), stacks...)
	if residual != nil {
		in = append(in, residual)
		a["residual"] = 1
	} else {
		a["residual"] = 0
	}
	return rw.Replace(old, "moe_grouped", in, a, out)
}
