package gpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"lagc/cuda"
	"lagc/cuda/cudatest"
	"lagc/exec/cpu"
	"lagc/lower"
	"lagc/prep"
)

// gnrCase is a prefill layer's q, k, v, gate split GEMM: T tokens from
// position p0, K input columns, nq q heads and nk kv heads of 128, ng gate
// columns, rotary width rot with attention factor attnf, the tile width
// and schedule lower is asked for.
type gnrCase struct {
	T, p0, K, nq, nk, ng, rot int
	attnf                     float32
	bn                        int
	sched                     lower.HopperSched
}

func (c gnrCase) String() string {
	return fmt.Sprintf("T%d_p%d_K%d_q%d_k%d_rot%d_BN%d_%v", c.T, c.p0, c.K, c.nq, c.nk, c.rot, c.bn, c.sched)
}

// gnrRig is a case's inputs on the device, its launches, and what the
// CPU reference needs.
type gnrRig struct {
	widths        []int              // q, k, v, gate columns
	outs          [][]cuda.DevicePtr // per set (unfused, fused): q, k, v, gate, k rotated, q rotated
	tab           *prep.RopeTable    // the rotation on the host
	pos           []int32
	wq, wk        []float32      // the q and k norm weights
	split, nq, nk []lower.Launch // per set
	fused         []lower.Launch
}

func newGNRRig(tb testing.TB, k *Kernels, s *cuda.Stream, c gnrCase, seed uint64) *gnrRig {
	tb.Helper()
	r := rand.New(rand.NewPCG(seed, 3))
	g := &gnrRig{widths: []int{c.nq * 128, c.nk * 128, c.nk * 128, c.ng}}
	qN, kN, vN, gN := g.widths[0], g.widths[1], g.widths[2], g.widths[3]
	N := qN + kN + vN + gN
	x := upload(tb, k, s, cuda.BF16, roundTo(cuda.BF16, randF32(r, c.T*c.K, 1)))
	w := upload(tb, k, s, cuda.BF16, roundTo(cuda.BF16, randF32(r, N*c.K, 0.2)))
	g.pos = make([]int32, c.T)
	for i := range g.pos {
		g.pos[i] = int32(c.p0 + i)
	}
	dpos := uploadI32(tb, k, s, g.pos)
	inv := make([]float32, c.rot/2)
	for i := range inv {
		inv[i] = float32(math.Pow(10000, -2*float64(i)/float64(c.rot)))
	}
	g.wq, g.wk = randF32(r, 128, 1), randF32(r, 128, 1)
	wq, wk := upload(tb, k, s, cuda.F32, g.wq), upload(tb, k, s, cuda.F32, g.wk)
	g.tab = &prep.RopeTable{RotaryDim: c.rot, InvFreq: inv, AttnFactor: c.attnf}
	table := lower.RoPETable{InvFreq: ptr(upload(tb, k, s, cuda.F32, inv)), RotaryDim: c.rot, AttnFactor: c.attnf}
	// Two sets of outputs: the unfused launches' and the fused GEMM's.
	for v := 0; v < 2; v++ {
		var o []cuda.DevicePtr
		for _, n := range []int{qN, kN, vN, gN, kN, qN} {
			b := int64(2 * c.T * n)
			p := alloc(tb, k, b)
			poison(tb, s, p, b)
			o = append(o, p)
		}
		g.outs = append(g.outs, o)
		a := lower.MatMulArgs{T: c.T, K: c.K, N: N, X: ptr(x), W: ptr(w), XType: "bf16", WType: "bf16", YType: "bf16",
			SMs: k.SMs(), CC: k.CC(), HopperBN: c.bn, HopperSched: c.sched}
		for i, wd := range g.widths {
			a.Split = append(a.Split, lower.SplitOut{Y: ptr(o[i]), N: wd})
		}
		l, err := lower.MatMul(a)
		if err != nil || l.Kernel != "gemm_wgmma" || l.Ints[4] != 1 {
			tb.Fatalf("MatMul chose %s (%v), not the split wgmma GEMM", l.NameExpr(), err)
		}
		nr := func(x, out cuda.DevicePtr, nh int, w cuda.DevicePtr) lower.Launch {
			n, err := lower.NormRoPE(lower.NormRoPEArgs{DType: "bf16", Out: ptr(out), X: ptr(x), LD: nh * 128, T: c.T, NQ: nh, D: 128,
				WQ: ptr(w), Eps: 1e-6, Pos: ptr(dpos), Table: table, SMs: k.SMs()})
			if err != nil {
				tb.Fatal(err)
			}
			return n
		}
		g.split = append(g.split, l)
		g.nq = append(g.nq, nr(o[0], o[5], c.nq, wq))
		g.nk = append(g.nk, nr(o[1], o[4], c.nk, wk))
	}
	// The fused GEMM (set 1): q rotated over its own rows, as plans place
	// it, k into the rotated buffer.
	tab := alloc(tb, k, lower.RoPECSBytes(c.T))
	poison(tb, s, tab, lower.RoPECSBytes(c.T))
	tl, f, err := lower.GEMMNormRoPE(g.split[1], []lower.Launch{g.nq[1], g.nk[1]}, []lower.Ptr{ptr(g.outs[1][0]), ptr(g.outs[1][4])}, ptr(tab))
	if err != nil {
		tb.Fatal(err)
	}
	if f.Kernel != "gemm_wgmma_nr" || f.Ints[2] != int64(c.rot) || tl.Kernel != "rope_cs_table" {
		tb.Fatalf("GEMMNormRoPE gave %s after %s", f.NameExpr(), tl.NameExpr())
	}
	g.fused = []lower.Launch{tl, f}
	return g
}

