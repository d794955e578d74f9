package lower

import (
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"lagc/ir"
	"lagc/quant"
)

func qmoeTestArgs(qt quant.Type, T, H, I, E, k int) QMoEArgs {
	return QMoEArgs{T: T, H: H, I: I, E: E, TopK: k, X: Ptr{BaseArena, 0}, XType: "bf16",
		Weights: Ptr{BaseArena, 1 << 20}, IDs: Ptr{BaseArena, 2 << 20}, Out: Ptr{BaseArena, 3 << 20}, OutType: "bf16",
		Gate: QMatrix{W: Ptr{BaseWeights, 0}, Total: 2 * E * I}, Up: QMatrix{W: Ptr{BaseWeights, 0}, Total: 2 * E * I, Row0: E * I},
		Down: QMatrix{W: Ptr{BaseWeights, 1 << 30}, Total: E * H}, WType: qt, Workspace: Ptr{BaseWorkspace, 0}}
}

// TestQMoELaunches: two launches per call, a block per 32 activations of
// a route and per 4 warps of down rows, x's copy in shared memory, and
// template arguments that depend on the weight type alone, so that a
// token's bits do not change with the batch.
func TestQMoELaunches(t *testing.T) {
	for _, c := range []struct {
		name                           string
		qt                             quant.Type
		H, I, E, k                     int
		xType                          string
		wantG, wantW, wantShm, wantDSh int
	}{
		// x's scales and int8 values, 64 rows x 12 blocks of staged
		// (scales, mins) and (d, dmin); down: 10 routes' scales and int8
		// activations, 8 rows x 4 blocks of staged bytes per route
		{"s-2.1 q4_k", quant.Q4_K, 3072, 1024, 256, 10, "bf16", 4, 8, 16*96 + 3072 + 64*12*(16+4), 10 * (16*32 + 1024 + 8*4*(16+4))},
		{"xs-2 iq4_xs f32", quant.IQ4_XS, 2048, 512, 257, 9, "f32", 4, 8, 16*64 + 2048 + 64*8*8, 9 * (16*16 + 512 + 8*2*8)},
		{"q8_0", quant.Q8_0, 512, 256, 5, 3, "bf16", 8, 4, 16*16 + 512 + 64*16*2, 3 * (16*8 + 256 + 8*8*2)},
		{"q5_k", quant.Q5_K, 512, 256, 5, 3, "f32", 4, 8, 16*16 + 512 + 64*2*(48+4), 3 * (16*8 + 256 + 8*1*(48+4))},
		{"q6_k", quant.Q6_K, 512, 256, 5, 3, "f32", 4, 8, 16*16 + 512 + 64*2*(16+2), 3 * (16*8 + 256 + 8*1*(16+2))},
	} {
		var first []int64
		for _, T := range []int{1, 3, 8} {
			a := qmoeTestArgs(c.qt, T, c.H, c.I, c.E, c.k)
			a.XType = c.xType
			ls, err := QMoE(a)
			if err != nil {
				t.Fatalf("%s T=%d: %v", c.name, T, err)
			}
			if len(ls) != 3 || ls[0].Kernel != "q8x_quantize" || ls[1].Kernel != "moe_gateup_qgemv" || ls[2].Kernel != "moe_down_qgemv" {
				t.Fatalf("%s T=%d: launches %v", c.name, T, ls)
			}
			// x quantised at the workspace's start, as a quantised GEMV of x
			// quantises it (reuseQ8X then drops one of the two)
			want, err := Q8XQuantize(c.xType, a.X, a.Workspace, T, c.H)
			if err != nil || !reflect.DeepEqual(ls[0], want) {
				t.Errorf("%s T=%d: x quantised by %v, want %v (%v)", c.name, T, ls[0], want, err)
			}
			gu, dn := ls[1], ls[2]
			R := T * c.k
			if gu.Grid != dims(R*c.I/32) || gu.Block != dims(32*c.wantW) || gu.Shmem != c.wantShm || len(gu.DTypes) != 0 {
				t.Errorf("%s T=%d: gate+up grid %v block %v shmem %d %v, want %d blocks of %d, %d bytes, no dtype", c.name, T,
					gu.Grid, gu.Block, gu.Shmem, gu.DTypes, R*c.I/32, 32*c.wantW, c.wantShm)
			}
			_, _, ns, _, _ := QMoEShape(c.qt)
			if !slices.Equal(gu.Ints, []int64{int64(c.qt), int64(c.wantG), int64(c.wantW), int64(ns)}) {
				t.Errorf("%s T=%d: gate+up instantiated with %v, want type %d, %d rows a round, %d warps, the type's %d stages", c.name, T, gu.Ints, c.qt,
					c.wantG, c.wantW, ns)
			}
			// s=0 forced: the plain loads whatever the type's stages
			a.GateUpStagesZero = true
			if lf, err := QMoE(a); err != nil || lf[1].Ints[3] != 0 {
				t.Errorf("%s T=%d: s=0 forced: %v (%v), want 0 stages", c.name, T, lf, err)
			}
			a.GateUpStagesZero = false
			// rows forced alone keep 4 warps (the shapes forced before the
			// types chose 8)
			a.GateUpRows = 8
			if lf, err := QMoE(a); err != nil || lf[1].Ints[1] != 8 || lf[1].Ints[2] != 4 {
				t.Errorf("%s T=%d: 8 rows forced: %v (%v), want 8 rows on 4 warps", c.name, T, lf, err)
			}
			a.GateUpRows = 0
			if dn.Ints[3] != 4 {
				t.Errorf("%s T=%d: down instantiated with %v, want 4 warps", c.name, T, dn.Ints)
			}
			// 8 warps a block, forced: the grids stay, the blocks double
			// (gate+up) or the rows a block do (down: half the blocks).
			a.GateUpWarps, a.GateUpRows, a.DownWarps = 8, 8, 8
			l8, err := QMoE(a)
			if err != nil {
				t.Fatalf("%s T=%d, 8 warps: %v", c.name, T, err)
			}
			if g8, d8 := l8[1], l8[2]; g8.Grid != gu.Grid || g8.Block != dims(256) || g8.Ints[2] != 8 ||
				d8.Grid != dims(T*ceilDiv(c.H, 16)) || d8.Block != dims(256) || d8.Ints[3] != 8 || d8.Shmem <= dn.Shmem {
				t.Errorf("%s T=%d, 8 warps: gate+up %v x %v %v, down %v x %v %v shmem %d", c.name, T, g8.Grid, g8.Block, g8.Ints,
					d8.Grid, d8.Block, d8.Ints, d8.Shmem)
			}
			// Two rounds in registers (stages 1): no ring, the same shared
			// memory as one round.
			a.GateUpWarps, a.GateUpRows, a.DownWarps, a.GateUpStages = 0, 0, 0, 1
			if l1, err := QMoE(a); err != nil || l1[1].Ints[3] != 1 || l1[1].Shmem != c.wantShm {
				t.Errorf("%s T=%d, stages 1: %v (%v), want NS 1 and %d bytes", c.name, T, l1, err, c.wantShm)
			}
			// Units through shared memory, 3 stages: the rings after the
			// staged bytes, from a 256-byte boundary.
			a.GateUpWarps, a.GateUpRows, a.DownWarps, a.GateUpStages = 0, 4, 0, 3
			ls3, err := QMoE(a)
			if err != nil {
				t.Fatalf("%s T=%d, 3 stages: %v", c.name, T, err)
			}
			qb := map[quant.Type]int{quant.Q8_0: 32, quant.Q6_K: 24}[c.qt]
			if qb == 0 {
				qb = 16
			}
			if g3 := ls3[1]; g3.Ints[3] != 3 || g3.Shmem != int(align256(int64(c.wantShm)))+4*3*4*32*qb {
				t.Errorf("%s T=%d, 3 stages: gate+up %v shmem %d", c.name, T, g3.Ints, g3.Shmem)
			}
			// Down's units all at once: ceil(k*I/32/32) units a lane, for its
			// 2 rows, from a 256-byte boundary.
			a.GateUpStages, a.DownAll = 0, true
			lsAll, err := QMoE(a)
			if err != nil {
				t.Fatalf("%s T=%d, down all at once: %v", c.name, T, err)
			}
			if dAll := lsAll[2]; dAll.Ints[4] != 1 || dAll.Shmem != int(align256(int64(c.wantDSh)))+4*ceilDiv(c.k*c.I/32, 32)*2*32*qb {
				t.Errorf("%s T=%d, down all at once: %v shmem %d", c.name, T, dAll.Ints, dAll.Shmem)
			}
			if nh := int(dn.Ints[1]); nh != 2 || dn.Grid != dims(T*ceilDiv(c.H, 8)) || dn.Block != dims(128) || dn.Shmem != c.wantDSh {
				t.Errorf("%s T=%d: down grid %v block %v shmem %d for %d rows a warp, want 2 rows and %d bytes", c.name, T, dn.Grid, dn.Block, dn.Shmem, nh, c.wantDSh)
			}
			ints := append(slices.Clone(gu.Ints), dn.Ints...)
			if first == nil {
				first = ints
			} else if !slices.Equal(ints, first) {
				t.Errorf("%s: template arguments change with T: %v at T=%d, %v at T=1", c.name, ints, T, first)
			}
		}
	}
}

