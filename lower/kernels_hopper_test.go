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
			if wantedErr(t, err, c.wantErr) {
				return
			}
			if len(l.Ints) != 5 || l.Ints[4] != 0 {
				t.Fatalf("gemm_wgmma's template ints %v: want BN, EPI, GROUPED, PP, SPLIT 0", l.Ints)
			}
			if pp := l.Ints[3] == 1; pp != c.wantPP {
				t.Errorf("%s: ping-pong %v, want %v", l.NameExpr(), pp, c.wantPP)
			}
		})
	}
}

// TestMoEHopperSched: the grouped experts' GEMMs run 256 wide and
// cooperative, but the down GEMM 128 wide and ping-pong under
// HopperDown = SchedPingPong; the gate+up GEMM gathers the routes' x rows
// itself (GROUPED 2, no moe_gather_rows) unless NoGather.
func TestMoEHopperSched(t *testing.T) {
	for _, c := range []struct {
		down     HopperSched
		noGather bool
		wantDown []int64
	}{
		{SchedAuto, false, []int64{256, EpiStore, 1, 0, 0}},
		{SchedCooperative, false, []int64{256, EpiStore, 1, 0, 0}},
		{SchedPingPong, false, []int64{128, EpiStore, 1, 1, 0}},
		{SchedAuto, true, []int64{256, EpiStore, 1, 0, 0}},
	} {
		var got [][]int64
		gathers := 0
		for _, l := range moeHopper(MoEArgs{T: 64, H: 256, I: 128, E: 8, TopK: 2, HopperDown: c.down, NoGather: c.noGather}, MoELayout{}) {
			switch l.Kernel {
			case "gemm_wgmma":
				got = append(got, l.Ints)
			case "moe_gather_rows":
				gathers++
			}
		}
		mode := int64(2)
		if c.noGather {
			mode = 1
		}
		want := [][]int64{{256, EpiSwiGLU, mode, 0, 0}, c.wantDown}
		if !slices.EqualFunc(got, want, slices.Equal) || gathers != b2i(c.noGather) {
			t.Errorf("%v, NoGather %v: grouped GEMMs' BN, EPI, GROUPED, PP, SPLIT %v (want %v), %d gathers",
				c.down, c.noGather, got, want, gathers)
		}
	}
}

// TestHopperGEMMSplit: a split GEMM's launch (q, k, v and a gate from one
// GEMM): the outputs' pointers and first columns after the plain
// arguments, 128-wide tiles where the outputs start on multiples of 128
// but not 256, and errors for what the epilogue cannot do.
func TestHopperGEMMSplit(t *testing.T) {
	y := func(i int) Ptr { return Ptr{BaseArena, int64(i) << 24} }
	base := MatMulArgs{T: 2048, K: 3072, X: Ptr{BaseArena, 1 << 30}, W: Ptr{BaseWorkspace, 0}, XType: "bf16", WType: "bf16",
		YType: "bf16", SMs: 132, CC: 90}
	for _, c := range []struct {
		name    string
		split   []SplitOut
		bn      int
		want    string // the launch's tail from the first output on
		wantBN  int64
		wantErr string
	}{
		{"S-2.1 sliding", []SplitOut{{y(0), 9216}, {y(1), 1024}, {y(2), 1024}, {y(3), 72}}, 0,
			"arena+0, i32 11336, null, null, i32 0, arena+16777216, arena+33554432, arena+50331648, i32 9216, i32 10240, i32 11264, null, null, i32 0)", 128, ""},
		{"two outputs, 128 only", []SplitOut{{y(0), 384}, {y(1), 100}}, 0,
			"arena+0, i32 484, null, null, i32 0, arena+16777216, null, null, i32 384, i32 484, i32 484, null, null, i32 0)", 128, ""},
		{"forced 256, outputs on 128", []SplitOut{{y(0), 384}, {y(1), 100}}, 256, "", 0, "multiples of the tile width 256"},
		{"not on 128", []SplitOut{{y(0), 200}, {y(1), 100}}, 0, "", 0, "multiples of the tile width"},
		{"five outputs", []SplitOut{{y(0), 128}, {y(1), 128}, {y(2), 128}, {y(3), 128}, {y(4), 128}}, 0, "", 0, "at most 4 outputs"},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := base
			a.Split, a.HopperBN = c.split, c.bn
			for _, o := range c.split {
				a.N += o.N
			}
			l, err := MatMul(a)
			if wantedErr(t, err, c.wantErr) {
				return
			}
			if l.Kernel != "gemm_wgmma" || l.Ints[0] != c.wantBN || l.Ints[4] != 1 || !strings.HasSuffix(l.String(), c.want) {
				t.Errorf("%s", l)
			}
		})
	}
	// A width mismatch is an error, and cuBLASLt never takes a split GEMM.
	a := base
	a.Split, a.N, a.CublasLt = []SplitOut{{y(0), 128}, {y(1), 128}}, 300, true
	if _, err := MatMul(a); err == nil || !strings.Contains(err.Error(), "for N 300") {
		t.Errorf("widths 256 for N 300: %v", err)
	}
	a.N = 256
	if l, err := MatMul(a); err != nil || l.Kernel != "gemm_wgmma" {
		t.Errorf("with cuBLASLt allowed: %v, %v", l.Kernel, err)
	}
}

// wantedErr checks a lowering's err against want, a substring of the
// error the case expects ("": none), and says whether the case expected
// one (and so is done).
func wantedErr(t *testing.T, err error, want string) bool {
	t.Helper()
	switch {
	case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
		t.Fatalf("err %v, want one containing %q", err, want)
	case want == "" && err != nil:
		t.Fatal(err)
	}
	return want != ""
}