// checkHeadsClose fails unless every value of got is within two bf16
// steps of its head's largest reference value of want (heads of d values):
// a rotation's difference of two products may cancel, so a small output
// carries the error of its head's large ones.
func checkHeadsClose(t *testing.T, what string, got, want []float32, d int) {
	t.Helper()
	for h := 0; h < len(want); h += d {
		scale := 0.0
		for _, w := range want[h : h+d] {
			scale = math.Max(scale, math.Abs(float64(w)))
		}
		for j := h; j < h+d; j++ {
			if e := math.Abs(float64(got[j]) - float64(want[j])); math.IsNaN(float64(got[j])) || e > scale/128 {
				t.Fatalf("%s: value %d is %v, the reference %v (head's largest %.3g)", what, j, got[j], want[j], scale)
			}
		}
	}
}

// bf16Ulps is how many bf16 steps apart a and b (bf16 values) are.
func bf16Ulps(a, b float32) int {
	key := func(f float32) int64 {
		u := int64(math.Float32bits(f) >> 16)
		if u&0x8000 != 0 {
			return -(u & 0x7fff)
		}
		return u
	}
	d := key(a) - key(b)
	if d < 0 {
		d = -d
	}
	return int(d)
}

// TestGEMMNormRoPEGPU: the split GEMM normalising and rotating the q and k
// heads as it stores them (gemm_wgmma_nr) against the GEMM then
// qk_norm_rope of each (what it replaces): both tile widths and schedules,
// S-2.1's sliding (72 q heads, rot 128) and full (48, rot 64, YaRN's
// factor) layers, a rot of 96, ragged T, positions from 0 to 4096. The
// rotated heads may differ from qk_norm_rope's in their last bits (the
// square sums run in another order; a small rotated value by several bf16
// steps), so both are checked against the CPU reference's norm and
// rotation of the GEMM's bf16 values (checkHeadsClose); v and the gate are
// bit for bit the plain GEMM's.
func TestGEMMNormRoPEGPU(t *testing.T) {
	k, s := hopperGPU(t)
	for i, c := range []gnrCase{
		{T: 300, p0: 700, K: 256, nq: 72, nk: 8, ng: 72, rot: 128, attnf: 1, bn: 128, sched: lower.SchedPingPong},
		{T: 2048, p0: 0, K: 3072, nq: 72, nk: 8, ng: 72, rot: 128, attnf: 1, bn: 128, sched: lower.SchedPingPong},
		{T: 200, p0: 0, K: 192, nq: 48, nk: 8, ng: 48, rot: 64, attnf: 1.3465736, bn: 256, sched: lower.SchedCooperative},
		{T: 2048, p0: 4096, K: 3072, nq: 48, nk: 8, ng: 48, rot: 64, attnf: 1.3465736, bn: 256, sched: lower.SchedCooperative},
		{T: 129, p0: 3, K: 136, nq: 4, nk: 2, ng: 8, rot: 96, attnf: 1, bn: 128, sched: lower.SchedCooperative},
		{T: 77, p0: 9, K: 64, nq: 6, nk: 2, ng: 6, rot: 128, attnf: 1, bn: 256, sched: lower.SchedCooperative},
	} {
		t.Run(c.String(), func(t *testing.T) {
			g := newGNRRig(t, k, s, c, uint64(100+i))
			if err := k.on(s).all([]lower.Launch{g.split[0], g.nq[0], g.nk[0]}, nil); err != nil {
				t.Fatal(err)
			}
			if err := k.on(s).all(g.fused, nil); err != nil {
				t.Fatal(err)
			}
			// Each against the CPU reference's norm and rotation of the
			// unfused GEMM's bf16 q and k: q unfused rotated (set 0, index
			// 5) and fused in place (set 1, index 0); k index 4 in both.
			// v and the gate (2, 3) bit for bit.
			for _, cmp := range []struct {
				name    string
				raw     int
				a, b    int
				nh      int
				w       []float32
				rotated bool
			}{{"q", 0, 5, 0, c.nq, g.wq, true}, {"k", 1, 4, 4, c.nk, g.wk, true}, {"v", 2, 2, 2, c.nk, nil, false}, {"gate", 3, 3, 3, 0, nil, false}} {
				n := g.widths[cmp.raw]
				unfused := download(t, s, cuda.BF16, g.outs[0][cmp.a], c.T*n)
				fused := download(t, s, cuda.BF16, g.outs[1][cmp.b], c.T*n)
				if !cmp.rotated {
					for j := range unfused {
						if math.Float32bits(unfused[j]) != math.Float32bits(fused[j]) {
							t.Fatalf("%s[%d]: %v, the plain GEMM's %v", cmp.name, j, fused[j], unfused[j])
						}
					}
					continue
				}
				raw := download(t, s, cuda.BF16, g.outs[0][cmp.raw], c.T*n)
				ref := make([]float32, len(raw))
				if err := cpu.NormRoPE(ref, raw, cmp.w, g.pos, c.T, cmp.nh, 128, 1e-6, g.tab); err != nil {
					t.Fatal(err)
				}
				for _, v := range []struct {
					what string
					got  []float32
				}{{"qk_norm_rope", unfused}, {"gemm_wgmma_nr", fused}} {
					checkHeadsClose(t, cmp.name+" "+v.what, v.got, ref, 128)
				}
				off, worst := 0, 0
				for j := range unfused {
					if d := bf16Ulps(fused[j], unfused[j]); d > 0 {
						off, worst = off+1, max(worst, d)
					}
				}
				t.Logf("%s: %d of %d values differ from qk_norm_rope's, by up to %d bf16 steps", cmp.name, off, len(unfused), worst)
			}
		})
	}
}

