package passes

import (
	"lagc/ir"
)

// expertOrder sets the schedule attributes of every MoE node, turning
// moe_experts into the equivalent moe_grouped: order="descending" (the
// grouped GEMM starts the experts with the most tokens routed this step,
// so the longest tiles do not run last). Only the schedule changes: the
// kernels sum each token's experts in a fixed order whatever the visit
// order. The grouped GEMM of an expert-ordered node also rasterises its
// CTAs in N-bands for L2 reuse: a hardware number lower chooses. No
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
	if node.Op == "moe_grouped" && a.Key() == moeAttrs(node).Key() {
		return ir.NoMatch, nil // scheduled already
	}
	if _, err := rebuildMoE(rw, []*ir.Node{node}, head, stacks, residual, a, node.Outputs[0]); err != nil {
		return ir.NoMatch, err // the same node with other schedule attributes: cannot fail on a verified graph
	}
	return ir.Applied, nil
}
