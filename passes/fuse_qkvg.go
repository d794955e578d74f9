package passes

import (
	"fmt"
	"slices"
	"strings"

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
// matmuls of the same activation by weights of one dtype. Where they are
// not of one dtype (llama.cpp's Q4_K_S keeps attn_v in q5_k, its Q4_K_M
// in q6_k in some layers), those of q's dtype are concatenated
// (blk.N.attn_qkg.weight: q, k and the gate), provided k is among them, so
// that q and k still come out as one row for the norm-rope and attention
// fusions; the others stay matmuls.
func qkvgConcat(s *State) error {
	why := newBlockers()
	var apart []string // for each attention fused in part, why
	apply := func(rw *ir.Rewriter, at *ir.Node) (ir.Outcome, error) {
		out, part, err := fuseQKVG(rw, at)
		if out == ir.Applied && part != "" {
			apart = append(apart, part)
		}
		return out, err
	}
	st, err := s.Graph.Rewrite(&ir.RewritePattern{Name: "qkvg", Roots: []string{"attention", "attention_gate"}, Apply: why.wrap(apply, qkvgBlocker)})
	if err != nil {
		return err
	}
	fused := fmt.Sprintf("%d attentions fused", st.Applied["qkvg"])
	if len(apart) > 0 {
		fused += fmt.Sprintf(" (%d in part: a projection of another dtype stays apart, e.g. %s)", len(apart), apart[0])
	}
	s.Notef("qkvg-concat: %s, %s", fused, why.note(s.Graph, st.Declined["qkvg"]))
	return nil
}

// fuseQKVG concatenates at's projections, all or (part: why the others
// stay apart) those of q's dtype.
func fuseQKVG(rw *ir.Rewriter, at *ir.Node) (out ir.Outcome, part string, err error) {
	var projs []*ir.Node
	for _, v := range qkvgInputs(rw, at) {
		p, fused := projection(v)
		if fused {
			return ir.NoMatch, "", nil // fused already
		}
		projs = append(projs, p)
	}
	if fuseProjections(rw, projs) {
		return ir.Applied, "", nil
	}
	if same := sameAsQ(projs); same != nil {
		var ws []*ir.Value
		for _, p := range projs {
			ws = append(ws, p.Inputs[1])
		}
		if part := concatBlocker(ws...); fuseProjections(rw, same) {
			return ir.Applied, part, nil
		}
	}
	return ir.Declined, "", nil
}

// sameAsQ is the projections of q's weight dtype when k's is the same and
// another's is not (nil otherwise): the part of q, k, v, g that
// concatenates.
func sameAsQ(projs []*ir.Node) []*ir.Node {
	if len(projs) < 3 || slices.Contains(projs, nil) {
		return nil
	}
	dt := projs[0].Inputs[1].Type.DType
	var same []*ir.Node
	for _, p := range projs {
		if p.Inputs[1].Type.DType == dt {
			same = append(same, p)
		}
	}
	if projs[1].Inputs[1].Type.DType != dt || len(same) == len(projs) {
		return nil
	}
	return same
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
	cat, err := rw.Derive(derivedName(rw.Graph(), ws[0], "attn_q", "attn_"+projectionLetters(ws)), "concat", ir.Attrs{"axis": 0}, ws...)
	if err != nil {
		return false
	}
	_, err = rw.Replace(projs, "matmul_split", []*ir.Value{projs[0].Inputs[0], cat}, ir.Attrs{"sizes": sizes}, outs...)
	return err == nil
}

// projectionLetters names concatenated attention projections by their
// weights' names (attn_q, attn_k, attn_v, attn_gate): "qkvg", or "qkg"
// without v.
func projectionLetters(ws []*ir.Value) string {
	var b strings.Builder
	for _, w := range ws {
		for _, p := range []struct{ name, letter string }{{".attn_q.", "q"}, {".attn_k.", "k"}, {".attn_v.", "v"}, {".attn_gate.", "g"}} {
			if strings.Contains(w.Name, p.name) {
				b.WriteString(p.letter)
			}
		}
	}
	if b.Len() != len(ws) {
		return "qkvg" // not the usual names: the name it always had
	}
	return b.String()
}
