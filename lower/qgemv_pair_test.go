package lower

import (
	"reflect"
	"regexp"
	"strings"
	"testing"

	"lagc/ckpt"
	"lagc/ir"
	"lagc/quant"
)

// TestFuseQGEMVPair: in the decode plan of S-2.1's first layers in
// llama.cpp's Q4_K_M mixture (attn_v in q6_k under q4_k) each layer's v
// GEMV and the q, k, gate GEMV after it become one qgemv_pair launch, and
// nothing else changes against the plan without the fusion; without
// attn_v raised (lagc's q4_k_m) the plan has no pair.
func TestFuseQGEMVPair(t *testing.T) {
	rules := []ckpt.TypeRule{{Pattern: regexp.MustCompile(`attn_v`), Type: ckpt.Q6_K}}
	o := Options{DType: ir.BF16, MaxContext: 4096, SMs: 132}
	fused, err := quantPlanRules(t, "laguna-s-2.1", 2, "q4_k", rules, o)
	if err != nil {
		t.Fatal(err)
	}
	noPair := o
	noPair.DisableFusions = []string{"fuseQGEMVPair"}
	plain, err := quantPlanRules(t, "laguna-s-2.1", 2, "q4_k", rules, noPair)
	if err != nil {
		t.Fatal(err)
	}
	got, err := fused.At(fused.Decode, 1)
	if err != nil {
		t.Fatal(err)
	}
	want, err := plain.At(plain.Decode, 1)
	if err != nil {
		t.Fatal(err)
	}
	fusePairs(want, false, func(a, b Launch, _ []Launch) (Launch, bool) {
		if a.Kernel != "qgemv" || b.Kernel != "qgemv" || a.Ints[0] != 14 {
			return Launch{}, false // the pairs this plan should have: v (q6_k) then q, k, gate (q4_k)
		}
		l, err := QGEMVPair(a, b)
		if err != nil {
			t.Fatal(err)
		}
		return l, true
	})
	if !reflect.DeepEqual(got, want) {
		t.Errorf("the fused decode plan is not the plain one with its v and q,k,gate GEMVs paired")
	}
	n := 0
	for _, ls := range got {
		for _, l := range ls {
			if l.Kernel == "qgemv_pair" {
				n++
				if l.Grid[0] <= int(l.Args[0].Int) || l.DTypes[0] != "bf16" || l.Ints[1] != int64(quant.Q6_K) || l.Ints[5] != int64(quant.Q4_K) {
					t.Errorf("pair %v", l)
				}
			}
		}
	}
	if n != 2 {
		t.Errorf("%d qgemv_pair launches in 2 layers' decode, want 2", n)
	}
	if p, err := quantPlan(t, "laguna-s-2.1", 2, "q4_k_m", o); err != nil || strings.Contains(launchNames(p.Decode), "qgemv_pair") {
		t.Errorf("q4_k_m: a pair (%v)", err)
	}
}

// launchNames is a schedule's launches' kernel names, space-separated.
func launchNames(s *Schedule) string {
	var b strings.Builder
	for _, st := range s.Steps {
		for _, l := range st.Launches {
			b.WriteString(l.Kernel + " ")
		}
	}
	return b.String()
}

// TestQGEMVPairInvariant: QGEMVPair refuses GEMVs of different rows, and
// a pair where one writes what the other reads or writes.
func TestQGEMVPairInvariant(t *testing.T) {
	w, xq := Ptr{BaseWeights, 0}, Ptr{BaseWorkspace, 0}
	gemv := func(T, N int, y Ptr) Launch {
		l, err := QGEMV(QGEMVArgs{T: T, K: 3072, N: N, XQ: xq, W: w, Y: y, WType: quant.Q4_K, WRows: N, YType: "bf16"})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	a, b := gemv(1, 1024, Ptr{BaseArena, 0}), gemv(1, 8240, Ptr{BaseArena, 1 << 20})
	p, err := QGEMVPair(a, b)
	if err != nil {
		t.Fatal(err)
	}
	if p.Kernel != "qgemv_pair" || p.Grid[0] != a.Grid[0]+b.Grid[0] || int(p.Args[0].Int) != a.Grid[0] ||
		!reflect.DeepEqual(p.Args[1:10], a.Args) || !reflect.DeepEqual(p.Args[10:], b.Args) {
		t.Errorf("pair %v of %v and %v", p, a, b)
	}
	for _, c := range []struct {
		name   string
		a, b   Launch
		reason string
	}{
		{"rows", a, gemv(2, 8240, Ptr{BaseArena, 1 << 20}), "rows"},
		{"same y", a, gemv(1, 8240, Ptr{BaseArena, 0}), "writes"},
		{"y over x", a, gemv(1, 8240, xq), "writes"},
		{"not a qgemv", modLaunch(a, func(l *Launch) { l.Kernel = "qgemv_xin" }), b, "not qgemv launches"},
	} {
		if _, err := QGEMVPair(c.a, c.b); err == nil || !strings.Contains(err.Error(), c.reason) {
			t.Errorf("%s: %v, want an error about %q", c.name, err, c.reason)
		}
	}
}