// BenchmarkGEMMNormRoPE times, graph-replayed, an S-2.1 prefill layer's
// split q, k, v, gate GEMM at T=2048 with the k heads' qk_norm_rope after
// it (what plans ran before fusePrefillGEMMNormRoPE, the q heads' work in
// the attention), both heads' qk_norm_rope after it, the GEMM alone, and
// gemm_wgmma_nr (both heads normalised and rotated in the GEMM):
//
//	exec__gpu.test -test.run '^$' -test.bench GEMMNormRoPE -test.count 3
func BenchmarkGEMMNormRoPE(b *testing.B) {
	k, s := hopperBench(b)
	const reps = 20
	for _, c := range []struct {
		name string
		gnrCase
	}{
		{"sliding", gnrCase{T: 2048, K: 3072, nq: 72, nk: 8, ng: 72, rot: 128, attnf: 1}},
		{"full", gnrCase{T: 2048, K: 3072, nq: 48, nk: 8, ng: 48, rot: 64, attnf: 1.3465736}},
	} {
		g := newGNRRig(b, k, s, c.gnrCase, 9)
		for _, v := range []struct {
			name string
			ls   []lower.Launch
		}{
			{"gemm+k-rope", []lower.Launch{g.split[0], g.nk[0]}},
			{"gemm+q,k-rope", []lower.Launch{g.split[0], g.nq[0], g.nk[0]}},
			{"gemm", []lower.Launch{g.split[0]}},
			{"gemm_wgmma_nr", g.fused},
		} {
			b.Run(c.name+"/"+v.name, func(b *testing.B) {
				run := func(int) error { return k.on(s).all(v.ls, nil) }
				b.ReportMetric(graphTime(b, s, reps, run).Seconds()*1e6/reps, "us")
			})
		}
	}
}

// hopperBench is a benchmark's kernels and stream on a Hopper GPU; it
// skips elsewhere.
func hopperBench(b *testing.B) (*Kernels, *cuda.Stream) {
	b.Helper()
	dev := cudatest.Device(b)
	k := NewKernels(dev)
	if k.CC() < 90 {
		b.Skipf("%s is not a Hopper GPU", dev.Props().Name)
	}
	s, err := dev.NewStream()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	return k, s
}
