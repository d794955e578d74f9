package gpu

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"

	"lagc/cuda"
	"lagc/cuda/cudatest"
	"lagc/internal/fixture"
	"lagc/lower"
	"lagc/quant"
)

// hopperGPU is gpu for the Hopper-only kernels: it skips (fails with
// LAGC_REQUIRE_GPU=1) on other architectures.
func hopperGPU(t *testing.T) (*Kernels, *cuda.Stream) {
	t.Helper()
	k, s := gpu(t)
	if k.CC() < 90 {
		if os.Getenv(cudatest.EnvRequireGPU) == "1" {
			t.Fatalf("LAGC_REQUIRE_GPU=1 but %s is compute capability %d.%d, not Hopper", k.Dev.Props().Name, k.Dev.Props().Major, k.Dev.Props().Minor)
		}
		t.Skipf("%s is not a Hopper GPU", k.Dev.Props().Name)
	}
	return k, s
}

// TestMatMulHopperGPU: the TMA + wgmma GEMM (what MatMul runs for T > 8
// on Hopper) against the CPU reference over ragged M and N, K not a
// multiple of 64, every epilogue, both tile widths and output dtypes, and
// at width 128 both consumer schedules; the last two shapes have more
// tiles than the GPU has multiprocessors (a CTA computes two or three, so
// that ping-pong's warpgroups both take tiles), the last with K past twice
// the stages (13 k-blocks, 6 stages: a warpgroup running a tile ahead
// would wait on a stage's mbarrier two phases early).
func TestMatMulHopperGPU(t *testing.T) {
	k, s := hopperGPU(t)
	r := rand.New(rand.NewPCG(11, 12))
	cases := []struct{ M, N, K int }{
		{9, 64, 64}, {100, 200, 72}, {128, 256, 128}, {300, 520, 1000}, {257, 130, 3072}, {2048, 384, 256},
		{2100, 1100, 72}, {4100, 520, 840},
	}
	type variant struct {
		bn    int
		sched lower.HopperSched
	}
	for _, v := range []variant{{128, lower.SchedCooperative}, {256, lower.SchedCooperative}, {128, lower.SchedPingPong}} {
		bn := v.bn
		for _, epi := range []string{"store", "accumulate", "swiglu"} {
			for _, c := range cases {
				for _, yt := range []cuda.DType{cuda.F32, cuda.BF16} {
					name := fmt.Sprintf("BN%d/%s/M%d_N%d_K%d/%v", bn, epi, c.M, c.N, c.K, yt)
					if v.sched == lower.SchedPingPong {
						name = "pingpong/" + name
					}
					t.Run(name, func(t *testing.T) {
						a := MatMulArgs{T: c.M, K: c.K, N: c.N, XType: cuda.BF16, WType: cuda.BF16, YType: yt,
							SwiGLU: epi == "swiglu", Accumulate: epi == "accumulate", CC: k.CC(), HopperBN: bn, HopperSched: v.sched}
						l, err := k.MatMulLaunch(a)
						if err == nil && l.Name[:len("gemm_wgmma")] != "gemm_wgmma" {
							t.Fatalf("MatMul chose %s, not the wgmma GEMM", l.Name)
						}
						if pp := strings.HasSuffix(l.Name, ", 1>"); err == nil && pp != (v.sched == lower.SchedPingPong) {
							t.Fatalf("MatMul chose %s for schedule %v", l.Name, v.sched)
						}
						got, want := mmRun(t, k, s, r, a)
						checkClose(t, name, got, want, tolFor(yt))
					})
				}
			}
		}
	}
}

