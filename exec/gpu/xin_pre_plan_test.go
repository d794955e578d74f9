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
	i := slices.IndexFunc(traceModels, func(m traceModel) bool { return m.name == "laguna-s-2.1-q4_k_m" })
	if i < 0 {
		t.Fatal("no laguna-s-2.1-q4_k_m trace model")
	}
	decode := func(m traceModel) []lower.Launch {
		var flat []lower.Launch
		for _, st := range tracePlan(t, m, ir.BF16).Decode.Steps {
			flat = append(flat, st.Launches...)
		}
		return flat
	}
	// The default plan without fuseDownShared (which joins the last two)
	// has them fused: one of each a MoE layer.
	m := traceModels[i]
	m.disable = []string{"fuseDownShared"}
	fused := decode(m)
	for _, k := range []string{"moe_gateup_qgemv_trig", "moe_down_qgemv_pre", "qgemv_xin_norm_pre"} {
		if n := countKernel(fused, k); n != 3 {
			t.Fatalf("%d %s launches in the 4-layer decode plan without fuseDownShared, want 3", n, k)
		}
	}
	m.disable = []string{"fuseXInPre", "fuseDownPre"}
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

// TestDownSharedPlan: the default decode plan (S-2.1, q4_k_m, 4 layers)
// runs moe_down_shexp_norm once a MoE layer and no qgemv_xin_norm_pre; in
// the plan without fuseDownShared, lower.DownShared joins each
// moe_down_qgemv_pre and qgemv_xin_norm_pre pair into one launch of the
// routed down's geometry and arguments, then the shared GEMV's (K, rows,
// row0, w, xin), the offset of its activations in shared memory and the
// norm's, and refuses the pairs whose invariant fails.
func TestDownSharedPlan(t *testing.T) {
	i := slices.IndexFunc(traceModels, func(m traceModel) bool { return m.name == "laguna-s-2.1-q4_k_m" })
	if i < 0 {
		t.Fatal("no laguna-s-2.1-q4_k_m trace model")
	}
	decode := func(m traceModel) []lower.Launch {
		var flat []lower.Launch
		for _, st := range tracePlan(t, m, ir.BF16).Decode.Steps {
			flat = append(flat, st.Launches...)
		}
		return flat
	}
	fused := decode(traceModels[i])
	if n, m := countKernel(fused, "moe_down_shexp_norm"), countKernel(fused, "qgemv_xin_norm_pre"); n != 3 || m != 0 {
		t.Fatalf("default 4-layer decode plan: %d moe_down_shexp_norm (want 3), %d qgemv_xin_norm_pre (want 0)", n, m)
	}
	m := traceModels[i]
	m.disable = []string{"fuseDownShared"}
	flat := decode(m)
	pairs := 0
	for k := 0; k+1 < len(flat); k++ {
		d, g := flat[k], flat[k+1]
		if d.Kernel != "moe_down_qgemv_pre" || g.Kernel != "qgemv_xin_norm_pre" {
			continue
		}
		pairs++
		f, err := lower.DownShared(d, g)
		if err != nil {
			t.Fatalf("DownShared(%s, %s): %v", d.NameExpr(), g.NameExpr(), err)
		}
		xoff := (d.Shmem + 255) &^ 255
		want := append(append(append([]lower.Arg(nil), d.Args...), g.Args[1], g.Args[2], g.Args[3], g.Args[4], g.Args[5]), g.Args[8:]...)
		if f.Kernel != "moe_down_shexp_norm" || f.Grid != d.Grid || f.Block != d.Block || f.Shmem != xoff+3*int(g.Args[1].Int)/2 ||
			len(f.Args) != len(want)+1 || !slices.Equal(f.Args[:18], want[:18]) || f.Args[18].Int != int64(xoff) ||
			!slices.Equal(f.Args[19:], want[18:]) || !slices.Equal(f.Ints, []int64{d.Ints[0], d.Ints[1], d.Ints[2], d.Ints[3], g.Ints[0], g.Ints[5]}) {
			t.Fatalf("DownShared(%s, %s) = %s, want the routed down's geometry and both launches' arguments", d.NameExpr(), g.NameExpr(), f)
		}
		if found := lower.FusionNames(); !slices.Contains(found, "fuseDownShared") {
			t.Fatalf("fuseDownShared is not among the fusions %v", found)
		}
		bad := func(what, want string, d, g lower.Launch) {
			t.Helper()
			if _, err := lower.DownShared(d, g); err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%s: %v, want a refusal saying %q", what, err, want)
			}
		}
		clone := func(l lower.Launch) lower.Launch {
			l.Args, l.Ints = append([]lower.Arg(nil), l.Args...), append([]int64(nil), l.Ints...)
			return l
		}
		b := clone(g)
		b.Args[5] = d.Args[11] // the shared GEMV's input inside the routed down's output
		bad("xin over the routed output", "reads what", d, b)
		b = clone(g)
		b.Args[7].Int = 0 // storing rather than adding to the routed sum
		bad("no accumulate", "does not add", d, b)
		b = clone(g)
		b.Args[6] = g.Args[5] // another y
		bad("another y", "does not add", d, b)
		b = clone(g)
		b.Ints[1] = 2 // two activation rows
		bad("two rows", "one row", d, b)
		b = clone(g)
		b.Ints[4] = 2 // split sums
		bad("split", "one row", d, b)
		dd := clone(d)
		dd.Grid[0] *= 2 // two tokens
		bad("two tokens", "one token", dd, g)
		dd = clone(d)
		dd.Ints[5] = 0 // not fuseXInPre's pair
		bad("TRIG 0", "TRIG", dd, g)
		bad("swapped", "is not a moe_down_qgemv_pre", g, d)
	}
	if pairs != 3 {
		t.Fatalf("%d moe_down_qgemv_pre, qgemv_xin_norm_pre pairs in the 4-layer decode plan without fuseDownShared, want 3", pairs)
	}
}