// TestQMoERejects: arguments the kernels cannot take get an error that
// names them.
func TestQMoERejects(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func(*QMoEArgs)
		want string
	}{
		{"too many routes", func(a *QMoEArgs) { a.TopK = QMoEMaxTopK + 1 }, "k 65 (1 to 64)"},
		{"too many tokens", func(a *QMoEArgs) { a.T = QGEMVMaxRows + 1 }, "T 9 (1 to 8)"},
		{"f16 x", func(a *QMoEArgs) { a.XType = "f16" }, "f16 activations"},
		{"f16 out", func(a *QMoEArgs) { a.OutType = "f16" }, `output dtype "f16"`},
		{"unaligned x", func(a *QMoEArgs) { a.X = Ptr{BaseArena, 8} }, "16-byte aligned"},
		{"null ids", func(a *QMoEArgs) { a.IDs = Ptr{} }, "null pointer"},
		{"odd rounds", func(a *QMoEArgs) { a.GateUpRows = 3 }, "rounds of 3 gate+up rows"},
		{"odd down rows", func(a *QMoEArgs) { a.DownRows = 8 }, "8 down rows"},
		{"six warps", func(a *QMoEArgs) { a.DownWarps = 6 }, "6 down warps"},
		{"five stages", func(a *QMoEArgs) { a.GateUpStages = 5 }, "5 gate+up stages"},
		{"8 warps of 16 rows", func(a *QMoEArgs) { a.GateUpWarps, a.GateUpRows = 8, 16 }, "8 gate+up warps of 16 rows"},
		{"many wide routes", func(a *QMoEArgs) {
			a.TopK, a.I = 64, 1024
			a.Gate.Total, a.Up.Total, a.Up.Row0 = 2*a.E*a.I, 2*a.E*a.I, a.E*a.I
		}, "need 19968 and 139264 bytes"},
		{"H too large", func(a *QMoEArgs) {
			a.H = 16384
			a.Down.Total = a.E * a.H
		}, "H = 16384, I = 1024 and k = 10 need 106496 and 21760"},
		{"H not a block multiple", func(a *QMoEArgs) { a.H = 3000 }, "multiple of 256"},
	} {
		a := qmoeTestArgs(quant.Q4_K, 1, 3072, 1024, 256, 10)
		c.edit(&a)
		if _, err := QMoE(a); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.want)
		}
	}
}

