package gpu

import (
	"slices"
	"strings"
	"testing"

	"lagc/ir"
	"lagc/lower"
)

// TestXInPrePlan: the default decode plan (S-2.1, q4_k_m) runs the
// kernels fuseXInPre and fuseDownPre make, one of each a MoE layer; in the
// plan without them, lower.XInPre takes the moe_down_qgemv and
// qgemv_xin_norm pairs (S-2.1, q4_k_m: one a MoE layer) to their _trig and
// _pre kernels with the same arguments, and refuses a pair whose GEMV
// input lies in the routed down's output, or launches of other kernels;
// lower.DownPre likewise the moe_gateup_qgemv and moe_down_qgemv pairs
// (after XInPre too: TRIG 1), refusing ids inside the gate+up's output.
func TestXInPrePlan(t *testing.T) {
	m := traceModelNamed(t, "laguna-s-2.1-q4_k_m")
	decode := func(m traceModel) []lower.Launch { return stepsFlat(tracePlan(t, m, ir.BF16).Decode) }
	// The default plan without sharedDownGateUp (which takes these three
	// launches on: TestSharedDownGateUpPlan) has them fused: one of each a
	// MoE layer.
	dm := m
	dm.disable = []string{"sharedDownGateUp"}
	fused := decode(dm)
	for _, k := range []string{"moe_gateup_qgemv_trig", "moe_down_qgemv_pre", "qgemv_xin_norm_pre"} {
		if n := countKernel(fused, k); n != 3 {
			t.Fatalf("%d %s launches in the default 4-layer decode plan, want 3", n, k)
		}
	}
	m.disable = []string{"fuseXInPre", "fuseDownPre", "sharedDownGateUp"}
	flat := decode(m)
	pairs := 0
	for i := 0; i+1 < len(flat); i++ {
		a, b := flat[i], flat[i+1]
		if a.Kernel != "moe_down_qgemv" || b.Kernel != "qgemv_xin_norm" {
			continue
		}
		pairs++
		pa, pb, err := lower.XInPre(a, b)
		if err != nil || pa.Kernel != "moe_down_qgemv_trig" || pb.Kernel != "qgemv_xin_norm_pre" ||
			pa.NameExpr() != strings.Replace(a.NameExpr(), "moe_down_qgemv", "moe_down_qgemv_trig", 1) || len(pa.Args) != len(a.Args) ||
			len(pb.Args) != len(b.Args) {
			t.Fatalf("XInPre(%s, %s) = %s, %s, %v", a.NameExpr(), b.NameExpr(), pa.NameExpr(), pb.NameExpr(), err)
		}
		for j := range a.Args {
			if pa.Args[j] != a.Args[j] {
				t.Fatalf("moe_down_qgemv_trig argument %d: %v, was %v", j, pa.Args[j], a.Args[j])
			}
		}
		for j := range b.Args {
			if pb.Args[j] != b.Args[j] {
				t.Fatalf("qgemv_xin_norm_pre argument %d: %v, was %v", j, pb.Args[j], b.Args[j])
			}
		}
		// The GEMV's input inside the routed down's output: refused.
		bad := b
		bad.Args = append([]lower.Arg(nil), b.Args...)
		bad.Args[5] = a.Args[11]
		if _, _, err := lower.XInPre(a, bad); err == nil || !strings.Contains(err.Error(), "reads what") {
			t.Errorf("xin over the routed down's output: %v, want a refusal", err)
		}
		// Other kernels: refused.
		if _, _, err := lower.XInPre(b, a); err == nil {
			t.Error("XInPre of the pair swapped: no error")
		}
	}
	if pairs != 3 {
		t.Fatalf("%d moe_down_qgemv, qgemv_xin_norm pairs in the 4-layer decode plan, want 3 (one a MoE layer)", pairs)
	}
	pairs = 0
	for i := 0; i+1 < len(flat); i++ {
		g, d := flat[i], flat[i+1]
		if g.Kernel != "moe_gateup_qgemv" || d.Kernel != "moe_down_qgemv" {
			continue
		}
		pairs++
		for trig, dk := range []string{"moe_down_qgemv", "moe_down_qgemv_trig"} {
			d.Kernel = dk
			pg, pd, err := lower.DownPre(g, d)
			if err != nil || pg.Kernel != "moe_gateup_qgemv_trig" || pd.Kernel != "moe_down_qgemv_pre" || len(pd.Ints) != 6 ||
				pd.Ints[5] != int64(trig) || !slices.Equal(pd.Ints[:5], d.Ints) || !slices.Equal(pg.Args, g.Args) ||
				!slices.Equal(pd.Args, d.Args) {
				t.Fatalf("DownPre(%s, %s) = %s, %s, %v", g.NameExpr(), d.NameExpr(), pg.NameExpr(), pd.NameExpr(), err)
			}
		}
		bad := d
		bad.Args = append([]lower.Arg(nil), d.Args...)
		bad.Args[9] = g.Args[13] // ids inside the gate+up's quantised output
		if _, _, err := lower.DownPre(g, bad); err == nil || !strings.Contains(err.Error(), "reads early") {
			t.Errorf("ids over the gate+up's output: %v, want a refusal", err)
		}
		all := d
		all.Ints = append([]int64(nil), d.Ints...)
		all.Ints[4] = 1
		if _, _, err := lower.DownPre(g, all); err == nil || !strings.Contains(err.Error(), "ALL") {
			t.Errorf("down with ALL: %v, want a refusal", err)
		}
	}
	if pairs != 3 {
		t.Fatalf("%d moe_gateup_qgemv, moe_down_qgemv pairs in the 4-layer decode plan, want 3", pairs)
	}
}

// countKernel is the number of launches of kernel in ls.
func countKernel(ls []lower.Launch, kernel string) int {
	n := 0
	for _, l := range ls {
		if l.Kernel == kernel {
			n++
		}
	}
	return n
}
