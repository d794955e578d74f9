package gpu

import (
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"lagc/cuda"
	"lagc/lower"
	"lagc/quant"
)

// TestMoEExpertsMixedGPU: routed experts whose down stack has another
// block type than their gate and up (llama.cpp's Q4_K_M stores some
// layers' downs in Q6_K) against the float reference: decode (the
// GEMVs, each stack's type), prefill on the quantised wgmma GEMMs where
// both types have one (f16 operands, and bf16 forced), with the down alone
// dequantised to bf16 rows on that GEMM where only its type has none
// (q4_k + q6_k), and with every stack dequantised where the gate's has
// none (q5_k + q6_k).
func TestMoEExpertsMixedGPU(t *testing.T) {
	k, s := hopperGPU(t)
	for _, pair := range [][2]quant.Type{{quant.Q4_K, quant.Q6_K}, {quant.Q5_K, quant.Q6_K}, {quant.Q4_K, quant.Q8_0}, {quant.IQ4_XS, quant.Q8_0}, {quant.Q8_0, quant.Q4_K}} {
		gt, dt := pair[0], pair[1]
		for _, c := range []moeCase{
			{T: 3, H: 256, I: 256, E: 8, k: 3, dist: "distinct"},
			{T: 129, H: 512, I: 256, E: 64, k: 6, dist: "skewed"},
			{T: 200, H: 256, I: 512, E: 16, k: 4, dist: "same", acc: true},
		} {
			for _, bf16ops := range []bool{false, true} {
				if bf16ops && c.T <= GEMVMaxRows {
					continue
				}
				name := fmt.Sprintf("%s+%s/bf16ops=%v/%+v", gt, dt, bf16ops, c)
				t.Run(name, func(t *testing.T) {
					a, d := quantMoE(t, k, s, name, 43, c, gt, dt)
					a.QMoE.BF16Ops = bf16ops
					moeWorkspace(t, k, s, &a)
					ls, err := k.MoELaunches(a)
					if err != nil {
						t.Fatal(err)
					}
					// The quantised wgmma path where the gate's type has one
					// (a down without: dequantised to bf16 rows, run on it
					// too); without, the stacks are dequantised and may run
					// as bf16 rows on it (QT_BF16_H, type 30) alone.
					hopper := c.T > GEMVMaxRows && slices.Contains(lower.HopperQMoETypes, gt)
					if got := hasQuantWgmma(ls); got != hopper {
						t.Fatalf("gemm_wgmma_q of a quantised type launched: %v, want %v", got, hopper)
					}
					if err := k.MoEExperts(s, a); err != nil {
						t.Fatal(err)
					}
					got := download(t, s, cuda.BF16, a.Out, c.T*c.H)
					// Decode quantises the activations to int8: a little
					// looser than bf16 (TestMoEExpertsQuantGPU's bound).
					checkClose(t, "moe", got, moeRef(t, c, d), 2*tolFor(cuda.BF16))
				})
			}
		}
	}
}

// quantMoE is case c's routed experts with quantised stacks on the device,
// gate and up of type gt, down of dt, random blocks seeded by name, and
// the float data the reference takes (the stacks dequantised, rounded to
// bf16 where the prefill paths multiply bf16); CC 90, the experts by load,
// no workspace yet.
func quantMoE(t *testing.T, k *Kernels, s *cuda.Stream, name string, seed uint64, c moeCase, gt, dt quant.Type) (MoEArgs, moeData) {
	t.Helper()
	h := fnv.New64a()
	h.Write([]byte(name))
	r := rand.New(rand.NewPCG(h.Sum64(), seed))
	gub := randQuantBlocks(r, gt, 2*c.E*c.I, c.H)
	db := randQuantBlocks(r, dt, c.E*c.H, c.I)
	gu := dequantRef(t, gt, gub, 2*c.E*c.I*c.H)
	dn := dequantRef(t, dt, db, c.E*c.H*c.I)
	if c.T > GEMVMaxRows { // the prefill paths multiply bf16
		gu, dn = roundTo(cuda.BF16, gu), roundTo(cuda.BF16, dn)
	}
	d := moeGen(r, c, cuda.BF16, cuda.BF16, cuda.BF16)
	d.gate, d.up, d.down = gu[:c.E*c.I*c.H], gu[c.E*c.I*c.H:], dn
	a := MoEArgs{T: c.T, H: c.H, I: c.I, E: c.E, TopK: c.k, XType: cuda.BF16, WType: cuda.BF16, OutType: cuda.BF16,
		Accumulate: c.acc, Path: MoEAuto, Order: ExpertsByLoad, CC: 90, SMs: k.SMs(), WQuant: gt, DownQuant: dt}
	gp := uploadQuant(t, k, s, gt, 2*c.E*c.I, c.H, gub)
	a.QGate = QMatrix{W: gp, Total: 2 * c.E * c.I}
	a.QUp = QMatrix{W: gp, Total: 2 * c.E * c.I, Row0: c.E * c.I}
	a.QDown = QMatrix{W: uploadQuant(t, k, s, dt, c.E*c.H, c.I, db), Total: c.E * c.H}
	a.X = upload(t, k, s, cuda.BF16, d.x)
	a.Weights = upload(t, k, s, cuda.F32, d.w)
	a.IDs = uploadI32(t, k, s, d.ids)
	if c.acc {
		a.Out = upload(t, k, s, cuda.BF16, d.out0)
	} else {
		a.Out = alloc(t, k, int64(2*c.T*c.H))
	}
	return a, d
}

