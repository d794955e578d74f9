package gpu

import (
	"slices"
	"strings"
	"testing"

	"lagc/ir"
	"lagc/lower"
)

// TestSharedDownGateUpPlan: with sharedDownGateUp (the default), the decode
// plan of a 4-layer S-2.1 in the q4_k_m recipe puts each MoE layer's
// shared down GEMV into its routed gate+up's launch and its store and
// tail into a one-block qgemv_join_norm after the routed down: the
// default's arguments with the shared GEMV's after them, its sums in f32
// just past the default's workspace (which grows by that row), Plan.At
// giving the recorded launches; lower.SharedDownGateUp refuses a gate+up
// of 4 warps, a GEMV not accumulating one row, inputs inside the routed
// down's output, no buffer, or the launches out of order.
func TestSharedDownGateUpPlan(t *testing.T) {
	m := traceModelNamed(t, "laguna-s-2.1-q4_k_m")
	p := tracePlan(t, m, ir.BF16)
	m.disable = []string{"sharedDownGateUp"}
	base := tracePlan(t, m, ir.BF16)
	was, got := stepsFlat(base.Decode), stepsFlat(p.Decode)
	for k, want := range map[string]int{"moe_gateup_qgemv_xin_trig": 3, "qgemv_join_norm": 3, "moe_gateup_qgemv_trig": 0, "qgemv_xin_norm_pre": 0, "moe_down_qgemv_pre": 3} {
		if n := countKernel(got, k); n != want {
			t.Errorf("%d %s launches in the default decode plan, want %d", n, k, want)
		}
	}
	if len(got) != len(was) {
		t.Fatalf("%d decode launches in the default plan, %d without sharedDownGateUp", len(got), len(was))
	}
	buf := lower.Ptr{Base: lower.BaseWorkspace, Offset: base.Decode.Workspace}
	if p.Decode.Workspace <= base.Decode.Workspace || p.Decode.Workspace-base.Decode.Workspace < 4*3072 {
		t.Errorf("workspace %d bytes with sharedDownGateUp, %d without: no room for a row of 3072 f32 sums", p.Decode.Workspace, base.Decode.Workspace)
	}
	pairs := 0
	for j := 0; j+2 < len(was); j++ {
		g, d, x := was[j], was[j+1], was[j+2]
		if g.Kernel != "moe_gateup_qgemv_trig" || d.Kernel != "moe_down_qgemv_pre" || x.Kernel != "qgemv_xin_norm_pre" {
			continue
		}
		pairs++
		gx, join := got[j], got[j+2]
		if gx.Kernel != "moe_gateup_qgemv_xin_trig" || !slices.Equal(got[j+1].Args, d.Args) || join.Kernel != "qgemv_join_norm" {
			t.Fatalf("launch %d: %s, %s, %s in place of %s, %s, %s", j, gx.NameExpr(), got[j+1].NameExpr(), join.NameExpr(), g.NameExpr(), d.NameExpr(), x.NameExpr())
		}
		N := x.Args[0].Int
		sb := (N + 31) / 32 // 8 warps of 4 rows a shared block
		want := append(append(append(slices.Clone(g.Args), lower.Arg{Kind: lower.ArgI32, Int: sb}), x.Args[:6]...), lower.Arg{Kind: lower.ArgPtr, Base: buf.Base, Offset: buf.Offset})
		if !slices.Equal(gx.Args, want) || gx.Grid[0] != g.Grid[0]+int(sb) || gx.Block != g.Block || gx.Shmem != max(g.Shmem, x.Shmem) ||
			!slices.Equal(gx.Ints, append(slices.Clone(g.Ints), x.Ints[0], 4)) || !slices.Equal(gx.DTypes, x.DTypes[1:2]) {
			t.Errorf("%s %v grid %v: want the gate+up's arguments, %d shared blocks, the GEMV's and the buffer", gx.NameExpr(), gx.Args, gx.Grid, sb)
		}
		jwant := append([]lower.Arg{{Kind: lower.ArgI32, Int: N}, {Kind: lower.ArgPtr, Base: buf.Base, Offset: buf.Offset}, x.Args[6]}, x.Args[9:]...)
		if !slices.Equal(join.Args, jwant) || join.Grid != [3]int{1, 1, 1} || !slices.Equal(join.Ints, x.Ints[5:]) {
			t.Errorf("%s %v grid %v: want one block with the sums, y and the tail's arguments", join.NameExpr(), join.Args, join.Grid)
		}
		refuse := func(what string, g, d, x lower.Launch, buf lower.Ptr) {
			t.Helper()
			if _, _, err := lower.SharedDownGateUp(g, d, x, buf); err == nil {
				t.Errorf("%s: no error", what)
			}
		}
		g4 := g
		g4.Ints = slices.Clone(g.Ints)
		g4.Ints[2], g4.Block = 4, [3]int{128, 1, 1}
		refuse("a gate+up of 4 warps", g4, d, x, buf)
		noacc := x
		noacc.Args = slices.Clone(x.Args)
		noacc.Args[7].Int = 0
		refuse("a shared GEMV not accumulating", g, d, noacc, buf)
		inside := x
		inside.Args = slices.Clone(x.Args)
		inside.Args[5] = d.Args[11] // xin inside the routed down's output
		if _, _, err := lower.SharedDownGateUp(g, d, inside, buf); err == nil || !strings.Contains(err.Error(), "writes what") {
			t.Errorf("xin over the routed down's output: %v, want a refusal", err)
		}
		refuse("no buffer", g, d, x, lower.Ptr{})
		refuse("the launches out of order", d, g, x, buf)
	}
	if pairs != 3 {
		t.Fatalf("%d gate+up, down, shared down runs in the 4-layer decode plan without sharedDownGateUp, want 3", pairs)
	}
	at, err := p.At(p.Decode, p.Decode.Tokens)
	if err != nil {
		t.Fatal(err)
	}
	atFlat := slices.Concat(at...)
	if len(atFlat) != len(got) {
		t.Fatalf("Plan.At: %d decode launches, the schedule records %d", len(atFlat), len(got))
	}
	for j := range got {
		if atFlat[j].String() != got[j].String() {
			t.Fatalf("Plan.At's decode launch %d: %s, the schedule records %s", j, atFlat[j], got[j])
		}
	}
}
