package gpu

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"lagc/cuda"
	"lagc/lower"
)

// TestNormRoPEAttentionGPU: the decode attention doing the q/k norm and
// rotation itself (lower.NormRoPEAttention, attn_decode NR = 1) gives the
// bits of qk_norm_rope then attn_decode, in its output and in the caches
// (the appended k is the rotated one), over full and sliding layers, with
// and without splits, norms and partial rotation, both dtypes.
func TestNormRoPEAttentionGPU(t *testing.T) {
	k, s := gpu(t)
	t.Cleanup(func() { _ = s.Close() })
	r := rand.New(rand.NewPCG(61, 62))
	for _, c := range []struct {
		nh, nkv, d, window, slots, pos, rot, splits int
		norm                                        bool
		attnf                                       float32
	}{
		{72, 8, 128, 512, 512, 700, 128, 0, true, 1},       // S-2.1 sliding, the ring wrapped
		{48, 8, 128, 0, 4096, 530, 64, 0, true, 1.3465736}, // S-2.1 full: partial rotation, YaRN's factor
		{48, 8, 128, 0, 4096, 0, 64, 4, true, 1},           // the first token
		{8, 2, 40, 0, 256, 100, 40, 3, false, 1},           // no norm, d not a multiple of 32
		{4, 1, 6, 9, 9, 30, 4, 0, true, 1},                 // d = 6: one channel a lane
		{40, 2, 64, 16, 16, 40, 32, 2, true, 1},            // 20 heads a kv head: two head blocks
	} {
		for _, dt := range DTypes {
			t.Run(fmt.Sprintf("nh%d-nkv%d-d%d-w%d-p%d-rot%d-s%d-norm%v/%v", c.nh, c.nkv, c.d, c.window, c.pos, c.rot, c.splits, c.norm, dt), func(t *testing.T) {
				row := (c.nh + 2*c.nkv) * c.d // q, k, v of one token
				qkv0 := randF32(r, row, 1)
				cacheN := int64(c.slots * c.nkv * c.d * dt.Size())
				kc0, vc0 := randF32(r, c.slots*c.nkv*c.d, 1), randF32(r, c.slots*c.nkv*c.d, 1)
				var wq, wk lower.Ptr
				if c.norm {
					wq, wk = ptr(upload(t, k, s, cuda.F32, randF32(r, c.d, 1))), ptr(upload(t, k, s, cuda.F32, randF32(r, c.d, 1)))
				}
				inv := make([]float32, c.rot/2)
				for i := range inv {
					inv[i] = float32(1 / (1 + float64(i)*float64(i)))
				}
				table := lower.RoPETable{InvFreq: ptr(upload(t, k, s, cuda.F32, inv)), RotaryDim: c.rot, AttnFactor: c.attnf}
				pos := uploadI32(t, k, s, []int32{int32(c.pos)})
				ws := alloc(t, k, max(lower.DecodeWorkspace(128, c.nh, c.d), 16))
				cnt := alloc(t, k, max(lower.DecodeCounters(1, c.nh, c.nkv), 4))
				if err := s.Memset8(cnt, 0, max(lower.DecodeCounters(1, c.nh, c.nkv), 4)); err != nil {
					t.Fatal(err)
				}
				type run struct{ qkv, kc, vc, out cuda.DevicePtr }
				// launches: the rope then the attention over r's buffers.
				launches := func(b run) (lower.Launch, lower.Launch) {
					x := ptr(b.qkv)
					n, err := lower.NormRoPE(lower.NormRoPEArgs{DType: dt.String(), Out: x, X: x, LD: row, T: 1, NQ: c.nh, NK: c.nkv, D: c.d,
						WQ: wq, WK: wk, Eps: 1e-6, Pos: ptr(pos), Table: table})
					if err != nil {
						t.Fatal(err)
					}
					esz := int64(dt.Size())
					as, err := lower.AttentionDecode(lower.AttentionDecodeArgs{DType: dt.String(),
						Cache: lower.Cache{K: ptr(b.kc), V: ptr(b.vc), NKV: c.nkv, HeadDim: c.d, Window: c.window, Slots: c.slots},
						Out:   ptr(b.out), Q: x, K: x.At(int64(c.nh*c.d) * esz), V: x.At(int64((c.nh+c.nkv)*c.d) * esz), Pos: ptr(pos),
						NH: c.nh, Scale: 0.125, Workspace: ptr(ws), Counters: ptr(cnt), Splits: c.splits, SMs: k.SMs()})
					if err != nil {
						t.Fatal(err)
					}
					return n, as[0]
				}
				fresh := func() run {
					return run{upload(t, k, s, dt, qkv0), upload(t, k, s, dt, kc0), upload(t, k, s, dt, vc0), alloc(t, k, int64(c.nh*c.d*dt.Size()))}
				}
				want, got := fresh(), fresh()
				n, a := launches(want)
				if err := k.on(s).all([]lower.Launch{n, a}, nil); err != nil {
					t.Fatal(err)
				}
				n2, a2 := launches(got)
				f, err := lower.NormRoPEAttention(n2, a2)
				if err != nil {
					t.Fatal(err)
				}
				if err := k.on(s).all([]lower.Launch{f}, nil); err != nil {
					t.Fatal(err)
				}
				for _, b := range []struct {
					what      string
					got, want cuda.DevicePtr
					n         int
				}{{"output", got.out, want.out, c.nh * c.d}, {"k cache", got.kc, want.kc, int(cacheN) / dt.Size()},
					{"v cache", got.vc, want.vc, int(cacheN) / dt.Size()}} {
					g, w := download(t, s, dt, b.got, b.n), download(t, s, dt, b.want, b.n)
					for i := range w {
						if g[i] != w[i] && !(g[i] != g[i] && w[i] != w[i]) {
							t.Fatalf("%s %d: %g, the two launches' %g", b.what, i, g[i], w[i])
						}
					}
				}
			})
		}
	}
}

