package passes

import (
	"lagc/ir"
)

func init() {
	Register(&Pass{Name: "qkvg-concat", Doc: "the q, k, v and gate projections of each attention -> one matmul_split over their concatenated rows", Run: qkvgConcat})
}

// qkvgConcat rewrites, for every attention node, the matmuls producing its
// q, k and v (through reshape, rms_norm and rope) and the gate of the
// softplus_gate reading its output into one matmul_split against
// blk.N.attn_qkvg.weight = concat(attn_q, attn_k, attn_v, attn_gate) along
// the rows, whose outputs are the four projections as before.
//
// Precondition (else the attention is left as it is): all four are
// matmuls of the same activation by weights of one dtype.
func qkvgConcat(s *State) error {
	g := s.Graph
	done := 0
	var skipped skips
	var attns []*ir.Node
	for _, n := range g.Nodes {
		if n.Op == "attention" {
			attns = append(attns, n)
		}
	}
	readers := map[*ir.Value][]*ir.Node{}
	for _, n := range g.Nodes {
		for _, v := range n.Inputs {
			readers[v] = append(readers[v], n)
		}
	}
	for _, at := range attns {
		projs := []*ir.Node{projection(at.Inputs[0]), projection(at.Inputs[1]), projection(at.Inputs[2])}
		for _, r := range readers[at.Outputs[0]] {
			if r.Op == "softplus_gate" && r.Inputs[0] == at.Outputs[0] {
				projs = append(projs, projection(r.Inputs[1]))
				break
			}
		}
		if ok := fuseProjections(g, projs); ok {
			done++
		} else {
			skipped.add(qkvgBlocker(projs))
		}
	}
	s.Notef("qkvg-concat: %d attentions fused, %s", done, &skipped)
	return nil
}

// projection follows v back through views, norms and rope to the matmul by
// a weight that produced it (nil if there is none).
func projection(v *ir.Value) *ir.Node {
	for v != nil && v.Def != nil {
		n := v.Def
		switch n.Op {
		case "reshape", "rms_norm", "rope":
			v = n.Inputs[0]
			continue
		case "matmul":
			if plainWeight(n.Inputs[1]) && n.Inputs[0].Kind != ir.Weight {
				return n
			}
		}
		return nil
	}
	return nil
}

// fuseProjections turns matmuls of one activation by several weights into a
// matmul_split; false when the precondition fails.
func fuseProjections(g *ir.Graph, projs []*ir.Node) bool {
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
	cat, err := derive(g, derivedName(g, ws[0], "attn_q", "attn_qkvg"), "concat", ir.Attrs{"axis": 0}, ws...)
	if err != nil {
		return false
	}
	if _, err := replace(g, projs, "matmul_split", []*ir.Value{projs[0].Inputs[0], cat}, ir.Attrs{"sizes": sizes}, outs...); err != nil {
		dropUnread(g)
		return false
	}
	return true
}
