package passes

import (
	"lagc/ir"
)

// gateUpFuse rewrites
//
//	mul(silu(matmul(x, Wg)), matmul(x, Wu))  ->  matmul_swiglu(x, Wgu)
//
// with Wgu = concat(Wg, Wu) along the rows (blk.N.ffn_gate_up.weight,
// blk.N.ffn_gate_up_shexp.weight), and every MoE node with separate gate
// and up stacks into moe_grouped{gate_up="fused"} over
// blk.N.ffn_gate_up_exps.weight = concat(gate, up) along axis 1 [E,2I,H].
// The MLPs are rewritten first, then the expert stacks, so that the
// derived weights are declared in that order.
//
// Precondition: gate and up have the same shape and dtype, and the
// intermediate results (the two products and the silu) have no other
// reader; otherwise the MLP is left as it is.
func gateUpFuse(s *State) error {
	why := newBlockers()
	mlps, err := s.Graph.Rewrite(&ir.RewritePattern{Name: "swiglu", Roots: []string{"mul"}, Apply: why.wrap(fuseSwiGLU, swigluBlocker)})
	if err != nil {
		return err
	}
	moes, err := s.Graph.Rewrite(&ir.RewritePattern{Name: "moe-gate-up", Roots: moeOps, Apply: why.wrap(fuseMoEGateUp, stacksBlocker)})
	if err != nil {
		return err
	}
	s.Notef("gate-up-fuse: %d MLPs and %d expert stacks fused, %s",
		mlps.Applied["swiglu"], moes.Applied["moe-gate-up"], why.note(s.Graph, mlps.Declined["swiglu"]+moes.Declined["moe-gate-up"]))
	return nil
}

// swiGLU matches a SwiGLU MLP's activation; mul is commutative, so the two
// operands match in either order.
var swiGLU = ir.P("mul",
	ir.P("silu", ir.P("matmul", ir.Any("x"), ir.W("wg")).As("g")).As("s"),
	ir.P("matmul", ir.Any("x"), ir.W("wu")).As("u")).As("out")

func fuseSwiGLU(rw *ir.Rewriter, mul *ir.Node) (ir.Outcome, error) {
	m, ok := ir.MatchValue(swiGLU, mul.Outputs[0])
	if !ok {
		return ir.NoMatch, nil
	}
	wg, wu := m["wg"], m["wu"]
	if rw.NumUses(m["g"]) != 1 || rw.NumUses(m["u"]) != 1 || rw.NumUses(m["s"]) != 1 || m["g"] == m["u"] ||
		!wg.Type.Equal(wu.Type) || wg.Type.Shape[0] != wu.Type.Shape[0] {
		return ir.Declined, nil
	}
	w, err := rw.Derive(derivedName(rw.Graph(), wg, "gate", "gate_up"), "concat", ir.Attrs{"axis": 0}, wg, wu)
	if err != nil {
		return ir.Declined, nil
	}
	old := []*ir.Node{m.Node("out"), m.Node("s"), m.Node("g"), m.Node("u")}
	if _, err := rw.Replace(old, "matmul_swiglu", []*ir.Value{m["x"], w}, nil, m["out"]); err != nil {
		return ir.Declined, nil
	}
	return ir.Applied, nil
}

func fuseMoEGateUp(rw *ir.Rewriter, n *ir.Node) (ir.Outcome, error) {
	if moeAttrs(n)["gate_up"] != ir.GateUpSplit {
		return ir.NoMatch, nil
	}
	head, stacks, residual := moeParts(n)
	gate, up, down := stacks[0], stacks[1], stacks[2]
	if !plainWeight(gate) || !plainWeight(up) || !gate.Type.Equal(up.Type) {
		return ir.Declined, nil
	}
	gu, err := rw.Derive(derivedName(rw.Graph(), gate, "gate", "gate_up"), "concat", ir.Attrs{"axis": 1}, gate, up)
	if err != nil {
		return ir.Declined, nil
	}
	a := moeAttrs(n)
	a["gate_up"] = ir.GateUpFused
	if _, err := rebuildMoE(rw, []*ir.Node{n}, head, []*ir.Value{gu, down}, residual, a, n.Outputs[0]); err != nil {
		return ir.Declined, nil
	}
	return ir.Applied, nil
}