// TestQuantMatMulPaths: dense quantised prefill matmuls at S-2.1 shapes take
// the path BenchmarkHopperQGEMM measured faster (QDequantGEMMRows): in
// registers below 512 tokens, through the bf16 copy from 512, K 1024
// included.
func TestQuantMatMulPaths(t *testing.T) {
	for _, c := range []struct {
		name    string
		T, N, K int
		swiglu  bool
		want    string
	}{
		{"qkvg", 256, 11336, 3072, false, "gemm_wgmma_q"},
		{"qkvg", 511, 11336, 3072, false, "gemm_wgmma_q"},
		{"qkvg", 512, 11336, 3072, false, "qdequant"},
		{"qkvg", 1024, 11336, 3072, false, "qdequant"},
		{"qkvg", 2048, 11336, 3072, false, "qdequant"},
		{"o_proj", 256, 3072, 9216, false, "gemm_wgmma_q"},
		{"o_proj", 512, 3072, 9216, false, "qdequant"},
		{"o_proj", 2048, 3072, 9216, false, "qdequant"},
		{"shared_gate_up", 512, 1024, 3072, true, "qdequant"},
		{"shared_down", 256, 3072, 1024, false, "gemm_wgmma_q"},
		{"shared_down", 512, 3072, 1024, false, "qdequant"},
		{"shared_down", 2048, 3072, 1024, false, "qdequant"},
	} {
		wrows := c.N
		if c.swiglu {
			wrows *= 2
		}
		a := MatMulArgs{T: c.T, K: c.K, N: c.N, X: Ptr{BaseArena, 0}, W: Ptr{BaseWeights, 0}, Y: Ptr{BaseArena, 1 << 28},
			XType: "bf16", WType: quant.Q8_0.String(), YType: "bf16", SwiGLU: c.swiglu, SMs: 132, CC: 90}
		ls, err := quantMatMul(nil, a, wrows, 0)
		if err != nil {
			t.Fatalf("%s T=%d: %v", c.name, c.T, err)
		}
		if ls[0].Kernel != c.want {
			t.Errorf("%s T=%d: first launch %s, want %s", c.name, c.T, ls[0].Kernel, c.want)
		}
	}
}