// TestMoEExpertsHopperGPU: the grouped routed experts on the wgmma core
// (moe_gather_rows, then gemm_wgmma's grouped GEMMs) against the CPU
// reference: skewed and same-expert routing (experts with
// 0, 1 and hundreds of rows), invalid ids, accumulate, both expert orders;
// then the down GEMM ping-pong (HopperDown), also on a grid of 7 CTAs so
// that each takes several tiles of 13 k-blocks (more than the stages).
func TestMoEExpertsHopperGPU(t *testing.T) {
	k, s := hopperGPU(t)
	r := rand.New(rand.NewPCG(21, 22))
	cases := []moeCase{
		{T: 9, H: 128, I: 64, E: 8, k: 3, dist: "distinct"},
		{T: 64, H: 192, I: 128, E: 8, k: 3, dist: "skewed", acc: true},
		{T: 129, H: 128, I: 192, E: 256, k: 10, dist: "skewed"},
		{T: 200, H: 256, I: 128, E: 16, k: 4, dist: "same"},
		{T: 129, H: 128, I: 64, E: 256, k: 10, dist: "invalid", acc: true},
		{T: 600, H: 512, I: 256, E: 32, k: 4, dist: "distinct"},
	}
	type variant struct {
		down lower.HopperSched
		sms  int // 0: the GPU's
		// q: the GEMMs on gemm_wgmma_q (QMoE.BF16: weights as A, MMAs as wide
		// as each tile's tokens), of qrows-token tiles on qwgs consumer
		// warpgroups (0: lower's), the pipelined loop forced (qpipe).
		q           bool
		qrows, qwgs int
		qpipe       bool
	}
	run := func(v variant, order ExpertOrder, c moeCase) {
		name := fmt.Sprintf("order%d/%+v", order, c)
		if v.q {
			name = fmt.Sprintf("q/rows%d/wgs%d/pipe%v/%s", v.qrows, v.qwgs, v.qpipe, name)
		}
		if v.down == lower.SchedPingPong {
			name = fmt.Sprintf("downpp/sms%d/%s", v.sms, name)
		}
		t.Run(name, func(t *testing.T) {
			d := moeGen(r, c, cuda.BF16, cuda.BF16, cuda.BF16)
			a := moeUpload(t, k, s, c, d, cuda.BF16, cuda.BF16, cuda.BF16, MoEGrouped, order, MMATile{})
			// One allocation: the gate stack, then the up stack.
			gu := append(append([]float32(nil), d.gate...), d.up...)
			a.Gate = upload(t, k, s, cuda.BF16, gu)
			a.Up = a.Gate.Add(2 * int64(c.E*c.I*c.H))
			a.CC, a.SMs, a.HopperDown = k.CC(), k.SMs(), v.down
			a.QMoE = lower.QMoEForce{BF16: v.q, NoBF16: !v.q, TileRows: v.qrows, WGs: v.qwgs, Pipe: v.qpipe}
			if v.sms != 0 {
				a.SMs = v.sms
			}
			ls, err := k.MoELaunches(a)
			if err != nil {
				t.Fatal(err)
			}
			if v.q {
				if !hasKernel(ls, "gemm_wgmma_q<bf16_t, 30,") || !hasKernel(ls, "moe_gather_rows") {
					t.Fatalf("QMoE.BF16 did not choose gemm_wgmma_q's bf16 path after moe_gather_rows")
				}
			} else if !hasKernel(ls, "gemm_wgmma<bf16_t, 256, 2, 1, 0, 0>") || !hasKernel(ls, "moe_gather_rows") {
				t.Fatalf("the grouped path did not choose the wgmma core after moe_gather_rows")
			}
			if pp := hasKernel(ls, "gemm_wgmma<bf16_t, 128, 0, 1, 1, 0>"); !v.q && pp != (v.down == lower.SchedPingPong) {
				t.Fatalf("down ping-pong %v under %v", pp, v.down)
			}
			moeWorkspace(t, k, s, &a)
			if err := k.MoEExperts(s, a); err != nil {
				t.Fatal(err)
			}
			got := download(t, s, cuda.BF16, a.Out, c.T*c.H)
			checkClose(t, "moe", got, moeRef(t, c, d), tolFor(cuda.BF16))
		})
	}
	for _, order := range []ExpertOrder{ExpertsByID, ExpertsByLoad} {
		for _, c := range cases {
			run(variant{}, order, c)
		}
	}
	deep := moeCase{T: 1024, H: 256, I: 832, E: 8, k: 2, dist: "skewed"}
	for _, v := range []variant{{down: lower.SchedPingPong}, {down: lower.SchedPingPong, sms: 7}, {sms: 7},
		{q: true}, {q: true, sms: 7}, {q: true, qrows: 64}, {q: true, qrows: 112}, {q: true, qrows: 128}, {q: true, qwgs: 2}, {q: true, qpipe: true}} {
		for _, c := range append(cases, deep) {
			run(v, ExpertsByLoad, c)
		}
	}
	for _, c := range cases {
		run(variant{q: true}, ExpertsByID, c)
	}
}

