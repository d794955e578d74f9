package gpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"lagc/cuda"
	"lagc/exec/cpu"
	"lagc/lower"
	"lagc/prep"
)

// TestPrefillNormRoPEAttentionGPU: attn_prefill_wg normalising and rotating
// its Q tiles (lower.PrefillNormRoPEAttention of a qk_norm_rope launch of
// the q heads and the attention reading them) against cpu.NormRoPE then
// cpu.Attention, at every attn_prefill_wg variant, over S-2.1's sliding
// (rot 128) and full (rot 64, YaRN's factor) layers, history in the cache,
// the output over the unrotated q rows (as plans place it) or apart, and no
// norm weight; and the unfused pair against the same reference.
func TestPrefillNormRoPEAttentionGPU(t *testing.T) {
	k, s := hopperGPU(t)
	for ci, c := range []struct {
		tc      tcCase
		rot     int
		attnf   float32
		norm    bool
		inPlace bool
	}{
		{tcCase{T: 300, p0: 700, window: 512, nh: 72, nkv: 8, d: 128}, 128, 1, true, true},
		{tcCase{T: 200, p0: 0, window: 0, nh: 48, nkv: 8, d: 128}, 64, 1.3465736, true, true},
		{tcCase{T: 77, p0: 5, window: 0, nh: 48, nkv: 8, d: 128}, 32, 1, false, false},
		{tcCase{T: 130, p0: 40, window: 64, nh: 16, nkv: 2, d: 128}, 96, 1, true, false},
	} {
		for _, v := range wgVariants {
			name := fmt.Sprintf("%s/%v-rot%d-norm%v-inplace%v", v.name(), c.tc, c.rot, c.norm, c.inPlace)
			t.Run(name, func(t *testing.T) {
				g := newTCRig(t, k, s, c.tc, uint64(5000+ci))
				T, nh, d := c.tc.T, c.tc.nh, c.tc.d
				r := rand.New(rand.NewPCG(uint64(ci), 17))
				raw := g.q // bf16 values: the q heads before the norm and rotation
				inv := make([]float32, c.rot/2)
				for i := range inv {
					inv[i] = float32(1 / (1 + float64(i)*float64(i)))
				}
				var w []float32
				var wp lower.Ptr
				if c.norm {
					w = randF32(r, d, 1)
					wp = ptr(upload(t, k, s, cuda.F32, w))
				}
				// The reference: the rotated heads as the unfused kernel stores them (bf16).
				rq := make([]float32, len(raw))
				tab := &prep.RopeTable{RotaryDim: c.rot, InvFreq: inv, AttnFactor: c.attnf}
				if c.norm {
					if err := cpu.NormRoPE(rq, raw, w, g.pos, T, nh, d, 1e-6, tab); err != nil {
						t.Fatal(err)
					}
				} else if err := cpu.RoPE(rq, raw, g.pos, T, nh, d, tab); err != nil {
					t.Fatal(err)
				}
				g.q = roundTo(cuda.BF16, rq)
				want := g.want(t)

				table := lower.RoPETable{InvFreq: ptr(upload(t, k, s, cuda.F32, inv)), RotaryDim: c.rot, AttnFactor: c.attnf}
				qraw := upload(t, k, s, cuda.BF16, raw)
				rot := alloc(t, k, int64(2*len(raw)))
				poison(t, s, rot, int64(2*len(raw)))
				n, err := lower.NormRoPE(lower.NormRoPEArgs{DType: "bf16", Out: ptr(rot), X: ptr(qraw), LD: nh * d, T: T, NQ: nh, D: d,
					WQ: wp, Eps: 1e-6, Pos: ptr(g.dpos), Table: table, SMs: k.SMs()})
				if err != nil {
					t.Fatal(err)
				}
				attn := func(q, out cuda.DevicePtr) lower.Launch {
					return wgAttention(t, v.with(lower.AttentionPrefillArgs{Cache: g.layer.cache(), Out: ptr(out), Q: ptr(q), K: ptr(g.kp),
						V: ptr(g.vp), LDQ: nh * d, LDKV: g.ldkv, Pos: ptr(g.dpos), T: T, NH: nh, Scale: g.scale, CC: k.CC()}))
				}
				// Unfused: the rope into its buffer, the attention reading it.
				if err := k.on(s).all([]lower.Launch{n, attn(rot, g.out)}, nil); err != nil {
					t.Fatal(err)
				}
				checkClose(t, "qk_norm_rope then attn_prefill_wg", download(t, s, cuda.BF16, g.out, g.outElems), want, tolFor(cuda.BF16))
				// Fused: the attention reads the raw heads (the rope's
				// launch as built above, which names the rotated buffer,
				// then dropped).
				out := g.out
				if c.inPlace {
					out = qraw
				}
				poison(t, s, g.out, int64(g.outBytes))
				f, err := lower.PrefillNormRoPEAttention(n, attn(rot, out))
				if err != nil {
					t.Fatal(err)
				}
				if f.Ints[3] != 1 || f.Args[7].Ptr() != ptr(qraw) {
					t.Fatalf("PrefillNormRoPEAttention gave %s reading q at %v, not NR 1 at %v", f.NameExpr(), f.Args[7].Ptr(), ptr(qraw))
				}
				if err := k.on(s).all([]lower.Launch{f}, nil); err != nil {
					t.Fatal(err)
				}
				checkClose(t, "attn_prefill_wg (NR 1)", download(t, s, cuda.BF16, out, g.outElems), want, tolFor(cuda.BF16))
			})
		}
	}
}

