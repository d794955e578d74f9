package lower

import (
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"lagc/ckpt"
	"lagc/ir"
	"lagc/quant"
)

// mixedMoEArgs is a quantised MoE of S-2.1's shape whose gate and up
// stacks are gt and whose down stack is dt.
func mixedMoEArgs(T int, gt, dt quant.Type) MoEArgs {
	E, H, I := 256, 3072, 1024
	w := Ptr{BaseWeights, 0}
	a := MoEArgs{T: T, H: H, I: I, E: E, TopK: 10, X: Ptr{BaseArena, 0}, Weights: Ptr{BaseArena, 1 << 26},
		IDs: Ptr{BaseArena, 2 << 26}, Out: Ptr{BaseArena, 3 << 26}, XType: "bf16", WType: gt.String(), OutType: "bf16",
		CC: 90, SMs: 132, QGate: QMatrix{W: w, Total: 2 * E * I}, QUp: QMatrix{W: w, Total: 2 * E * I, Row0: E * I},
		QDown: QMatrix{W: Ptr{BaseWeights, 1 << 32}, Total: E * H}, Workspace: Ptr{BaseWorkspace, 0}}
	if dt != gt {
		a.DownType = dt.String()
	}
	return a
}

// TestMoEMixedTypes: experts whose down stack has another block type than
// their gate and up (llama.cpp's Q4_K_M keeps some layers' downs in Q6_K)
// run the gate+up launch of the gate's type and the down launch of the
// down's, each exactly as an expert stack all of that type runs it: decode
// (the GEMVs, their rounds and shared memory per type) and prefill on the
// quantised wgmma GEMMs where both types have one (each GEMM its type's
// template, pipelined loop and shared memory; f16 operands as both have
// them, bf16 for both when forced). A down type without a grouped GEMM
// (q6_k) dequantises each stack from its own type.
func TestMoEMixedTypes(t *testing.T) {
	// q6_k and q5_k without their grouped GEMMs (NoQ6K, NoQ5K): the paths a
	// type without one takes (TestMoEQ6KHopper has theirs).
	fallback := func(T int, gt, dt quant.Type) MoEArgs {
		a := mixedMoEArgs(T, gt, dt)
		a.QMoE.NoQ6K, a.QMoE.NoQ5K = true, true
		return a
	}
	launches := func(a MoEArgs) []Launch {
		t.Helper()
		ls, err := MoE(a)
		if err != nil {
			t.Fatalf("%s/%s T=%d: %v", a.WType, a.downType(), a.T, err)
		}
		return ls
	}
	find := func(ls []Launch, kern string, nth int) Launch {
		t.Helper()
		for _, l := range ls {
			if l.Kernel == kern {
				if nth == 0 {
					return l
				}
				nth--
			}
		}
		t.Fatalf("no %s launch %d in %v", kern, nth, ls)
		return Launch{}
	}
	for _, c := range []struct{ gate, down quant.Type }{
		{quant.Q4_K, quant.Q6_K}, {quant.Q5_K, quant.Q6_K}, {quant.Q4_K, quant.Q8_0}, {quant.IQ4_XS, quant.Q8_0}, {quant.Q8_0, quant.Q4_K},
	} {
		name := c.gate.String() + "/" + c.down.String()
		// Decode, one token and a batch of them.
		for _, T := range []int{1, 4} {
			mixed := launches(fallback(T, c.gate, c.down))
			g, d := launches(fallback(T, c.gate, c.gate)), launches(fallback(T, c.down, c.down))
			if len(mixed) != 3 || !reflect.DeepEqual(mixed[0], g[0]) || !reflect.DeepEqual(mixed[1], g[1]) || !reflect.DeepEqual(mixed[2], d[2]) {
				t.Errorf("%s T=%d: launches\n %v\nwant the %s stacks' x copy and gate+up, the %s stacks' down:\n %v\n %v", name, T, mixed, c.gate, c.down, g, d)
			}
		}
		// Prefill.
		a := fallback(2048, c.gate, c.down)
		l, err := a.Layout()
		if err != nil {
			t.Fatal(err)
		}
		gateQ, downQ := slices.Contains(HopperQTypes, c.gate), slices.Contains(HopperQTypes, c.down)
		want := moeQuantDequant
		switch {
		case gateQ && downQ:
			want = moeQuantHopper
		case gateQ:
			want = moeQuantHopperBF16Down
		}
		if l.Quant != want {
			t.Errorf("%s prefill: path %d, want %d", name, l.Quant, want)
		}
		mixed := launches(a)
		if !gateQ {
			for i, tt := range []quant.Type{c.gate, c.gate, c.down} {
				if q := find(mixed, "qdequant", i); q.Ints[0] != int64(tt) {
					t.Errorf("%s prefill: stack %d dequantised as type %d, want %s (%d)", name, i, q.Ints[0], tt, tt)
				}
			}
			continue
		}
		if !downQ {
			// The down alone dequantised, into the workspace after the
			// wgmma path's (the same offsets as the gate's type alone uses),
			// and read there as bf16 rows; gate and up as the gate's type
			// runs them on bf16 operands.
			dq := find(mixed, "qdequant", 0)
			at := Ptr{BaseWorkspace, l.Dequant}
			if dq.Ints[0] != int64(c.down) || !reflect.DeepEqual(mixed[0], dq) || dq.Args[len(dq.Args)-1] != ptrArg(at) {
				t.Errorf("%s prefill: first launch %v, want the %s down stack dequantised to %v", name, mixed[0], c.down, at)
			}
			ga := fallback(2048, c.gate, c.gate)
			ga.QMoE.BF16Ops = true
			if got, want := find(mixed, "gemm_wgmma_q", 0), find(launches(ga), "gemm_wgmma_q", 0); !reflect.DeepEqual(got, want) {
				t.Errorf("%s prefill: gate+up\n %v\nwant the %s stacks' on bf16 operands\n %v", name, got, c.gate, want)
			}
			down := find(mixed, "gemm_wgmma_q", 1)
			if down.Ints[0] != int64(quant.BF16) || !strings.Contains(down.String(), "tmap("+at.String()+", bf16 ") {
				t.Errorf("%s prefill: down %v, want bf16 rows (type %d) read at %v", name, down, quant.BF16, at)
			}
			if l.Total != l.Dequant+align256(2*int64(a.E)*int64(a.H)*int64(a.I)) {
				t.Errorf("%s prefill: workspace %d bytes, the down's bf16 rows at %d", name, l.Total, l.Dequant)
			}
			continue
		}
		for _, bf16ops := range []bool{false, true} {
			a.QMoE.BF16Ops = bf16ops
			mixed = launches(a)
			ga, da := fallback(2048, c.gate, c.gate), fallback(2048, c.down, c.down)
			ga.QMoE.BF16Ops, da.QMoE.BF16Ops = bf16ops, bf16ops
			g, d := launches(ga), launches(da)
			if got, want := find(mixed, "gemm_wgmma_q", 0), find(g, "gemm_wgmma_q", 0); !reflect.DeepEqual(got, want) {
				t.Errorf("%s prefill (bf16 operands %v): gate+up\n %v\nwant the %s stacks'\n %v", name, bf16ops, got, c.gate, want)
			}
			if got, want := find(mixed, "gemm_wgmma_q", 1), find(d, "gemm_wgmma_q", 1); !reflect.DeepEqual(got, want) {
				t.Errorf("%s prefill (bf16 operands %v): down\n %v\nwant the %s stacks'\n %v", name, bf16ops, got, c.down, want)
			}
			if gather := find(mixed, map[bool]string{false: "moe_gather_rows_f16", true: "moe_gather_rows"}[bf16ops], 0); gather.Kernel == "" {
				t.Errorf("%s prefill: no gather", name)
			}
		}
	}
}

