package passes

import (
	"lagc/ir"
)

// qkvgConcat rewrites, for every attention node, the matmuls producing its
// q, k and v (through reshape, rms_norm and rope, or norm_rope) and its
// output gate's (the gate of the softplus_gate reading its output, or of
// attention_gate) into one matmul_split against
// blk.N.attn_qkvg.weight = concat(attn_q, attn_k, attn_v, attn_gate) along
// the rows, whose outputs are the four projections as before.
//
// Precondition (else the attention is left as it is): all four are
// matmuls of the same activation by weights of one dtype.
func qkvgConcat(s *State) error {
	why := newBlockers()
	st, err := s.Graph.Rewrite(&ir.RewritePattern{Name: "qkvg", Roots: []string{"attention", "attention_gate"}, Apply: why.wrap(fuseQKVG, qkvgBlocker)})
	if err != nil {
		return err
	}
	s.Notef("qkvg-concat: %d attentions fused, %s", st.Applied["qkvg"], why.note(s.Graph, st.Declined["qkvg"]))
	return nil
}

func fuseQKVG(rw *ir.Rewriter, at *ir.Node) (ir.Outcome, error) {
	var projs []*ir.Node
	for _, v := range qkvgInputs(rw, at) {
		p, fused := projection(v)
		if fused {
			return ir.NoMatch, nil // fused already
		}
		projs = append(projs, p)
	}
	if !fuseProjections(rw, projs) {
		return ir.Declined, nil
	}
	return ir.Applied, nil
}

// qkvgInputs returns q, k and v of an attention node, and its output
// gate's gate if there is one: attention_gate's, or that of the
// softplus_gate reading attention's output.
func qkvgInputs(rw *ir.Rewriter, at *ir.Node) []*ir.Value {
	ins := []*ir.Value{at.Inputs[0], at.Inputs[1], at.Inputs[2]}
	if at.Op == "attention_gate" {
		return append(ins, at.Inputs[4])
	}
	for _, r := range rw.Users(at.Outputs[0]) {
		if r.Op == "softplus_gate" && r.Inputs[0] == at.Outputs[0] {
			return append(ins, r.Inputs[1])
		}
	}
	return ins
}

// projection follows v back through views, norms and rope to the matmul by
// a weight that produced it (nil if there is none); fused reports a
// matmul_split there instead.
func projection(v *ir.Value) (p *ir.Node, fused bool) {
	for v != nil && v.Def != nil {
		n := v.Def
		switch n.Op {
		case "reshape", "rms_norm", "rope", "norm_rope":
			v = n.Inputs[0]
			continue
		case "matmul":
			if plainWeight(n.Inputs[1]) && n.Inputs[0].Kind != ir.Weight {
				return n, false
			}
		case "matmul_split":
			return nil, true
		}
		return nil, false
	}
	return nil, false
}

// fuseProjections turns matmuls of one activation by several weights into a
// matmul_split; false when the precondition fails.
func fuseProjections(rw *ir.Rewriter, projs []*ir.Node) bool {
	if len(projs) < 2 {
		return false
	}
	seen := map[*ir.Node]bool{}
	var ws, outs []*ir.Value
	var sizes []int
	for _, p := range projs {
		if p == nil || seen[p] || p.Inputs[0] != projs[0].Inputs[0] {
			return false
		}
		seen[p] = true
		w := p.Inputs[1]
		if !w.Type.Shape[0].IsConst() {
			return false
		}
		ws = append(ws, w)
		outs = append(outs, p.Outputs[0])
		sizes = append(sizes, w.Type.Shape[0].N)
	}
	if !sameDType(ws...) {
		return false
	}
	cat, err := rw.Derive(derivedName(rw.Graph(), ws[0], "attn_q", "attn_qkvg"), "concat", ir.Attrs{"axis": 0}, ws...)
	if err != nil {
		return false
	}
	_, err = rw.Replace(projs, "matmul_split", []*ir.Value{projs[0].Inputs[0], cat}, ir.Attrs{"sizes": sizes}, outs...)
	return err == nil
}