func hasKernel(ls []KernelLaunch, prefix string) bool {
	for _, l := range ls {
		if len(l.Name) >= len(prefix) && l.Name[:len(prefix)] == prefix {
			return true
		}
	}
	return false
}

// BenchmarkGEMMHopper: Laguna-S-2.1 prefill GEMMs (T = 2048) on the wgmma
// core at both tile widths and on mma.sync (CC 0), and cuBLASLt's GEMM
// (the optional baseline; not for the SwiGLU shapes), for comparison.
func BenchmarkGEMMHopper(b *testing.B) {
	m := newMMBench(b)
	sh := s21(b)
	const M = 2048
	for _, c := range []benchShape{sh.qkvg, sh.oProj, sh.denseGateUp, sh.denseDown, sh.sharedGateUp, sh.sharedDown} {
		for _, v := range []struct {
			name   string
			cc, bn int
			sched  lower.HopperSched
		}{{"mma", 0, 0, 0}, {"wgmma-auto", 90, 0, 0}, {"wgmma-128", 90, 128, lower.SchedCooperative},
			{"wgmma-128pp", 90, 128, lower.SchedPingPong}, {"wgmma-256", 90, 256, 0}} {
			b.Run(fmt.Sprintf("%s/%s", c.name, v.name), func(b *testing.B) {
				rows := c.N
				if c.swiglu {
					rows = 2 * c.N
				}
				a := MatMulArgs{T: M, K: c.K, N: c.N, XType: cuda.BF16, WType: cuda.BF16, YType: cuda.BF16, SwiGLU: c.swiglu,
					CC: v.cc, HopperBN: v.bn, HopperSched: v.sched, X: m.rand(M * c.K), W: m.rand(rows * c.K), Y: m.rand(M * c.N)}
				bytes := 2 * float64(rows*c.K+M*(c.K+c.N))
				m.run(b, bytes, 2*float64(M)*float64(rows)*float64(c.K), func() error { return m.k.MatMul(m.s, a) })
			})
		}
		b.Run(c.name+"/cublaslt", func(b *testing.B) {
			lt, err := m.k.Dev.NewLt()
			if errors.Is(err, cuda.ErrNoCublasLt) {
				b.Skipf("optional baseline: %v", err)
			}
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { lt.Close() })
			if c.swiglu {
				b.Skip("cuBLASLt has no SwiGLU epilogue: compared on the plain GEMMs only")
			}
			x, w, y := m.rand(M*c.K), m.rand(c.N*c.K), m.rand(M*c.N)
			bytes := 2 * float64(c.N*c.K+M*(c.K+c.N))
			m.run(b, bytes, 2*float64(M)*float64(c.N)*float64(c.K), func() error { return lt.GEMM(m.s, M, c.N, c.K, x, w, y, cuda.BF16, false) })
		})
	}
}

// quantRefBF16 dequantises ggml blocks on the CPU and rounds to bf16: the
// values the quantised wgmma GEMM multiplies.
func quantRefBF16(t *testing.T, qt quant.Type, blocks []byte, n int) []float32 {
	return roundTo(cuda.BF16, dequantRef(t, qt, blocks, n))
}