// BenchmarkPrefillNormRoPEAttention times, graph-replayed, an S-2.1 prefill
// layer's q heads' qk_norm_rope then attn_prefill_wg against the attention
// doing the norm and rotation itself (lower.PrefillNormRoPEAttention, the
// output over the raw q as plans place it), T=2048 from position 0:
//
//	exec__gpu.test -test.run '^$' -test.bench PrefillNormRoPEAttention -test.count 3
func BenchmarkPrefillNormRoPEAttention(b *testing.B) {
	k, s := hopperBench(b)
	const T, d, reps = 2048, 128, 20
	r := rand.New(rand.NewPCG(7, 8))
	for _, c := range []struct {
		name                 string
		nh, nkv, window, rot int
		attnf                float32
	}{{"sliding", 72, 8, 512, 128, 1}, {"full", 48, 8, 0, 64, 1.3465736}} {
		layer := NewKVLayer(0, 0, c.nkv, d, c.window, T)
		layer.K, layer.V = alloc(b, k, int64(2*layer.Slots*c.nkv*d)), alloc(b, k, int64(2*layer.Slots*c.nkv*d))
		q := upload(b, k, s, cuda.BF16, randF32(r, T*c.nh*d, 1))
		kk, vv := upload(b, k, s, cuda.BF16, randF32(r, T*c.nkv*d, 1)), upload(b, k, s, cuda.BF16, randF32(r, T*c.nkv*d, 1))
		rot, out := alloc(b, k, int64(2*T*c.nh*d)), alloc(b, k, int64(2*T*c.nh*d))
		pos := make([]int32, T)
		for i := range pos {
			pos[i] = int32(i)
		}
		dpos := uploadI32(b, k, s, pos)
		inv := make([]float32, c.rot/2)
		for i := range inv {
			inv[i] = float32(math.Pow(10000, -2*float64(i)/float64(c.rot)))
		}
		w := ptr(upload(b, k, s, cuda.F32, randF32(r, d, 1)))
		table := lower.RoPETable{InvFreq: ptr(upload(b, k, s, cuda.F32, inv)), RotaryDim: c.rot, AttnFactor: c.attnf}
		n, err := lower.NormRoPE(lower.NormRoPEArgs{DType: "bf16", Out: ptr(rot), X: ptr(q), LD: c.nh * d, T: T, NQ: c.nh, D: d,
			WQ: w, Eps: 1e-6, Pos: ptr(dpos), Table: table, SMs: k.SMs()})
		if err != nil {
			b.Fatal(err)
		}
		attn := func(q, out cuda.DevicePtr) lower.Launch {
			return wgAttention(b, lower.AttentionPrefillArgs{Cache: layer.cache(), Out: ptr(out), Q: ptr(q), K: ptr(kk), V: ptr(vv),
				Pos: ptr(dpos), T: T, NH: c.nh, Scale: 0.088388346, CC: k.CC()})
		}
		f, err := lower.PrefillNormRoPEAttention(n, attn(rot, q))
		if err != nil {
			b.Fatal(err)
		}
		cases := []struct {
			name string
			ls   []lower.Launch
		}{{"rope+attention", []lower.Launch{n, attn(rot, out)}}, {"rope", []lower.Launch{n}}, {"attention", []lower.Launch{attn(rot, out)}},
			{"fused", []lower.Launch{f}}}
		for _, v := range cases {
			b.Run(c.name+"/"+v.name, func(b *testing.B) {
				run := func(int) error { return k.on(s).all(v.ls, nil) }
				b.ReportMetric(graphTime(b, s, reps, run).Seconds()*1e6/reps, "us")
			})
		}
	}
}

// wgAttention is lower.AttentionPrefill of a in bf16 on the wgmma kernel,
// which it must choose.
func wgAttention(tb testing.TB, a lower.AttentionPrefillArgs) lower.Launch {
	tb.Helper()
	a.DType, a.Wgmma = "bf16", true
	l, err := lower.AttentionPrefill(a)
	if err != nil || l.Kernel != "attn_prefill_wg" {
		tb.Fatalf("AttentionPrefill chose %s (%v), not attn_prefill_wg", l.NameExpr(), err)
	}
	return l
}
