package passes

import (
	"lagc/ir"
)

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
	mm, err := s.Graph.Rewrite(&ir.RewritePattern{Name: "matmul-add", Roots: []string{"add"}, Apply: foldMatMul})
	if err != nil {
		return err
	}
	moe, err := s.Graph.Rewrite(&ir.RewritePattern{Name: "moe-residual", Roots: []string{"add"}, Apply: foldMoE})
	if err != nil {
		return err
	}
	s.Notef("residual-fold: %d matmuls and %d MoE nodes accumulate into their residual", mm.Applied["matmul-add"], moe.Applied["moe-residual"])
	return nil
}

// residualMatMul matches add(r, matmul(x, W)) in either order.
var residualMatMul = ir.P("add", ir.Any("r"), ir.P("matmul", ir.Any("x"), ir.W("w")).As("p"))

func foldMatMul(rw *ir.Rewriter, add *ir.Node) (ir.Outcome, error) {
	for _, m := range ir.Matches(residualMatMul, add.Outputs[0]) {
		p, r, x := m["p"], m["r"], m["x"]
		if x.Kind == ir.Weight || rw.NumUses(p) != 1 || p == r {
			continue
		}
		if _, err := rw.Replace([]*ir.Node{add, p.Def}, "matmul_add", []*ir.Value{x, m["w"], r}, nil, add.Outputs[0]); err == nil {
			return ir.Applied, nil
		}
	}
	return ir.NoMatch, nil
}

// residualMoE matches add(r, moe) in either order, the MoE output possibly
// through a view (a layer without a shared expert reshapes it).
var residualMoE = []*ir.Pattern{
	ir.P("add", ir.Any("r"), ir.P("reshape", moeValue()).As("view")),
	ir.P("add", ir.Any("r"), moeValue()),
}

func moeValue() *ir.Pattern { return ir.Any("moe").If(func(v *ir.Value) bool { return isMoE(v.Def) }) }

func foldMoE(rw *ir.Rewriter, add *ir.Node) (ir.Outcome, error) {
	for _, pat := range residualMoE {
		for _, m := range ir.Matches(pat, add.Outputs[0]) {
			old := []*ir.Node{add}
			if view := m["view"]; view != nil {
				if !view.Type.Equal(m["moe"].Type) || rw.NumUses(view) != 1 {
					continue // not an identity view, or read elsewhere
				}
				old = append(old, view.Def)
			}
			p, r := m["moe"], m["r"]
			n := p.Def
			if rw.NumUses(p) != 1 || p == r || moeAttrs(n)["residual"] != 0 {
				continue
			}
			head, stacks, _ := moeParts(n)
			if _, err := rebuildMoE(rw, append(old, n), head, stacks, r, moeAttrs(n), add.Outputs[0]); err == nil {
				return ir.Applied, nil
			}
		}
	}
	return ir.NoMatch, nil
}