// TestMoEMixedTypesRejected: stacks of different types must all be block
// types with kernels, and gate and up one type.
func TestMoEMixedTypesRejected(t *testing.T) {
	a := mixedMoEArgs(1, quant.Q4_K, quant.Q6_K)
	a.WType = "bf16"
	a.Gate, a.Up, a.Down = Ptr{BaseWeights, 0}, Ptr{BaseWeights, 1 << 30}, Ptr{BaseWeights, 1 << 32}
	if _, err := MoE(a); err == nil || !strings.Contains(err.Error(), "must all be block-quantised") {
		t.Errorf("bf16 gate and up with a q6_k down: %v", err)
	}
	b := mixedMoEArgs(1, quant.Q4_K, quant.Q2_K)
	if _, err := MoE(b); err == nil || !strings.Contains(err.Error(), "no GPU kernels for q2_k down stacks") {
		t.Errorf("a q2_k down: %v", err)
	}
}

// TestBatchGEMMMixedRuns: with Options.BatchGEMM, a batched decode step of
// more rows than a GEMV takes runs the MoE of a layer whose down stack has
// no grouped wgmma GEMM (q6_k under q4_k, QMoEForce.NoQ6K) as GEMV runs,
// where the GEMMs would dequantise the q6_k stack (1.6 GB in S-2.1) at
// every step; with q6_k's grouped GEMM, or a layer of one type, it keeps
// the GEMMs.
func TestBatchGEMMMixedRuns(t *testing.T) {
	for _, c := range []struct {
		downs quant.Type
		noQ6K bool // q6_k downs without their grouped GEMM (QMoEForce.NoQ6K)
		runs  bool
	}{{quant.Q6_K, true, true}, {quant.Q6_K, false, false}, {quant.Q4_K, false, false}} {
		p, err := quantPlanRules(t, "laguna-s-2.1", 2, "q4_k", []ckpt.TypeRule{{Pattern: regexp.MustCompile("ffn_down"), Type: c.downs}},
			Options{DType: ir.BF16, MaxContext: 256, Seqs: 64, BatchGEMM: true, QMoE: QMoEForce{NoQ6K: c.noQ6K}})
		if err != nil {
			t.Fatal(err)
		}
		steps, err := p.AtBatch(p.Bucket(40))
		if err != nil {
			t.Fatal(err)
		}
		var gemv, gemm, dequant int
		for i, ls := range steps {
			if p.Prefill.Steps[i].Op != "moe_grouped" {
				continue
			}
			for _, l := range ls {
				switch {
				case strings.HasPrefix(l.Kernel, "moe_gateup_qgemv"):
					gemv++
				case l.Kernel == "gemm_wgmma_q":
					gemm++
				case l.Kernel == "qdequant":
					dequant++
				}
			}
		}
		if c.runs && (gemv != 64/GEMVMaxRows || gemm != 0 || dequant != 0) || !c.runs && (gemv != 0 || gemm != 2) {
			t.Errorf("%s downs (noq6k %v): the MoE's batched step makes %d gate+up GEMVs, %d grouped GEMMs, %d dequantisations", c.downs, c.noQ6K, gemv, gemm, dequant)
		}
	}
}

