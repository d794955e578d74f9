package passes

import (
	"lagc/ir"
)

func init() {
	Register(&Pass{Name: "residual-fold", Doc: "add(r, matmul(x, W)) -> matmul_add (o_proj, down projections); add(r, moe) -> moe_grouped{residual=1}: the GEMM epilogue accumulates into r", Run: residualFold})
}

// residualFold rewrites the residual adds of a layer into the epilogue of
// the GEMM computing the other summand:
//
//	add(r, matmul(x, W))  ->  matmul_add(x, W, r)           o_proj, dense and shared down_proj
//	add(r, moe(...))      ->  moe_grouped{residual=1}(..., r) routed (and merged shared) experts
//
// (either operand order; the MoE output may pass through an identity
// reshape, as it does in a layer without a shared expert). No weight
// transform is needed. Precondition: the matmul or MoE result has no other
// reader, and the MoE node has no residual yet.
func residualFold(s *State) error {
	g := s.Graph
	mm, moe := 0, 0
	var adds []*ir.Node
	for _, n := range g.Nodes {
		if n.Op == "add" {
			adds = append(adds, n)
		}
	}
	for _, add := range adds {
		if foldMatMul(g, add) {
			mm++
		}
	}
	for _, add := range adds {
		if inGraph(g, add) && foldMoE(g, add) {
			moe++
		}
	}
	s.Notef("residual-fold: %d matmuls and %d MoE nodes accumulate into their residual", mm, moe)
	return nil
}

func foldMatMul(g *ir.Graph, add *ir.Node) bool {
	u := uses(g)
	for _, side := range []int{1, 0} {
		p, r := add.Inputs[side], add.Inputs[1-side]
		n := p.Def
		if n == nil || n.Op != "matmul" || !plainWeight(n.Inputs[1]) || n.Inputs[0].Kind == ir.Weight || u[p] != 1 || p == r {
			continue
		}
		if _, err := replace(g, []*ir.Node{add, n}, "matmul_add", []*ir.Value{n.Inputs[0], n.Inputs[1], r}, nil, add.Outputs[0]); err == nil {
			return true
		}
	}
	return false
}

func foldMoE(g *ir.Graph, add *ir.Node) bool {
	u := uses(g)
	for _, side := range []int{1, 0} {
		p, r := add.Inputs[side], add.Inputs[1-side]
		old := []*ir.Node{add}
		if p.Def != nil && p.Def.Op == "reshape" && p.Type.Equal(p.Def.Inputs[0].Type) && u[p] == 1 {
			old = append(old, p.Def) // an identity view of the MoE output
			p = p.Def.Inputs[0]
		}
		n := p.Def
		if !isMoE(n) || u[p] != 1 || p == r || moeAttrs(n)["residual"] != 0 {
			continue
		}
		head, stacks, _ := moeParts(n)
		if _, err := rebuildMoE(g, append(old, n), head, stacks, r, moeAttrs(n), add.Outputs[0]); err == nil {
			return true
		}
	}
	return false
}