// q6kForces are the grouped GEMM shapes TestMoEQ6KGPU runs q6_k and q5_k
// stacks in (and TestPlanKernelsCompile compiles): the default, two CTAs
// of two warpgroups, 64- and 128-row tiles, the pipelined loop, MMAs as
// wide as the tile; each on f16 and on bf16 operands.
var q6kForces = func() []lower.QMoEForce {
	var fs []lower.QMoEForce
	for _, bf16ops := range []bool{false, true} {
		for _, f := range []lower.QMoEForce{{}, {TileRows: 64, CTAs: 2}, {TileRows: 96, CTAs: 2}, {TileRows: 112}, {TileRows: 128}, {Pipe: true}, {WholeTile: true}} {
			f.BF16Ops = bf16ops
			fs = append(fs, f)
		}
	}
	return fs
}()

// q6kPairs are the gate+up and down types of TestMoEQ6KGPU: llama.cpp's
// Q4_K_M (q6_k downs under q4_k), its Q5_K_M (under q5_k), Q6_K, and all
// q5_k.
var q6kPairs = [][2]quant.Type{{quant.Q4_K, quant.Q6_K}, {quant.Q5_K, quant.Q6_K}, {quant.Q6_K, quant.Q6_K}, {quant.Q5_K, quant.Q5_K}}

// TestMoEQ6KGPU: q6_k and q5_k expert stacks on gemm_wgmma_q (the
// default; QMoEForce.NoQ6K, NoQ5K dequantise them instead: QA<QT_Q6_K_H>, QA<QT_Q5_K_H> and their f16 forms,
// the weights dequantised in the MMA's registers) against the float
// reference in every shape of q6kForces. On bf16 operands a q6_k down
// under q4_k gives bit for bit the result of the path which dequantises
// the down into the workspace and runs it as bf16 rows on the same GEMM
// (the same bf16 weights, the same MMAs in the same order).
func TestMoEQ6KGPU(t *testing.T) {
	k, s := hopperGPU(t)
	for _, pair := range q6kPairs {
		gt, dt := pair[0], pair[1]
		for _, c := range []moeCase{
			{T: 129, H: 512, I: 256, E: 64, k: 6, dist: "skewed"},
			{T: 200, H: 256, I: 512, E: 16, k: 4, dist: "same", acc: true},
			{T: 300, H: 768, I: 256, E: 8, k: 2, dist: "distinct"},
		} {
			for _, f := range q6kForces {
				name := fmt.Sprintf("%s+%s/%+v/%+v", gt, dt, f, c)
				t.Run(name, func(t *testing.T) {
					run := func(f lower.QMoEForce) ([]float32, moeData) {
						a, d := quantMoE(t, k, s, name, 47, c, gt, dt)
						a.QMoE = f
						moeWorkspace(t, k, s, &a)
						ls, err := k.MoELaunches(a)
						if err != nil {
							t.Fatal(err)
						}
						if !f.NoQ6K && hasKernel(ls, "qdequant") {
							t.Fatalf("the stacks were dequantised: %v", ls)
						}
						if err := k.MoEExperts(s, a); err != nil {
							t.Fatal(err)
						}
						return download(t, s, cuda.BF16, a.Out, c.T*c.H), d
					}
					got, d := run(f)
					checkClose(t, "moe", got, moeRef(t, c, d), 2*tolFor(cuda.BF16))
					if gt != quant.Q4_K || !f.BF16Ops {
						return
					}
					nf := f
					nf.NoQ6K, nf.NoQ5K = true, true
					want, _ := run(nf)
					for i := range got {
						if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
							t.Fatalf("element %d: %v in registers, %v through the dequantised bf16 rows", i, got[i], want[i])
						}
					}
				})
			}
		}
	}
}

// hasQuantWgmma says whether ls launch gemm_wgmma_q on quantised weights
// (a type id other than QT_BF16_H's 30).
func hasQuantWgmma(ls []KernelLaunch) bool {
	for _, l := range ls {
		if rest, ok := strings.CutPrefix(l.Name, "gemm_wgmma_q<"); ok {
			if f := strings.Split(rest, ", "); len(f) > 1 && f[1] != "30" {
				return true
			}
		}
	}
	return false
}