// TestMoEQ6KHopper: with QMoEForce.Q6K and Q5K, q6_k and q5_k stacks run
// on gemm_wgmma_q (type ids 114 and 113 on f16 operands,
// QA<QT_Q6_K_F16_H> and QA<QT_Q5_K_F16_H>; 14 and 13 on bf16 ones): a q6_k
// down under q4_k gate and up (llama.cpp's Q4_K_M) without the down
// dequantised into the workspace, q5_k gate and up over q6_k downs
// (Q5_K_M), all-q6_k and all-q5_k stacks without any, a q4_k gate+up
// exactly as a q4_k layer's on the same operands; the tensor maps the
// 208- or 176-byte bodies in boxes of 32 bytes, the shared memory three
// (q6_k) or two (q5_k) boxes and eight floats of scales a row a stage.
// With NoQ6K and NoQ5K, or an inner dimension that is not whole blocks,
// the dequantising paths.
func TestMoEQ6KHopper(t *testing.T) {
	q6 := func(a MoEArgs) MoEArgs { return a } // the default
	ids := map[bool]map[quant.Type]int64{false: {quant.Q4_K: 112, quant.Q5_K: 113, quant.Q6_K: 114},
		true: {quant.Q4_K: 12, quant.Q5_K: 13, quant.Q6_K: 14}}
	body := map[quant.Type]int{quant.Q5_K: 176, quant.Q6_K: 208}
	for _, c := range []struct{ gate, down quant.Type }{{quant.Q4_K, quant.Q6_K}, {quant.Q6_K, quant.Q6_K}, {quant.Q5_K, quant.Q6_K},
		{quant.Q5_K, quant.Q5_K}} {
		for _, bf16ops := range []bool{false, true} {
			name := fmt.Sprintf("%s/%s bf16ops=%v", c.gate, c.down, bf16ops)
			a := q6(mixedMoEArgs(2048, c.gate, c.down))
			a.QMoE.BF16Ops = bf16ops
			l, err := a.Layout()
			if err != nil {
				t.Fatal(err)
			}
			if l.Quant != moeQuantHopper {
				t.Errorf("%s: path %d, want the wgmma path %d", name, l.Quant, moeQuantHopper)
			}
			ls, err := MoE(a)
			if err != nil {
				t.Fatal(err)
			}
			var gemms []Launch
			gathers := 0
			for _, x := range ls {
				switch x.Kernel {
				case "qdequant":
					t.Errorf("%s: %s launched: %v", name, x.Kernel, x)
				case "moe_gather_rows", "moe_gather_rows_f16":
					gathers++
					if (x.Kernel == "moe_gather_rows") != bf16ops {
						t.Errorf("%s: %s launched", name, x.Kernel)
					}
				case "gemm_wgmma_q":
					gemms = append(gemms, x)
				}
			}
			if len(gemms) != 2 || gathers != 1 {
				t.Fatalf("%s: %d gemm_wgmma_q launches and %d gathers, want 2 and 1: %v", name, len(gemms), gathers, ls)
			}
			for i, tt := range []quant.Type{c.gate, c.down} {
				g := gemms[i]
				if g.Ints[0] != ids[bf16ops][tt] {
					t.Errorf("%s: GEMM %d type %d, want %d", name, i, g.Ints[0], ids[bf16ops][tt])
				}
				if tt == quant.Q4_K {
					continue
				}
				K := a.H
				if i == 1 {
					K = a.I
				}
				cols := K / 256 * body[tt]
				if m := fmt.Sprintf("u8 %dx%d ld %d, box 64x32)", []int{2 * a.E * a.I, a.E * a.H}[i], cols, cols); !strings.Contains(g.String(), m) {
					t.Errorf("%s: GEMM %d %v, want the %s map %q", name, i, g, tt, m)
				}
				bn, ctas, wgs := int(g.Ints[1]), int(g.Ints[4]), int(g.Ints[5])
				if want := hopperQSmem(tt, bn, ctas, wgs, int(g.Ints[2]), g.DTypes[0]); g.Shmem != want || want > 227<<10 {
					t.Errorf("%s: GEMM %d shared memory %d, want %d (at most 227 KiB)", name, i, g.Shmem, want)
				}
				if stage := bn*128 + 64*wgs*(map[quant.Type]int{quant.Q5_K: 64, quant.Q6_K: 96}[tt]+32); (g.Shmem-1024-hopperQEpiStage(int(g.Ints[2]), g.DTypes[0], wgs))/stage < 2 {
					t.Errorf("%s: GEMM %d holds fewer than two stages of %d bytes in %d", name, i, stage, g.Shmem)
				}
			}
			if c.gate == quant.Q4_K {
				// gate+up exactly as a q4_k layer's on the same operands
				ga := mixedMoEArgs(2048, c.gate, c.gate)
				ga.QMoE.BF16Ops = bf16ops
				gl, err := MoE(ga)
				if err != nil {
					t.Fatal(err)
				}
				for _, x := range gl {
					if x.Kernel == "gemm_wgmma_q" {
						if !reflect.DeepEqual(x, gemms[0]) {
							t.Errorf("%s: gate+up\n %v\nwant\n %v", name, gemms[0], x)
						}
						break
					}
				}
			}
		}
		// With NoQ6K and NoQ5K: the dequantising paths.
		off := mixedMoEArgs(2048, c.gate, c.down)
		off.QMoE.NoQ6K, off.QMoE.NoQ5K = true, true
		if l, err := off.Layout(); err != nil || l.Quant == moeQuantHopper {
			t.Errorf("%s/%s with noq6k and noq5k: path %d (%v), want a dequantising one", c.gate, c.down, l.Quant, err)
		}
	}
	// I = 320: whole 64-column stages, not whole q6_k blocks.
	a := q6(mixedMoEArgs(2048, quant.Q4_K, quant.Q6_K))
	a.I = 320
	a.QGate.Total, a.QUp.Total, a.QUp.Row0 = 2*a.E*a.I, 2*a.E*a.I, a.E*a.I
	if err := a.hopperQMoEOK(quant.Q6_K, a.I); err == nil || !strings.Contains(err.Error(), "of q6_k's block") {
		t.Errorf("q6_k with K = 320: %v", err)
	}
}