// TestHopperQGEMMGPU: the wgmma GEMM with quantised weights against the
// CPU reference on the dequantised (bf16-rounded) weights, over every
// epilogue, ragged T and N, and a row block of a bigger matrix.
func TestHopperQGEMMGPU(t *testing.T) {
	k, s := hopperGPU(t)
	r := rand.New(rand.NewPCG(31, 32))
	cases := []struct{ T, N, K, row0 int }{{9, 64, 256, 0}, {100, 200, 512, 0}, {300, 130, 3072, 0}, {257, 384, 1024, 0}, {129, 100, 512, 37}}
	for _, qt := range lower.HopperQTypes {
		for _, epi := range []int{lower.EpiStore, lower.EpiAccumulate, lower.EpiSwiGLU} {
			for _, c := range cases {
				if epi == lower.EpiSwiGLU && c.row0 != 0 {
					continue
				}
				yt := cuda.F32
				if epi == lower.EpiAccumulate {
					yt = cuda.BF16
				}
				name := fmt.Sprintf("%s/epi%d/T%d_N%d_K%d_row0%d", qt, epi, c.T, c.N, c.K, c.row0)
				t.Run(name, func(t *testing.T) {
					rows := c.N
					if epi == lower.EpiSwiGLU {
						rows *= 2
					}
					total := c.row0 + rows + 5 // rows after the block must not be read
					blocks := randQuantBlocks(r, qt, total, c.K)
					wAll := quantRefBF16(t, qt, blocks, total*c.K)
					w := wAll[c.row0*c.K : (c.row0+rows)*c.K]
					x := roundTo(cuda.BF16, randF32(r, c.T*c.K, 1))
					wp := uploadQuant(t, k, s, qt, total, c.K, blocks)
					xp := upload(t, k, s, cuda.BF16, x)
					ref := MatMulArgs{T: c.T, K: c.K, N: c.N, SwiGLU: epi == lower.EpiSwiGLU, Accumulate: epi == lower.EpiAccumulate}
					var y0 []float32
					var yp cuda.DevicePtr
					if ref.Accumulate {
						y0 = roundTo(yt, randF32(r, c.T*c.N, 4))
						yp = upload(t, k, s, yt, y0)
					} else {
						yp = alloc(t, k, int64(c.T*c.N*yt.Size()))
						poison(t, s, yp, int64(c.T*c.N*yt.Size()))
					}
					if err := k.HopperQGEMM(s, c.T, c.N, c.K, xp, wp, qt, total, c.row0, yp, yt, epi, c.N); err != nil {
						t.Fatal(err)
					}
					got := download(t, s, yt, yp, c.T*c.N)
					tol := 2e-3 // the CPU and GPU dequantisers may round a weight to bf16 one ulp apart
					if yt == cuda.BF16 {
						tol = tolFor(yt)
					}
					checkClose(t, name, got, mmRef(t, ref, x, w, y0), tol)
				})
			}
		}
	}
}

