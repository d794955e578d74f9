package passes

import (
	"lagc/ir"
)

func init() {
	Register(&Pass{Name: "gate-up-fuse", Doc: "SwiGLU gate and up projections (dense, shared expert, routed expert stacks) -> one GEMM with a silu*mul epilogue", Run: gateUpFuse})
}

// gateUpFuse rewrites
//
//	mul(silu(matmul(x, Wg)), matmul(x, Wu))  ->  matmul_swiglu(x, Wgu)
//
// with Wgu = concat(Wg, Wu) along the rows (blk.N.ffn_gate_up.weight,
// blk.N.ffn_gate_up_shexp.weight), and every MoE node with separate gate
// and up stacks into moe_grouped{gate_up="fused"} over
// blk.N.ffn_gate_up_exps.weight = concat(gate, up) along axis 1 [E,2I,H].
//
// Precondition: gate and up have the same shape and dtype, and the
// intermediate results (the two products and the silu) have no other
// reader; otherwise the MLP is left as it is.
func gateUpFuse(s *State) error {
	g := s.Graph
	mlps, moes := 0, 0
	var skipped skips
	gate := ir.P("silu", ir.P("matmul", ir.Any("x"), ir.W("wg")).As("g")).As("s")
	up := ir.P("matmul", ir.Any("x"), ir.W("wu")).As("u")
	var matches []ir.Match
	matches = append(matches, g.FindAll(ir.P("mul", gate, up).As("out"))...)
	matches = append(matches, g.FindAll(ir.P("mul", up, gate).As("out"))...)
	for _, m := range matches {
		if m.Node("out") == nil || !inGraph(g, m.Node("out")) {
			continue // consumed by an earlier match
		}
		if fuseSwiGLU(g, m) {
			mlps++
		} else {
			skipped.add(concatBlocker(m["wg"], m["wu"]))
		}
	}
	for _, n := range append([]*ir.Node(nil), g.Nodes...) {
		if !isMoE(n) || moeAttrs(n)["gate_up"] != ir.GateUpSplit {
			continue
		}
		if fuseMoEGateUp(g, n) {
			moes++
		} else {
			_, stacks, _ := moeParts(n)
			skipped.add(concatBlocker(stacks[0], stacks[1]))
		}
	}
	s.Notef("gate-up-fuse: %d MLPs and %d expert stacks fused, %s", mlps, moes, &skipped)
	return nil
}

func fuseSwiGLU(g *ir.Graph, m ir.Match) bool {
	u := uses(g)
	wg, wu := m["wg"], m["wu"]
	if u[m["g"]] != 1 || u[m["u"]] != 1 || u[m["s"]] != 1 || m["g"] == m["u"] ||
		!wg.Type.Equal(wu.Type) || wg.Type.Shape[0] != wu.Type.Shape[0] {
		return false
	}
	w, err := derive(g, derivedName(g, wg, "gate", "gate_up"), "concat", ir.Attrs{"axis": 0}, wg, wu)
	if err != nil {
		return false
	}
	old := []*ir.Node{m.Node("out"), m.Node("s"), m.Node("g"), m.Node("u")}
	if _, err := replace(g, old, "matmul_swiglu", []*ir.Value{m["x"], w}, nil, m["out"]); err != nil {
		dropUnread(g)
		return false
	}
	return true
}

func fuseMoEGateUp(g *ir.Graph, n *ir.Node) bool {
	head, stacks, residual := moeParts(n)
	gate, up, down := stacks[0], stacks[1], stacks[2]
	if !plainWeight(gate) || !plainWeight(up) || !gate.Type.Equal(up.Type) {
		return false
	}
	gu, err := derive(g, derivedName(g, gate, "gate", "gate_up"), "concat", ir.Attrs{"axis": 1}, gate, up)
	if err != nil {
		return false
	}
	a := moeAttrs(n)
	a["gate_up"] = ir.GateUpFused
	if _, err := rebuildMoE(g, []*ir.Node{n}, head, []*ir.Value{gu, down}, residual, a, n.Outputs[0]); err != nil {
		dropUnread(g)
		return false
	}
	return true
}
