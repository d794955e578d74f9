package passes

import (
	"lagc/ir"
)

// L2BandBytes is the weight bytes one N-band of one expert may take: a
// band of rows of an expert's matrix is read from memory once and reused
// from L2 by every token tile of that expert. 1 MiB leaves the H200's 50
// MiB L2 room for the bands of the experts in flight on its 132 SMs.
const L2BandBytes = 1 << 20

// expertOrder sets the schedule attributes of every MoE node, turning
// moe_experts into the equivalent moe_grouped: order="descending" (the
// grouped GEMM starts the experts with the most tokens routed this step,
// so the longest tiles do not run last) and band = the output columns per
// N-band (bandWidth). Only the schedule changes: the kernels sum each
// token's experts in a fixed order whatever the visit order. No
// precondition; no weight transform.
func expertOrder(s *State) error {
	st, err := s.Graph.Rewrite(&ir.RewritePattern{Name: "expert-order", Roots: moeOps, Apply: scheduleExperts})
	if err != nil {
		return err
	}
	s.Notef("expert-order: %d MoE nodes scheduled descending", st.Applied["expert-order"])
	return nil
}

func scheduleExperts(rw *ir.Rewriter, node *ir.Node) (ir.Outcome, error) {
	head, stacks, residual := moeParts(node)
	a := moeAttrs(node)
	a["order"] = ir.OrderDescending
	a["band"] = bandWidth(stacks[0])
	if node.Op == "moe_grouped" && a.Key() == moeAttrs(node).Key() {
		return ir.NoMatch, nil // scheduled already
	}
	if _, err := rebuildMoE(rw, []*ir.Node{node}, head, stacks, residual, a, node.Outputs[0]); err != nil {
		return ir.NoMatch, err // the same node with other schedule attributes: cannot fail on a verified graph
	}
	return ir.Applied, nil
}

// bandWidth is the N-band width for the first stack [E,N,K] (gate or
// gate_up, the larger GEMM): the most output columns, a multiple of 64
// (a CTA tile), whose rows of one expert fit in L2BandBytes; at least 64
// (or N if smaller) and at most N.
func bandWidth(stack *ir.Value) int {
	sh := stack.Type.Shape
	if len(sh) != 3 || !sh[1].IsConst() || !sh[2].IsConst() {
		return 0
	}
	n, k := sh[1].N, sh[2].N
	row := stack.Type.DType.Bytes(int64(k))
	if row <= 0 {
		return 0
	}
	b := int(L2BandBytes/row) / 64 * 64
	return min(max(64, b), n)
}