// TestMoEExpertsQuantGPU: the routed experts with quantised stacks through
// MoEExperts, on every path lower picks: the decode GEMVs (T <= 8), the
// grouped wgmma GEMMs (Hopper, q8_0 and q4_k) and the stacks dequantised
// for the bf16 grouped path (mma.sync target, and the types without a
// wgmma kernel), against the CPU reference on the dequantised weights.
// Each case draws its data from its own name, so cases added or removed
// leave the others' data as it was.
func TestMoEExpertsQuantGPU(t *testing.T) {
	k, s := hopperGPU(t)
	cases := []moeCase{
		{T: 3, H: 256, I: 256, E: 8, k: 3, dist: "distinct"},
		{T: 9, H: 256, I: 256, E: 8, k: 3, dist: "distinct", acc: true},
		{T: 129, H: 512, I: 256, E: 64, k: 6, dist: "skewed"},
		{T: 200, H: 256, I: 512, E: 16, k: 4, dist: "same", acc: true},
		{T: 129, H: 256, I: 256, E: 64, k: 6, dist: "invalid"},
	}
	// The wgmma path's token tiles and CTAs a multiprocessor: as chosen
	// (96 rows on one CTA of four consumer warpgroups), and forced (QMoE's
	// TileRows, CTAs), each width with MMAs of its own, after
	// moe_gather_rows; MMAs as wide as a tile's rows in steps of 16 (chosen), 8 or 32 (step), or of
	// the whole tile (whole); the pipelined loop (lower's choice on four
	// warpgroups) forced (pipe) or the plain one forced (nopipe); bf16
	// operands rather than f16 (bf16ops); 112-row tiles (the plain loop on
	// four warpgroups), MMAs in steps of 16 and 8 and of the whole tile.
	type variant struct {
		cc, rows, ctas, wgs int
		step                int
		whole               bool
		pipe                int // 1: forced (QMoE.Pipe), -1: the plain loop forced (QMoE.NoPipe), 0: lower's
		bf16ops             bool
	}
	for _, qt := range lower.QuantKernelTypes {
		for _, v := range []variant{{90, 0, 0, 0, 0, false, 0, false}, {90, 64, 0, 0, 0, false, 0, false},
			{90, 128, 0, 0, 0, false, 0, false}, {90, 96, 1, 0, 0, false, 0, false}, {90, 64, 1, 0, 0, false, 0, false},
			{90, 96, 1, 4, 0, false, 0, false}, {90, 64, 1, 4, 0, false, 0, false},
			{0, 0, 0, 0, 0, false, 0, false}, {90, 96, 2, 0, 0, false, 0, false},
			{90, 0, 0, 0, 0, true, 0, false}, {90, 128, 1, 2, 8, false, 0, false}, {90, 96, 2, 0, 32, false, 0, false},
			{90, 0, 0, 0, 0, false, -1, false}, {90, 128, 0, 0, 0, false, 1, false}, {90, 96, 1, 2, 0, false, 1, false},
			{90, 64, 0, 0, 0, false, 1, false}, {90, 0, 0, 0, 0, true, 1, false},
			{90, 0, 0, 0, 0, false, 0, true}, {90, 0, 0, 0, 0, true, 1, true},
			{90, 112, 0, 0, 0, false, 0, false}, {90, 112, 1, 4, 8, false, 0, false}, {90, 112, 0, 0, 0, true, 0, false}} {
			cc := v.cc
			for _, c := range cases {
				if (v.rows != 0 || v.bf16ops) && (c.T <= GEMVMaxRows || !slices.Contains(lower.HopperQTypes, qt)) {
					continue
				}
				name := fmt.Sprintf("%s/cc%d/rows%d/%+v", qt, cc, v.rows, c)
				if v.ctas != 0 {
					name = fmt.Sprintf("%s/cc%d/rows%d/ctas%d/%+v", qt, cc, v.rows, v.ctas, c)
				}
				if v.wgs != 0 {
					name = fmt.Sprintf("%s/cc%d/rows%d/ctas%d/wgs%d/%+v", qt, cc, v.rows, v.ctas, v.wgs, c)
				}
				if v.step != 0 {
					name = fmt.Sprintf("vn%d/%s", v.step, name)
				}
				if v.whole {
					name = "whole/" + name
				}
				if v.bf16ops {
					name = "bf16ops/" + name
				}
				switch v.pipe {
				case 1:
					name = "pipe/" + name
				case -1:
					name = "nopipe/" + name
				}
				t.Run(name, func(t *testing.T) {
					a, d := quantMoE(t, k, s, name, 42, c, qt, qt)
					a.CC = cc
					a.QMoE = lower.QMoEForce{TileRows: v.rows, CTAs: v.ctas, WGs: v.wgs, TokenStep: v.step, WholeTile: v.whole, Pipe: v.pipe == 1,
						NoPipe: v.pipe == -1, BF16Ops: v.bf16ops}
					moeWorkspace(t, k, s, &a)
					if ls, err := k.MoELaunches(a); err != nil {
						t.Fatal(err)
					} else if hasKernel(ls, "gemm_wgmma_q") && !hasKernel(ls, "moe_gather_rows") {
						// gemm_wgmma_q's producer stages scales and does not gather.
						t.Fatal("the quantised grouped GEMMs without moe_gather_rows")
					}
					if err := k.MoEExperts(s, a); err != nil {
						t.Fatal(err)
					}
					got := download(t, s, cuda.BF16, a.Out, c.T*c.H)
					// Decode quantises the activations to int8: a little
					// looser than bf16.
					checkClose(t, "moe", got, moeRef(t, c, d), 2*tolFor(cuda.BF16))
					if !v.whole && v.pipe != -1 {
						return
					}
					// MMAs as wide as each tile's rows give the whole
					// tile's bits, and the pipelined loop (forced: q4_k's
					// default) the plain one's (the same MMAs in the same
					// order).
					a.QMoE.WholeTile, a.QMoE.Pipe, a.QMoE.NoPipe = false, a.QMoE.Pipe || a.QMoE.NoPipe, false
					if c.acc {
						a.Out = upload(t, k, s, cuda.BF16, d.out0)
					}
					if err := k.MoEExperts(s, a); err != nil {
						t.Fatal(err)
					}
					if narrow := download(t, s, cuda.BF16, a.Out, c.T*c.H); !slices.Equal(narrow, got) {
						t.Fatal("lower's MMA widths and loop changed the bits of the whole tile's or the plain loop's result")
					}
				})
			}
		}
	}
}

// TestMoEQuantF16GPU: the quantised grouped GEMMs on f16 operands (the
// default) are as close to the routed experts on the exact dequantised
// weights (float, not rounded to bf16) as on bf16 operands (bf16ops): at
// most 1.25 times the error (H200: q4_k 0.99 and 1.08 times, q8_0 and iq4_xs 0.58-0.59;
// both paths round each route's output to bf16, which dominates).
func TestMoEQuantF16GPU(t *testing.T) {
	k, s := hopperGPU(t)
	for _, qt := range lower.HopperQTypes {
		for _, c := range []moeCase{{T: 129, H: 512, I: 256, E: 64, k: 6, dist: "skewed"}, {T: 300, H: 1024, I: 512, E: 16, k: 4, dist: "distinct"}} {
			t.Run(fmt.Sprintf("%s/%+v", qt, c), func(t *testing.T) { moeQuantF16(t, k, s, qt, c) })
		}
	}
}