// TestRowsKNormRoPEAttentionGPU: a batched decode step's attention doing
// its rows' k norms and rotations (lower.NormKRoPEAttentionRows: q, k, v
// in arrays of their own, each row at its own position and sequence slot,
// q rotated by its own launch) gives the bits of the k heads' qk_norm_rope
// launch then attn_decode, in its output and in every slot's caches, over
// full and sliding layers, splits or none, a padding row, both dtypes.
func TestRowsKNormRoPEAttentionGPU(t *testing.T) {
	k, s := gpu(t)
	t.Cleanup(func() { _ = s.Close() })
	r := rand.New(rand.NewPCG(63, 64))
	for _, c := range []struct {
		nh, nkv, d, window, slots, rot, splits int
		seq, pos                               []int32
		attnf                                  float32
	}{
		{72, 8, 128, 512, 512, 128, 0, []int32{2, 0, 1}, []int32{700, 5, 511}, 1},               // S-2.1 sliding, one ring wrapped
		{48, 8, 128, 0, 1024, 64, 0, []int32{1, 3, 0, 2}, []int32{530, 0, 1000, 64}, 1.3465736}, // S-2.1 full, YaRN
		{48, 8, 128, 0, 1024, 64, 4, []int32{0, -1, 1}, []int32{300, 0, 20}, 1},                 // a padding row, 4 splits
		{40, 2, 64, 16, 16, 32, 2, []int32{1, 0}, []int32{40, 3}, 1},                            // two head blocks a kv head
	} {
		for _, dt := range DTypes {
			{
				rows := len(c.seq)
				t.Run(fmt.Sprintf("nh%d-w%d-rows%d-s%d/%v", c.nh, c.window, rows, c.splits, dt), func(t *testing.T) {
					nslot := 4
					perSlot := c.slots * c.nkv * c.d
					q0, k0, v0 := randF32(r, rows*c.nh*c.d, 1), randF32(r, rows*c.nkv*c.d, 1), randF32(r, rows*c.nkv*c.d, 1)
					kc0, vc0 := randF32(r, nslot*perSlot, 1), randF32(r, nslot*perSlot, 1)
					wq, wk := ptr(upload(t, k, s, cuda.F32, randF32(r, c.d, 1))), ptr(upload(t, k, s, cuda.F32, randF32(r, c.d, 1)))
					inv := make([]float32, c.rot/2)
					for i := range inv {
						inv[i] = float32(1 / (1 + float64(i)*float64(i)))
					}
					table := lower.RoPETable{InvFreq: ptr(upload(t, k, s, cuda.F32, inv)), RotaryDim: c.rot, AttnFactor: c.attnf}
					pos, seq := uploadI32(t, k, s, c.pos), uploadI32(t, k, s, c.seq)
					ws := alloc(t, k, max(lower.DecodeWorkspace(128, c.nh, c.d)*int64(rows), 16))
					cn := max(lower.DecodeCounters(rows, c.nh, c.nkv), 4)
					cnt := alloc(t, k, cn)
					if err := s.Memset8(cnt, 0, cn); err != nil {
						t.Fatal(err)
					}
					type run struct{ q, k, v, qr, kr, kc, vc, out cuda.DevicePtr }
					fresh := func() run {
						b := run{q: upload(t, k, s, dt, q0), k: upload(t, k, s, dt, k0), v: upload(t, k, s, dt, v0),
							qr: alloc(t, k, int64(rows*c.nh*c.d*dt.Size())), kr: alloc(t, k, int64(rows*c.nkv*c.d*dt.Size())),
							kc: upload(t, k, s, dt, kc0), vc: upload(t, k, s, dt, vc0)}
						b.out = alloc(t, k, int64(rows*c.nh*c.d*dt.Size()))
						return b
					}
					// launches: q's rotation, k's, then the attention over b's buffers.
					launches := func(b run) []lower.Launch {
						var ls []lower.Launch
						for _, h := range []struct {
							x, out cuda.DevicePtr
							n      int
							w      lower.Ptr
						}{{b.q, b.qr, c.nh, wq}, {b.k, b.kr, c.nkv, wk}} {
							n, err := lower.NormRoPE(lower.NormRoPEArgs{DType: dt.String(), Out: ptr(h.out), X: ptr(h.x), LD: h.n * c.d, T: rows, NQ: h.n, D: c.d,
								WQ: h.w, Eps: 1e-6, Pos: ptr(pos), Table: table})
							if err != nil {
								t.Fatal(err)
							}
							ls = append(ls, n)
						}
						as, err := lower.AttentionDecode(lower.AttentionDecodeArgs{DType: dt.String(),
							Cache: lower.Cache{K: ptr(b.kc), V: ptr(b.vc), NKV: c.nkv, HeadDim: c.d, Window: c.window, Slots: c.slots},
							Out:   ptr(b.out), Q: ptr(b.qr), K: ptr(b.kr), V: ptr(b.v), Pos: ptr(pos), NH: c.nh, Scale: 0.125,
							Workspace: ptr(ws), Counters: ptr(cnt), Splits: c.splits, SMs: k.SMs(), Rows: rows, Seq: ptr(seq), SeqStride: int64(perSlot)})
						if err != nil {
							t.Fatal(err)
						}
						return append(ls, as...)
					}
					want, got := fresh(), fresh()
					if err := k.on(s).all(launches(want), nil); err != nil {
						t.Fatal(err)
					}
					ls := launches(got)
					if len(ls) != 3 {
						t.Fatalf("%d launches", len(ls))
					}
					f, err := lower.NormKRoPEAttentionRows(ls[1], ls[2])
					if err != nil {
						t.Fatal(err)
					}
					if err := k.on(s).all([]lower.Launch{ls[0], f}, nil); err != nil {
						t.Fatal(err)
					}
					for _, b := range []struct {
						what      string
						got, want cuda.DevicePtr
						n         int
					}{{"output", got.out, want.out, rows * c.nh * c.d}, {"k caches", got.kc, want.kc, nslot * perSlot},
						{"v caches", got.vc, want.vc, nslot * perSlot}} {
						g, w := download(t, s, dt, b.got, b.n), download(t, s, dt, b.want, b.n)
						for i := range w {
							if g[i] != w[i] && !(g[i] != g[i] && w[i] != w[i]) {
								t.Fatalf("%s %d: %g, the three launches' %g", b.what, i, g[i], w[i])
							}
						}
					}
				})
			}
		}
	}
}
