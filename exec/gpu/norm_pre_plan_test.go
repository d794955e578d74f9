package gpu

import (
	"testing"

	"lagc/ir"
	"lagc/lower"
)

// TestNormPrePlan: the default decode plan of a 4-layer S-2.1 in the
// q4_k_m recipe runs o_proj after each decode attention as qgemv_norm_pre
// (fuseNormPre) with qgemv_norm's arguments, and qgemv_norm without the
// fusion; lower.NormPre refuses a GEMV after another launch, or another
// GEMV.
func TestNormPrePlan(t *testing.T) {
	m := traceModels[2]
	if m.name != "laguna-s-2.1-q4_k_m" {
		t.Fatalf("trace model 2 is %s", m.name)
	}
	flat := func(m traceModel) []lower.Launch {
		var out []lower.Launch
		for _, st := range tracePlan(t, m, ir.BF16).Decode.Steps {
			out = append(out, st.Launches...)
		}
		return out
	}
	got := flat(m)
	m.disable = []string{"fuseNormPre"}
	was := flat(m)
	if len(got) != len(was) {
		t.Fatalf("%d decode launches, %d without fuseNormPre", len(got), len(was))
	}
	pairs := 0
	for i := 1; i < len(got); i++ {
		if was[i-1].Kernel != "attn_decode" {
			if got[i].Kernel == "qgemv_norm_pre" {
				t.Errorf("launch %d: qgemv_norm_pre after %s", i, got[i-1].NameExpr())
			}
			continue
		}
		pairs++
		if was[i].Kernel != "qgemv_norm" || got[i].Kernel != "qgemv_norm_pre" || got[i].String() != "qgemv_norm_pre"+was[i].String()[len("qgemv_norm"):] {
			t.Errorf("launch %d after the attention: %s, without fuseNormPre %s", i, got[i], was[i])
		}
		if _, _, err := lower.NormPre(was[i-2], was[i]); err == nil {
			t.Errorf("NormPre after %s: no error", was[i-2].NameExpr())
		}
		if _, _, err := lower.NormPre(was[i-1], was[i+1]); err == nil {
			t.Errorf("NormPre of %s: no error", was[i+1].NameExpr())
		}
	}
	if pairs != 4 {
		t.Fatalf("%d attention, o_proj pairs in the 4-layer decode plan, want 4", pairs)
	}
}

// TestQGEMVPrePlan: in the default decode plan of a 4-layer S-2.1 in the
// q4_k_m recipe the GEMV after each MoE layer's join (the next layer's
// q, k, v and gate, or the LM head) is qgemv_pre (fuseQGEMVPre) with
// qgemv's arguments, and qgemv without the fusion; lower.QGEMVPre refuses
// a GEMV after another launch, or another kernel.
func TestQGEMVPrePlan(t *testing.T) {
	m := traceModels[2]
	flat := func(m traceModel) []lower.Launch {
		var out []lower.Launch
		for _, st := range tracePlan(t, m, ir.BF16).Decode.Steps {
			out = append(out, st.Launches...)
		}
		return out
	}
	got := flat(m)
	m.disable = []string{"fuseQGEMVPre"}
	was := flat(m)
	if len(got) != len(was) {
		t.Fatalf("%d decode launches, %d without fuseQGEMVPre", len(got), len(was))
	}
	pairs := 0
	for i := 1; i+1 < len(got); i++ {
		if was[i-1].Kernel != "qgemv_join_norm" {
			if got[i].Kernel == "qgemv_pre" {
				t.Errorf("launch %d: qgemv_pre after %s", i, got[i-1].NameExpr())
			}
			continue
		}
		pairs++
		if was[i].Kernel != "qgemv" || got[i].String() != "qgemv_pre"+was[i].String()[len("qgemv"):] {
			t.Errorf("launch %d after the join: %s, without fuseQGEMVPre %s", i, got[i], was[i])
		}
		if _, _, err := lower.QGEMVPre(was[i-2], was[i]); err == nil {
			t.Errorf("QGEMVPre after %s: no error", was[i-2].NameExpr())
		}
		if _, _, err := lower.QGEMVPre(was[i-1], was[i+1]); err == nil {
			t.Errorf("QGEMVPre of %s: no error", was[i+1].NameExpr())
		}
	}
	if pairs != 3 {
		t.Fatalf("%d join, GEMV pairs in the 4-layer decode plan, want 3 (one a MoE layer)", pairs)
	}
}