// moeQuantF16 is one case of TestMoEQuantF16GPU.
func moeQuantF16(t *testing.T, k *Kernels, s *cuda.Stream, qt quant.Type, c moeCase) {
	r := rand.New(rand.NewPCG(uint64(c.T), 7))
	gub := randQuantBlocks(r, qt, 2*c.E*c.I, c.H)
	db := randQuantBlocks(r, qt, c.E*c.H, c.I)
	gu := dequantRef(t, qt, gub, 2*c.E*c.I*c.H)
	d := moeGen(r, c, cuda.BF16, cuda.BF16, cuda.BF16)
	d.gate, d.up, d.down = gu[:c.E*c.I*c.H], gu[c.E*c.I*c.H:], dequantRef(t, qt, db, c.E*c.H*c.I)
	want := moeRef(t, c, d)
	gp := uploadQuant(t, k, s, qt, 2*c.E*c.I, c.H, gub)
	a := MoEArgs{T: c.T, H: c.H, I: c.I, E: c.E, TopK: c.k, XType: cuda.BF16, WType: cuda.BF16, OutType: cuda.BF16,
		Path: MoEAuto, Order: ExpertsByLoad, CC: 90, SMs: k.SMs(), WQuant: qt,
		QGate: QMatrix{W: gp, Total: 2 * c.E * c.I}, QUp: QMatrix{W: gp, Total: 2 * c.E * c.I, Row0: c.E * c.I},
		QDown: QMatrix{W: uploadQuant(t, k, s, qt, c.E*c.H, c.I, db), Total: c.E * c.H},
		X:     upload(t, k, s, cuda.BF16, d.x), Weights: upload(t, k, s, cuda.F32, d.w), IDs: uploadI32(t, k, s, d.ids),
		Out: alloc(t, k, int64(2*c.T*c.H))}
	moeWorkspace(t, k, s, &a)
	errs := map[bool]float64{} // by f16 operands
	for _, f16 := range []bool{true, false} {
		a.QMoE.BF16Ops = !f16
		ls, err := k.MoELaunches(a)
		if err != nil {
			t.Fatal(err)
		}
		if hasKernel(ls, "moe_gather_rows_f16") != f16 {
			t.Fatalf("f16 operands %v: the f16 gather launched: %v", f16, !f16)
		}
		if err := k.MoEExperts(s, a); err != nil {
			t.Fatal(err)
		}
		got := download(t, s, cuda.BF16, a.Out, c.T*c.H)
		errs[f16] = fixture.RelL2(got, want)
	}
	t.Logf("relative error against the float weights: f16 operands %.3g, bf16 operands %.3g", errs[true], errs[false])
	if errs[true] > 1.25*errs[false] || errs[false] > 2*tolFor(cuda.BF16) {
		t.Fatalf("f16 operands' error %.3g above 1.25 times bf16's %.3g (or that above %.3g)", errs[true], errs[false], 2*tolFor(cuda.BF16))
	}
}

