package passes

import (
	"lagc/ir"
)

func init() {
	Register(&Pass{Name: "expert-order", Doc: "MoE grouped-GEMM schedule: experts in descending tokens-routed order (order only, never results; lower adds the N-bands of L2 reuse)", Run: expertOrder})
}

// expertOrder sets the schedule attributes of every MoE node, turning
// moe_experts into the equivalent moe_grouped: order="descending" (the
// grouped GEMM starts the experts with the most tokens routed this step,
// so the longest tiles do not run last). Only the schedule changes: the
// kernels sum each token's experts in a fixed order whatever the visit
// order. The grouped GEMM of an expert-ordered node also rasterises its
// CTAs in N-bands for L2 reuse: a hardware number lower chooses. No
// precondition; no weight transform.
func expertOrder(s *State) error {
	g := s.Graph
	n := 0
	for _, node := range append([]*ir.Node(nil), g.Nodes...) {
		if !isMoE(node) {
			continue
		}
		head, stacks, residual := moeParts(node)
		a := moeAttrs(node)
		a["order"] = ir.OrderDescending
		if _, err := rebuildMoE(g, []*ir.Node{node}, head, stacks, residual, a, node.Outputs[0]); err != nil {
			return err // the same node with other schedule attributes: cannot fail on a verified graph
		}
		n++
	}
	s.Notef("expert-order: %d MoE nodes scheduled descending", n)
	return nil
}