func TestParseQMoEForce(t *testing.T) {
	for _, c := range []struct {
		in   string
		want QMoEForce
		err  string
	}{
		{"", QMoEForce{}, ""},
		{"g=8", QMoEForce{GateUpRows: 8}, ""},
		{" g=8, gw=4 ,s=3,nh=2,sd=8,dw=4,all", QMoEForce{GateUpRows: 8, GateUpWarps: 4, GateUpStages: 3, DownRows: 2, DownUnits: 8, DownWarps: 4, DownAll: true}, ""},
		{"s=0", QMoEForce{GateUpStagesZero: true}, ""},
		{"rows=96,ctas=1,wgs=4", QMoEForce{TileRows: 96, CTAs: 1, WGs: 4}, ""},
		{"rows=96,ctas=2", QMoEForce{TileRows: 96, CTAs: 2}, ""},
		{"rows=96,g=8", QMoEForce{GateUpRows: 8, TileRows: 96}, ""},
		{"all,", QMoEForce{DownAll: true}, ""},
		{"dec,all", QMoEForce{}, "a flag (all, whole, pipe, nopipe, bf16, nobf16, bf16ops, noq6k, noq5k)"},
		{"noq6k,rows=96", QMoEForce{TileRows: 96, NoQ6K: true}, ""},
		{"noq5k,noq6k", QMoEForce{NoQ6K: true, NoQ5K: true}, ""},
		{"q6k", QMoEForce{}, "is not KEY=N"},
		{"half", QMoEForce{}, "is not KEY=N"},
		{"g=-1", QMoEForce{}, "is not KEY=N"},
		{"g", QMoEForce{}, "is not KEY=N"},
		{"vn=16,whole", QMoEForce{TokenStep: 16, WholeTile: true}, ""},
		{"rows=128,ctas=1,pipe", QMoEForce{TileRows: 128, CTAs: 1, Pipe: true}, ""},
		{"pipe,whole", QMoEForce{WholeTile: true, Pipe: true}, ""},
		{"nopipe,vn=8", QMoEForce{TokenStep: 8, NoPipe: true}, ""},
		{"bf16ops,rows=96", QMoEForce{TileRows: 96, BF16Ops: true}, ""},
		{"f16ops", QMoEForce{}, "a flag (all, whole, pipe, nopipe, bf16, nobf16, bf16ops, noq6k, noq5k)"},
		{"x=1", QMoEForce{}, `unknown key "x"`},
	} {
		got, err := ParseQMoEForce(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: error %v, want one with %q", c.in, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%q: %+v, %v; want %+v", c.in, got, err, c.want)
		}
	}
}