// BenchmarkHopperQGEMM: prefill GEMMs with q8_0 and q4_k weights at
// Laguna-S-2.1 shapes, both ways lower may run them: inreg (gemm_wgmma_q
// dequantising in registers) and dequant_bf16 (the rows dequantised into a
// bf16 scratch, then the bf16 wgmma GEMM), at 512 and 2048 tokens.
func BenchmarkHopperQGEMM(b *testing.B) {
	m := newMMBench(b)
	sh := s21(b)
	for _, qt := range lower.HopperQTypes {
		for _, c := range []benchShape{sh.qkvg, sh.oProj, sh.sharedGateUp, sh.sharedDown} {
			rows, epi := c.N, lower.EpiStore
			if c.swiglu {
				rows, epi = 2*c.N, lower.EpiSwiGLU
			}
			wb, err := lower.QuantDeviceBytes(qt, rows, c.K)
			if err != nil {
				b.Fatal(err)
			}
			w := m.rand(int(wb / 2))
			if err := m.k.QSynth(m.s, qt, w, rows, c.K, 1); err != nil {
				b.Fatal(err)
			}
			dq := m.rand(rows * c.K)
			for _, T := range []int{512, 1024, 2048} {
				x, y := m.rand(T*c.K), m.rand(T*c.N)
				bytes, flops := float64(wb)+2*float64(T*(c.K+c.N)), 2*float64(T)*float64(rows)*float64(c.K)
				b.Run(fmt.Sprintf("%s/%s/T=%d/inreg", qt, c.name, T), func(b *testing.B) {
					m.run(b, bytes, flops, func() error {
						return m.k.HopperQGEMM(m.s, T, c.N, c.K, x, w, qt, rows, 0, y, cuda.BF16, epi, c.N)
					})
				})
				b.Run(fmt.Sprintf("%s/%s/T=%d/dequant_bf16", qt, c.name, T), func(b *testing.B) {
					m.run(b, bytes+float64(4*rows*c.K), flops, func() error {
						if err := m.k.QDequant(m.s, qt, w, rows, c.K, 0, rows, dq, cuda.BF16); err != nil {
							return err
						}
						return m.k.MatMul(m.s, MatMulArgs{T: T, K: c.K, N: c.N, X: x, W: dq, Y: y, XType: cuda.BF16,
							WType: cuda.BF16, YType: cuda.BF16, SwiGLU: c.swiglu, CC: 90})
					})
				})
			}
		}
	}
}

// BenchmarkMoEQuant: the routed experts of a prefill with quantised
// stacks (top-10 of 256, H 3072, I 1024) on the path lower picks.
func BenchmarkMoEQuant(b *testing.B) {
	m := newMMBench(b)
	r := rand.New(rand.NewPCG(3, 4))
	const E, K, H, I = 256, 10, 3072, 1024
	for _, qt := range lower.QuantKernelTypes {
		gate, up, down, bytes := m.quantStacks(qt, E, H, I)
		for _, T := range []int{512, 1024, 2048} {
			for _, noPipe := range []bool{false, true} {
				if noPipe && T != 2048 {
					continue
				}
				name := fmt.Sprintf("%s/T=%d", qt, T)
				if noPipe {
					name += "/nopipe" // the plain loop, A/B against the pipelined default
				}
				b.Run(name, func(b *testing.B) {
					ids, wts := benchRoutes(r, T, E, K)
					a := MoEArgs{T: T, H: H, I: I, E: E, TopK: K, XType: cuda.BF16, WType: cuda.BF16, OutType: cuda.BF16,
						Order: ExpertsByLoad, CC: 90, SMs: m.k.SMs(), WQuant: qt, X: m.rand(T * H), Out: m.rand(T * H),
						QGate: gate, QUp: up, QDown: down, QMoE: lower.QMoEForce{NoPipe: noPipe}}
					m.routes(b, &a, ids, wts)
					m.run(b, float64(bytes), 2*float64(T*K)*3*I*H, func() error { return m.k.MoEExperts(m.s, a) })
				})
			}
		}
	}
}

