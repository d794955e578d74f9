package passes

import (
	"fmt"
	"maps"

	"lagc/ir"
)

// attentionGate rewrites every output gate of an attention into one
// attention_gate:
//
//	softplus_gate(attention(q, k, v, pos), g)  ->  attention_gate(q, k, v, pos, g)
//
// The attention kernels multiply by the gate as they write their output,
// where the unfused ops store the attention's output, launch the gate and
// read it back. Precondition: nothing else reads the attention's output.
// No weight transform.
func attentionGate(s *State) error {
	st, err := s.Graph.Rewrite(&ir.RewritePattern{Name: "attention-gate", Roots: []string{"softplus_gate"}, Apply: fuseAttentionGate})
	if err != nil {
		return err
	}
	s.Notef("attention-gate: %d output gates fused into their attention, %d skipped (the attention's output is read elsewhere)",
		st.Applied["attention-gate"], st.Declined["attention-gate"])
	return nil
}

var gatedAttention = ir.P("softplus_gate", ir.P("attention", ir.Any("q"), ir.Any("k"), ir.Any("v"), ir.Any("pos")).As("o"), ir.Any("g"))

func fuseAttentionGate(rw *ir.Rewriter, gate *ir.Node) (ir.Outcome, error) {
	m, ok := ir.MatchValue(gatedAttention, gate.Outputs[0])
	if !ok {
		return ir.NoMatch, nil
	}
	if rw.NumUses(m["o"]) != 1 {
		return ir.Declined, nil
	}
	at := m.Node("o")
	a := maps.Clone(at.Attrs)
	a["gating"] = gate.Attrs["gating"]
	if _, err := rw.Replace([]*ir.Node{at, gate}, "attention_gate", []*ir.Value{m["q"], m["k"], m["v"], m["pos"], m["g"]}, a, gate.Outputs[0]); err != nil {
		// attention and softplus_gate accepted these types: cannot fail on a verified graph.
		return ir.NoMatch, fmt.Errorf("attention-gate at %s: %w", gate, err)
	}
	return ir.Applied, nil
}
