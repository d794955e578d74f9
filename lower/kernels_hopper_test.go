package lower

import (
	"slices"
	"strings"
	"testing"
)

// TestHopperSched: the wgmma GEMM's consumer schedule per tile width, forced
// or chosen, and the template argument that carries it.
func TestHopperSched(t *testing.T) {
	base := MatMulArgs{T: 2048, K: 1024, N: 3072, XType: "bf16", WType: "bf16", YType: "bf16", CC: 90,
		X: Ptr{"x", 0}, W: Ptr{"w", 0}, Y: Ptr{"y", 0}}
	for _, c := range []struct {
		name    string
		bn      int
		swiglu  bool
		sched   HopperSched
		wantPP  bool
		wantErr string
	}{
		{"auto 128", 128, false, SchedAuto, true, ""},
		{"auto 128 swiglu", 128, true, SchedAuto, false, ""},
		{"auto 128 deep", 128, false, SchedAuto, false, ""}, // K past PingPongMaxK
		{"pingpong 128 swiglu", 128, true, SchedPingPong, true, ""},
		{"auto 256", 256, false, SchedAuto, false, ""},
		{"auto chosen width", 0, false, SchedAuto, true, ""}, // 2048 x 3072: width 128 fills the waves better
		{"cooperative 128", 128, false, SchedCooperative, false, ""},
		{"cooperative 256", 256, false, SchedCooperative, false, ""},
		{"pingpong 128", 128, false, SchedPingPong, true, ""},
		{"pingpong 256", 256, false, SchedPingPong, false, "cannot run ping-pong"},
		{"unknown", 128, false, HopperSched(7), false, "HopperSched(7)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := base
			a.HopperBN, a.HopperSched, a.SwiGLU = c.bn, c.sched, c.swiglu
			if strings.HasSuffix(c.name, "deep") {
				a.K = PingPongMaxK + 8
			}
			l, err := HopperGEMM(a)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("err %v, want one containing %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(l.Ints) != 4 {
				t.Fatalf("gemm_wgmma's template ints %v: want BN, EPI, GROUPED, PP", l.Ints)
			}
			if pp := l.Ints[3] == 1; pp != c.wantPP {
				t.Errorf("%s: ping-pong %v, want %v", l.NameExpr(), pp, c.wantPP)
			}
		})
	}
}

// TestMoEHopperSched: the grouped experts' GEMMs run 256 wide and
// cooperative, but the down GEMM 128 wide and ping-pong under
// HopperDown = SchedPingPong.
func TestMoEHopperSched(t *testing.T) {
	for _, c := range []struct {
		down     HopperSched
		wantDown []int64
	}{
		{SchedAuto, []int64{256, EpiStore, 1, 0}},
		{SchedCooperative, []int64{256, EpiStore, 1, 0}},
		{SchedPingPong, []int64{128, EpiStore, 1, 1}},
	} {
		var got [][]int64
		for _, l := range moeHopper(MoEArgs{T: 64, H: 256, I: 128, E: 8, TopK: 2, HopperDown: c.down}, MoELayout{}) {
			if l.Kernel == "gemm_wgmma" {
				got = append(got, l.Ints)
			}
		}
		want := [][]int64{{256, EpiSwiGLU, 1, 0}, c.wantDown}
		if !slices.EqualFunc(got, want, slices.Equal) {
			t.Errorf("%v: grouped GEMMs' BN, EPI, GROUPED, PP %v, want %v", c.down, got, want)
		}
	}
}