// TestMatMulHopperSplitGPU: one wgmma GEMM whose epilogue sends each of up
// to four outputs its columns (lower.MatMulArgs.Split: a prefill's q, k,
// v and gate) against the CPU reference's columns of the whole product,
// over poisoned outputs: ragged rows, a last output of any width, both
// tile widths and the ping-pong schedule, both output dtypes.
func TestMatMulHopperSplitGPU(t *testing.T) {
	k, s := hopperGPU(t)
	r := rand.New(rand.NewPCG(31, 32))
	for _, c := range []struct {
		T, K   int
		widths []int
		bn     int
		sched  lower.HopperSched
	}{
		{300, 256, []int{256, 128, 128, 72}, 0, lower.SchedAuto},
		{37, 192, []int{512, 256, 256, 40}, 256, lower.SchedCooperative},
		{2100, 136, []int{384, 128, 128, 8}, 128, lower.SchedPingPong},
		{129, 64, []int{128, 5}, 128, lower.SchedCooperative},
	} {
		for _, yt := range []cuda.DType{cuda.BF16, cuda.F32} {
			name := fmt.Sprintf("T%d_K%d_%v_BN%d_%v/%v", c.T, c.K, c.widths, c.bn, c.sched, yt)
			t.Run(name, func(t *testing.T) {
				N := 0
				for _, w := range c.widths {
					N += w
				}
				x := roundTo(cuda.BF16, randF32(r, c.T*c.K, 1))
				w := roundTo(cuda.BF16, randF32(r, N*c.K, 1))
				a := lower.MatMulArgs{T: c.T, K: c.K, N: N, X: ptr(upload(t, k, s, cuda.BF16, x)), W: ptr(upload(t, k, s, cuda.BF16, w)),
					XType: "bf16", WType: "bf16", YType: yt.String(), SMs: k.SMs(), CC: k.CC(), HopperBN: c.bn, HopperSched: c.sched}
				ys := make([]cuda.DevicePtr, len(c.widths))
				for i, wd := range c.widths {
					n := int64(c.T * wd * yt.Size())
					ys[i] = alloc(t, k, n)
					poison(t, s, ys[i], n)
					a.Split = append(a.Split, lower.SplitOut{Y: ptr(ys[i]), N: wd})
				}
				l, err := lower.MatMul(a)
				if err != nil {
					t.Fatal(err)
				}
				if l.Kernel != "gemm_wgmma" || l.Ints[4] != 1 {
					t.Fatalf("chose %s", l.NameExpr())
				}
				b, err := k.Bind(l, deviceBase)
				if err != nil {
					t.Fatal(err)
				}
				if err := b.Launch(s); err != nil {
					t.Fatal(err)
				}
				want := mmRef(t, MatMulArgs{T: c.T, K: c.K, N: N, XType: cuda.BF16, WType: cuda.BF16, YType: yt}, x, w, nil)
				col := 0
				for i, wd := range c.widths {
					got := download(t, s, yt, ys[i], c.T*wd)
					part := make([]float32, 0, c.T*wd)
					for row := 0; row < c.T; row++ {
						part = append(part, want[row*N+col:row*N+col+wd]...)
					}
					checkClose(t, fmt.Sprintf("output %d", i), got, part, tolFor(yt))
					col += wd
				}
			})
		}
	}
}

// BenchmarkGEMMShortChunk: the plain prefill GEMMs of short chunks (S-2.1's
// router logits in f32, o_proj, the dense and shared downs) on gemm_wgmma
// (lower's choice below lower.CublasLtMinRows rows) against cuBLASLt, at
// T from 128 to 2048 rows: where a chunk has too few 128-row tiles to fill
// the GPU (the router's 256 columns at 512 tokens are 8 tiles).
//
//	exec__gpu.test -test.run '^$' -test.bench GEMMShortChunk -test.benchtime 200x
func BenchmarkGEMMShortChunk(b *testing.B) {
	m := newMMBench(b)
	sh := s21(b)
	lt, err := m.k.Dev.NewLt()
	if errors.Is(err, cuda.ErrNoCublasLt) {
		lt = nil
	} else if err != nil {
		b.Fatal(err)
	} else {
		b.Cleanup(func() { lt.Close() })
	}
	router := benchShape{"router", 256, sh.oProj.N, false}
	for _, c := range []benchShape{router, sh.oProj, sh.denseDown, sh.sharedDown} {
		yt := cuda.BF16
		if c.name == "router" {
			yt = cuda.F32
		}
		for _, T := range []int{128, 256, 512, 1024, 2048} {
			x, w, y := m.rand(T*c.K), m.rand(c.N*c.K), m.rand(2*T*c.N)
			bytes := 2 * float64(c.N*c.K+T*(c.K+c.N))
			flops := 2 * float64(T) * float64(c.N) * float64(c.K)
			b.Run(fmt.Sprintf("%s/T=%d/wgmma", c.name, T), func(b *testing.B) {
				a := MatMulArgs{T: T, K: c.K, N: c.N, XType: cuda.BF16, WType: cuda.BF16, YType: yt, CC: 90, X: x, W: w, Y: y}
				m.run(b, bytes, flops, func() error { return m.k.MatMul(m.s, a) })
			})
			b.Run(fmt.Sprintf("%s/T=%d/cublaslt", c.name, T), func(b *testing.B) {
				if lt == nil {
					b.Skip("optional baseline: no cuBLASLt")
				}
				m.run(b, bytes, flops, func() error { return lt.GEMM(m.s, T, c.N, c.K, x, w, y, yt, false) })
			})
		}
	}
}