// TestHopperQF16: the quantised grouped GEMMs take f16 operands unless
// bf16ops, and lower's type ids for them are
// gemm_hopper.cu's defines (checked against the source).
func TestHopperQF16(t *testing.T) {
	src, err := os.ReadFile("../cuda/kernels/gemm_hopper.cu")
	if err != nil {
		t.Fatal(err)
	}
	defs := map[quant.Type]string{quant.Q4_K: "QT_Q4_K_F16_H", quant.Q8_0: "QT_Q8_0_F16_H", quant.IQ4_XS: "QT_IQ4_XS_F16_H", quant.Q6_K: "QT_Q6_K_F16_H", quant.Q5_K: "QT_Q5_K_F16_H"}
	for _, c := range []struct {
		t       quant.Type
		bf16ops bool
		ok      bool
	}{{quant.Q4_K, false, true}, {quant.Q4_K, true, false}, {quant.Q8_0, false, true}, {quant.Q8_0, true, false},
		{quant.IQ4_XS, false, true}, {quant.IQ4_XS, true, false}, {quant.BF16, false, false}, {quant.Q6_K, false, true}, {quant.Q6_K, true, false}, {quant.Q5_K, false, true}, {quant.Q2_K, false, false}} {
		id, ok := hopperQF16(QMoEForce{BF16Ops: c.bf16ops}, c.t)
		if ok != c.ok {
			t.Errorf("%s bf16ops %v: f16 %v, want %v", c.t, c.bf16ops, ok, c.ok)
		}
		if def := fmt.Sprintf("#define %s %d\n", defs[c.t], id); ok && !strings.Contains(string(src), def) {
			t.Errorf("%s: gemm_hopper.cu lacks %q: the kernel's type id and lower's differ", c.t, def)
		}
	}
}

func FuzzParseQMoEForce(f *testing.F) {
	for _, s := range []string{"", "g=8,s=3,all", "nh=1,dw=8", "g=", ",,,", "rows=96,ctas=2", "ctas=9", "wgs=4,ctas=2", "rows=128,wgs=4", "pipe,ctas=2", "pipe,vn=8", "pipe,nopipe", "nopipe,ctas=2", "rows=112", "rows=112,vn=32", "rows=112,pipe", "rows=112,wgs=2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		q, err := ParseQMoEForce(s)
		if err != nil {
			return
		}
		if q.GateUpRows < 0 || q.GateUpWarps < 0 || q.GateUpStages < 0 || q.DownRows < 0 || q.DownUnits < 0 || q.DownWarps < 0 ||
			q.TileRows < 0 || q.CTAs < 0 {
			t.Fatalf("%q parsed to a negative field: %+v", s, q)
		}
		// Whatever parses, the grouped GEMMs' checks answer without panicking,
		// and what they accept is a shape they have kernels for.
		if rows, ctas, wgs, err := hopperQShape(q, true); err == nil && (ctas < 1 || ctas > 2 || ctas == 2 && (rows > 96 || wgs != 2 || q.Pipe || hopperQPipe(q, quant.Q4_K, wgs, rows)) || q.Pipe && q.NoPipe ||
			wgs != 2 && wgs != 4 || wgs == 4 && rows > 112 || wgs == 4 && rows > 96 && hopperQPipe(q, quant.Q4_K, wgs, rows) ||
			q.TokenStep > 0 && rows%q.TokenStep != 0 || !slices.Contains([]int{64, 96, 112, 128}, rows)) {
			t.Fatalf("%q: %d CTAs of %d warpgroups, %d rows accepted", s, ctas, wgs, rows)
		}
		if vn, err := hopperQStep(q); err == nil && vn != 0 && vn != 8 && vn != 16 && vn != 32 {
			t.Fatalf("%q: MMA width step %d accepted", s, vn)
		}
	})
}

// TestHopperQStep: the grouped GEMMs' MMAs follow a tile's rows in steps
// of 16 unless forced to 8 or 32, or to the whole tile (VN 0); anything
// else, or both, is refused with what is taken.
func TestHopperQStep(t *testing.T) {
	for _, c := range []struct {
		f    QMoEForce
		want int
		err  string
	}{
		{QMoEForce{}, 16, ""},
		{QMoEForce{TokenStep: 8}, 8, ""},
		{QMoEForce{TokenStep: 16}, 16, ""},
		{QMoEForce{TokenStep: 32, TileRows: 64}, 32, ""},
		{QMoEForce{WholeTile: true}, 0, ""},
		{QMoEForce{TokenStep: 24}, 0, "take 8, 16 or 32"},
		{QMoEForce{TokenStep: 64}, 0, "take 8, 16 or 32"},
		{QMoEForce{TokenStep: 16, WholeTile: true}, 0, "both set"},
	} {
		got, err := hopperQStep(c.f)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%+v: %d, %v; want an error with %q", c.f, got, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%+v: %d, %v; want %d", c.f, got, err, c.want)
		}
	}
}

