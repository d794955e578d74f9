package passes

import (
	"lagc/ir"
)

// sharedExpertMerge rewrites
//
//	add(moe(m, w, ids, stacks...), down_s(swiglu_s(m)))  ->  moe_grouped{shared=1}(m, w, ids, stacks'...)
//
// where each stack' is the routed stack with the shared expert's matrix
// appended as expert E: concat(stack, reshape(shared, [1,...])) along axis
// 0 (blk.N.ffn_{gate,up,gate_up,down}_exps_shexp.weight). The shared
// expert's output is added last, as the unfused add(routed, shared) does.
//
// Precondition: the shared width equals the expert width (Laguna-XS.2 and
// S-2.1: 512/512 and 1024/1024), the shared weights have the stacks'
// dtype, the MoE node has no shared expert or residual yet, and nothing
// else reads the two summands or the shared expert's intermediates.
func sharedExpertMerge(s *State) error {
	why := newBlockers()
	st, err := s.Graph.Rewrite(&ir.RewritePattern{Name: "shared-expert", Roots: []string{"add"}, Apply: why.wrap(mergeShared, sharedBlocker)})
	if err != nil {
		return err
	}
	s.Notef("shared-expert-merge: %d shared experts merged, %s", st.Applied["shared-expert"], why.note(s.Graph, st.Declined["shared-expert"]))
	return nil
}

// routedPlusShared matches the add of the routed experts' result and a
// matmul (the shared expert's down projection), in either order.
var routedPlusShared = ir.P("add",
	ir.Any("moe").If(func(v *ir.Value) bool { return isMoE(v.Def) }),
	ir.P("matmul").As("sd"))

// sharedMLP is a recognised shared expert: down(act) with act either
// matmul_swiglu(x, gu) or mul(silu(matmul(x, g)), matmul(x, u)).
type sharedMLP struct {
	x, g, u, gu, down *ir.Value
	nodes             []*ir.Node // its nodes, the down projection first
}

func matchShared(sd *ir.Node) (*sharedMLP, bool) {
	if !plainWeight(sd.Inputs[1]) || sd.Inputs[0].Def == nil {
		return nil, false
	}
	sh := &sharedMLP{down: sd.Inputs[1], nodes: []*ir.Node{sd}}
	act := sd.Inputs[0]
	if act.Def.Op == "matmul_swiglu" && plainWeight(act.Def.Inputs[1]) {
		sh.x, sh.gu = act.Def.Inputs[0], act.Def.Inputs[1]
		sh.nodes = append(sh.nodes, act.Def)
		return sh, true
	}
	if m, ok := ir.MatchValue(swiGLU, act); ok {
		sh.x, sh.g, sh.u = m["x"], m["wg"], m["wu"]
		sh.nodes = append(sh.nodes, act.Def, m.Node("s"), m.Node("g"), m.Node("u"))
		return sh, true
	}
	return nil, false
}

func mergeShared(rw *ir.Rewriter, add *ir.Node) (ir.Outcome, error) {
	m, ok := ir.MatchValue(routedPlusShared, add.Outputs[0])
	if !ok {
		return ir.NoMatch, nil
	}
	if !mergeSharedMatch(rw, add, m.Node("moe"), m.Node("sd")) {
		return ir.Declined, nil
	}
	return ir.Applied, nil
}

func mergeSharedMatch(rw *ir.Rewriter, add, moe, sd *ir.Node) bool {
	g := rw.Graph()
	a := moeAttrs(moe)
	if a["shared"] != 0 || a["residual"] != 0 {
		return false
	}
	sh, ok := matchShared(sd)
	head, stacks, _ := moeParts(moe)
	if !ok || sh.x != head[0] {
		return false
	}
	if rw.NumUses(moe.Outputs[0]) != 1 || rw.NumUses(sd.Outputs[0]) != 1 {
		return false
	}
	for _, n := range sh.nodes[1:] {
		if rw.NumUses(n.Outputs[0]) != 1 {
			return false
		}
	}
	// The shared matrices in the layout of the stacks.
	var mats []*ir.Value
	if a["gate_up"] == ir.GateUpFused {
		gu := sh.gu
		if gu == nil {
			if !sh.g.Type.Equal(sh.u.Type) {
				return false
			}
			var err error
			if gu, err = rw.Derive(derivedName(g, sh.g, "gate", "gate_up"), "concat", ir.Attrs{"axis": 0}, sh.g, sh.u); err != nil {
				return false
			}
		}
		mats = []*ir.Value{gu, sh.down}
	} else {
		gw, uw := sh.g, sh.u
		if gw == nil { // matmul_swiglu over a concatenation: take its halves
			f := sh.gu.From
			if f == nil || f.Op != "concat" || len(f.Srcs) != 2 || f.Attrs["axis"] != 0 {
				return false
			}
			gw, uw = f.Srcs[0], f.Srcs[1]
		}
		mats = []*ir.Value{gw, uw, sh.down}
	}
	merged := make([]*ir.Value, len(stacks))
	for i, st := range stacks {
		m := mats[i]
		ss, ms := st.Type.Shape, m.Type.Shape
		if !plainWeight(st) || st.Type.DType != m.Type.DType || len(ss) != 3 || len(ms) != 2 || ss[1] != ms[0] || ss[2] != ms[1] {
			return false // widths differ (shared != expert width) or dtypes differ
		}
		one, err := rw.Derive(derivedName(g, m, "_shexp", "_shexp_stacked"), "reshape", ir.Attrs{"shape": ir.Shape{ir.C(1), ms[0], ms[1]}}, m)
		if err != nil {
			return false
		}
		if merged[i], err = rw.Derive(derivedName(g, st, "_exps", "_exps_shexp"), "concat", ir.Attrs{"axis": 0}, st, one); err != nil {
			return false
		}
	}
	a["shared"] = 1
	// One node now computes the add: it takes the add's place and name.
	if _, err := rebuildMoE(rw, []*ir.Node{add, moe}, head, merged, nil, a, add.Outputs[0]); err != nil {
		return false
	}
	rw.EraseDead(sh.nodes...)
	return true
}
