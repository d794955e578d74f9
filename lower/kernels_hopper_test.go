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
// HopperDown = SchedPingPong; moe_gather_rows copies the routes' x rows
// first and both GEMMs are gemm_wgmma's grouped form (GROUPED 1).
func TestMoEHopperSched(t *testing.T) {
	for _, c := range []struct {
		down     HopperSched
		wantDown []int64
	}{
		{SchedAuto, []int64{256, EpiStore, 1, 0, 0}},
		{SchedCooperative, []int64{256, EpiStore, 1, 0, 0}},
		{SchedPingPong, []int64{128, EpiStore, 1, 1, 0}},
	} {
		var got [][]int64
		gathers := 0
		for _, l := range moeHopper(MoEArgs{T: 64, H: 256, I: 128, E: 8, TopK: 2, HopperDown: c.down}, MoELayout{}) {
			switch l.Kernel {
			case "gemm_wgmma":
				got = append(got, l.Ints)
			case "moe_gather_rows":
				gathers++
			}
		}
		want := [][]int64{{256, EpiSwiGLU, 1, 0, 0}, c.wantDown}
		if !slices.EqualFunc(got, want, slices.Equal) || gathers != 1 {
			t.Errorf("%v: grouped GEMMs' BN, EPI, GROUPED, PP, SPLIT %v (want %v), %d gathers", c.down, got, want, gathers)
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
			"arena+0, i32 11336, null, null, i32 0, arena+16777216, arena+33554432, arena+50331648, i32 9216, i32 10240, i32 11264)", 128, ""},
		{"two outputs, 128 only", []SplitOut{{y(0), 384}, {y(1), 100}}, 0,
			"arena+0, i32 484, null, null, i32 0, arena+16777216, null, null, i32 384, i32 484, i32 484)", 128, ""},
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

// TestMoEHopperBF16Q: QMoEForce.BF16, or routes averaging at most
// BF16QWideMaxAvgRows tokens an expert, put bf16 stacks' grouped GEMMs on
// gemm_wgmma_q (QT 30, bf16 weight maps of 64 x 64 boxes, no scale bytes)
// after moe_gather_rows, with the quantised path's token tiles (the
// schedule's too), widths and loop; shapes it cannot take are refused;
// NoBF16, or more tokens an expert, keep gemm_wgmma.
func TestMoEHopperBF16Q(t *testing.T) {
	const E, H, I, k = 8, 256, 256, 2
	// Tokens: routes averaging QNarrowMaxAvgRows an expert (96-row tiles),
	// past it (112-row tiles), BF16QWideMaxAvgRows (the last on
	// gemm_wgmma_q) and past that (gemm_wgmma).
	small, large := QNarrowMaxAvgRows*E/k, QNarrowMaxAvgRows*E/k+1
	wide, past := BF16QWideMaxAvgRows*E/k, BF16QWideMaxAvgRows*E/k+1
	for _, c := range []struct {
		f                    QMoEForce
		T                    int
		q                    bool // gemm_wgmma_q expected
		rows, ctas, wgs, pip int
		err                  string
	}{
		{QMoEForce{BF16: true}, large, true, 112, 1, 4, 0, ""},
		{QMoEForce{BF16: true}, past, true, 112, 1, 4, 0, ""},
		{QMoEForce{BF16: true, TileRows: 96}, large, true, 96, 1, 4, 0, ""},
		{QMoEForce{BF16: true, TileRows: 64}, large, true, 64, 1, 4, 0, ""},
		{QMoEForce{BF16: true, TileRows: 128}, large, true, 128, 1, 2, 0, ""},
		{QMoEForce{BF16: true, WGs: 2}, small, true, 96, 2, 2, 0, ""},
		{QMoEForce{BF16: true, Pipe: true}, large, true, 96, 1, 4, 1, ""},
		{QMoEForce{BF16: true, Pipe: true, CTAs: 2}, large, true, 0, 0, 0, 0, "ctas=1"},
		{QMoEForce{BF16: true, TileRows: 80}, large, true, 0, 0, 0, 0, "64, 96, 112 or 128"},
		{QMoEForce{BF16: true, NoBF16: true}, large, true, 0, 0, 0, 0, "one or the other"},
		{QMoEForce{}, small, true, 96, 1, 4, 0, ""},
		{QMoEForce{}, large, true, 112, 1, 4, 0, ""},
		{QMoEForce{}, wide, true, 112, 1, 4, 0, ""},
		{QMoEForce{}, past, false, 0, 0, 0, 0, ""},
		{QMoEForce{TileRows: 96}, wide, true, 96, 1, 4, 0, ""},
		{QMoEForce{NoBF16: true}, small, false, 0, 0, 0, 0, ""},
	} {
		T := c.T
		p := Ptr{BaseWorkspace, 0}
		a := MoEArgs{T: T, H: H, I: I, E: E, TopK: k, X: p, Weights: p, IDs: p, Out: p, Workspace: p, Gate: p, Up: p.At(2 * E * I * H),
			Down: p, XType: "bf16", WType: "bf16", OutType: "bf16", CC: 90, SMs: 132, QMoE: c.f}
		ls, err := MoE(a)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%+v: %v, want an error saying %q", c.f, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%+v: %v", c.f, err)
		}
		var q, plain, gather int
		for _, l := range ls {
			switch l.Kernel {
			case "gemm_wgmma_q":
				// gate+up (the SwiGLU epilogue), then down (plain bf16
				// stores, staged): each launch's shared memory is the one
				// its own epilogue needs.
				epi := []int{EpiSwiGLU, EpiStore}[min(q, 1)]
				q++
				if l.Ints[0] != 30 || l.Ints[1] != int64(c.rows) || l.Ints[2] != int64(epi) || l.Ints[4] != int64(c.ctas) || l.Ints[5] != int64(c.wgs) ||
					l.Ints[6] != 16 || l.Ints[7] != int64(c.pip) || l.Block[0] != 128*(c.wgs+1) || l.Grid[0] != 132*c.ctas ||
					l.Shmem != hopperQSmem(30, c.rows, c.ctas, c.wgs, epi, "bf16") {
					t.Errorf("%+v: %s grid %v block %v shmem %d", c.f, l.NameExpr(), l.Grid, l.Block, l.Shmem)
				}
				if m := l.Args[1].Map; m == nil || m.Elem != "bf16" || m.BoxRows != 64 || m.BoxCols != 64 || m.Cols != int64(l.Args[7].Int) {
					t.Errorf("%+v: weight map %+v", c.f, m)
				}
			case "gemm_wgmma":
				plain++
			case "moe_gather_rows":
				gather++
			case "moe_schedule":
				if want := int64(c.rows); c.q && l.Args[2].Int != want {
					t.Errorf("%+v: moe_schedule tiles of %d rows, want %d", c.f, l.Args[2].Int, want)
				}
			}
		}
		if gather != 1 || c.q && (q != 2 || plain != 0) || !c.q && (q != 0 || plain != 2) {
			t.Errorf("%+v, T %d: %d gemm_wgmma_q, %d gemm_wgmma, %d moe_gather_rows", c.f, T, q, plain, gather)
		}
	}
}