// TestQGEMVShapeFor: the warp-group target trades rows per warp for
// groups: S-2.1's q,k,v,gate GEMV (11336 rows of 3072) takes 2 rows a warp
// at the default 4096 groups (5668 groups: 709 blocks, 1.34 waves of 4
// blocks an SM) and 4 at 2048 (2834: 355 blocks, one wave); o_proj's
// (3072 of 9216) splits K 4 ways at either, 2 at 1024; a plan passes
// Options.QGEMVGroups down.
func TestQGEMVShapeFor(t *testing.T) {
	for _, c := range []struct{ N, K, want, nw, split int }{
		{11336, 3072, QGEMVGroupsDefault, 2, 1},
		{11336, 3072, 2048, 4, 1},
		{3072, 9216, QGEMVGroupsDefault, 4, 4},
		{3072, 9216, 2048, 4, 4},
		{3072, 9216, 1024, 4, 2},
	} {
		if nw, split := QGEMVShapeFor(c.N, c.K, 1, false, c.want); nw != c.nw || split != c.split {
			t.Errorf("%d x %d at %d groups: %d rows a warp, split %d; want %d, %d", c.N, c.K, c.want, nw, split, c.nw, c.split)
		}
	}
	if nw, split := QGEMVShape(11336, 3072, 1, false); nw != 2 || split != 1 {
		t.Errorf("QGEMVShape: %d, %d", nw, split)
	}
	// o_proj of S-2.1's 72-head layers at 5 rows: K still split 4 ways as
	// for one row (it was 2: other bits), and so two rows a warp (one
	// elsewhere above 4 rows); the 48-head layers' split 2, one row.
	if nw, split := QGEMVShape(3072, 9216, 5, false); nw != 2 || split != 4 {
		t.Errorf("QGEMVShape(3072, 9216, 5): %d, %d; want 2, 4", nw, split)
	}
	if nw, split := QGEMVShape(3072, 6144, 8, false); nw != 1 || split != 2 {
		t.Errorf("QGEMVShape(3072, 6144, 8): %d, %d; want 1, 2", nw, split)
	}
	blocks := func(o Options) (n int) {
		p, err := quantPlan(t, "laguna-s-2.1", 2, "q4_k_m", o)
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range p.Decode.Steps {
			for _, l := range st.Launches {
				if l.Kernel == "qgemv" && len(l.Args) > 0 && l.Args[0].Int == 11336 {
					n = l.Grid[0]
				}
			}
		}
		return n
	}
	o := Options{DType: ir.BF16, Chunk: 64, MaxContext: 256}
	if b := blocks(o); b != 709 {
		t.Errorf("q,k,v,gate GEMV of %d blocks by default, want 709", b)
	}
	o.QGEMVGroups = 2048
	if b := blocks(o); b != 355 {
		t.Errorf("q,k,v,gate GEMV of %d blocks at 2048 groups, want 355", b)
	}
}

// TestDecodeSplitsOption: Options.DecodeSplits sets every decode
// attention's blocks per kv head (grid x), counters and partials follow,
// and a count out of range is an error.
func TestDecodeSplitsOption(t *testing.T) {
	splits := func(o Options) []int {
		p, err := quantPlan(t, "laguna-s-2.1", 2, "q4_k_m", o)
		if err != nil {
			t.Fatal(err)
		}
		var n []int
		for _, st := range p.Decode.Steps {
			for _, l := range st.Launches {
				if l.Kernel == "attn_decode" {
					n = append(n, l.Grid[0])
				}
			}
		}
		return n
	}
	o := Options{DType: ir.BF16, Chunk: 64, MaxContext: 512}
	if got := splits(o); !slices.Equal(got, []int{16, 16}) {
		t.Errorf("decode attention splits %v by default at 512 slots, want [16 16]", got)
	}
	for _, n := range []int{1, 4, 48} {
		o.DecodeSplits = n
		if got := splits(o); !slices.Equal(got, []int{n, n}) {
			t.Errorf("DecodeSplits %d: decode attention splits %v", n, got)
		}
	}
	o.DecodeSplits = MaxSplits + 1
	if _, err := quantPlan(t, "laguna-s-2.1", 2, "q4_k_m", o); err == nil || !strings.Contains(err.Error(), "splits") {
		t.Errorf("DecodeSplits %d: error %v, want one about splits", o.DecodeSplits, err)
	}
}

