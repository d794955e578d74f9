package passes

import (
	"fmt"
	"maps"

	"lagc/ir"
)

// normRoPE rewrites every rope of a per-head RMS norm into one norm_rope:
//
//	rope(rms_norm(x, w), pos)  ->  norm_rope(x, w, pos)
//
// (Laguna's q_norm and k_norm before the rotary embedding). The device
// kernel normalises a head in registers and rotates it, where the unfused
// ops launch twice and store the normalised heads in between.
// Precondition: nothing else reads the norm's output. No weight
// transform.
func normRoPE(s *State) error {
	st, err := s.Graph.Rewrite(&ir.RewritePattern{Name: "norm-rope", Roots: []string{"rope"}, Apply: fuseNormRoPE})
	if err != nil {
		return err
	}
	s.Notef("norm-rope: %d head norms fused into their rope, %d skipped (the norm's output is read elsewhere)",
		st.Applied["norm-rope"], st.Declined["norm-rope"])
	return nil
}

var normThenRoPE = ir.P("rope", ir.P("rms_norm", ir.Any("x"), ir.Any("w")).As("normed"), ir.Any("pos"))

func fuseNormRoPE(rw *ir.Rewriter, rope *ir.Node) (ir.Outcome, error) {
	m, ok := ir.MatchValue(normThenRoPE, rope.Outputs[0])
	if !ok {
		return ir.NoMatch, nil
	}
	if rw.NumUses(m["normed"]) != 1 {
		return ir.Declined, nil
	}
	norm := m.Node("normed")
	a := ir.Attrs{"eps": norm.Attrs["eps"]}
	maps.Copy(a, rope.Attrs)
	if _, err := rw.Replace([]*ir.Node{norm, rope}, "norm_rope", []*ir.Value{m["x"], m["w"], m["pos"]}, a, rope.Outputs[0]); err != nil {
		// rms_norm and rope accepted these types: cannot fail on a verified graph.
		return ir.NoMatch, fmt.Errorf("norm-rope at %s: %w", rope, err)
	}
	return ir.Applied, nil
}