// TestQDequantArgs: the rows must lie in the matrix and the output be
// 16-byte aligned (the kernel stores 16 bytes at once).
func TestQDequantArgs(t *testing.T) {
	w, out := Ptr{BaseWeights, 0}, Ptr{BaseWorkspace, 256}
	for _, c := range []struct {
		row0, n int
		out     Ptr
		err     string
	}{
		{0, 8, out, ""},
		{4, 4, out, ""},
		{6, 4, out, "outside"},
		{0, 8, out.At(2), "16-byte aligned"},
	} {
		_, err := QDequant(quant.Q8_0, w, 8, 64, c.row0, c.n, c.out, "bf16")
		if c.err == "" && err != nil || c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)) {
			t.Errorf("rows [%d, %d) into %v: error %v, want %q", c.row0, c.row0+c.n, c.out, err, c.err)
		}
	}
}

// TestQGEMVSplitIgnoresRows: a row's sums are added in an order set by
// the K split alone, so the split must not follow the row count: a
// batched step's rows (T = 2 to 8) then equal the decode schedule's (T =
// 1) bit for bit. Shapes: Laguna's matrices (q,k,v,gate, o_proj of 48,
// 64 and 72 heads, experts, router, head) and a grid, every warp-group
// target a plan takes.
func TestQGEMVSplitIgnoresRows(t *testing.T) {
	shapes := [][2]int{{11336, 3072}, {8240, 2048}, {3072, 6144}, {3072, 9216}, {2048, 8192}, {2048, 6144},
		{3072, 1024}, {2048, 3072}, {256, 3072}, {100352, 3072}, {100352, 2048}}
	for _, n := range []int{1, 7, 96, 256, 1000, 3072, 5000, 70000} {
		for _, k := range []int{32, 256, 1024, 2048, 4096, 4128, 8192, 9216, 12288, 16384, 32768} {
			shapes = append(shapes, [2]int{n, k})
		}
	}
	for _, want := range []int{QGEMVGroupsDefault, 256, 1024, 2048, 8192} {
		for _, s := range shapes {
			for _, swiglu := range []bool{false, true} {
				_, split1 := QGEMVShapeFor(s[0], s[1], 1, swiglu, want)
				for T := 2; T <= QGEMVMaxRows; T++ {
					nw, split := QGEMVShapeFor(s[0], s[1], T, swiglu, want)
					if split != split1 || nw < 1 || nw > 4 {
						t.Errorf("%d x %d, SwiGLU %v, %d groups: T=%d gives %d rows a warp, split %d; T=1 split %d",
							s[0], s[1], swiglu, want, T, nw, split, split1)
					}
				}
			}
		}
	}
}

// TestQGEMVMatrixNotWritten: qgemv reads weights before its wait, so a
// matrix in bytes that launches write (the arena, the workspace, the
// caches) is refused; the weights and a caller's device buffer are not.
func TestQGEMVMatrixNotWritten(t *testing.T) {
	for _, c := range []struct {
		w  Ptr
		ok bool
	}{
		{Ptr{BaseWeights, 1 << 20}, true},
		{DevicePtr(1 << 20), true},
		{Ptr{BaseArena, 1 << 20}, false},
		{Ptr{BaseWorkspace, 1 << 20}, false},
		{Ptr{BaseKV, 1 << 20}, false},
		{Ptr{BaseShadow, 1 << 20}, false},
		{Ptr{}, false},
	} {
		_, err := QGEMV(QGEMVArgs{T: 1, K: 3072, N: 1024, XQ: Ptr{BaseWorkspace, 0}, W: c.w, Y: Ptr{BaseArena, 4 << 20},
			WType: quant.Q4_K, WRows: 1024, YType: "bf16"})
		if (err == nil) != c.ok {
			t.Errorf("matrix at %v: error %v, want ok %v", c.w, err, c.ok)
		}
	}
}
