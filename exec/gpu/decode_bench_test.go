//go:build decodebaseline

package gpu

import (
	"context"
	_ "embed"
	"fmt"
	"math"
	"testing"

	"lagc/cuda"
	"lagc/lower"
	"lagc/prep"
)

// The decode kernels before the decode tuning (router_topk, rms_norm,
// qk_norm_rope, attn_decode and its combine) and the one-block argmax,
// kept to time against.
//
//go:embed testdata/decode_baseline.cu
var decodeBaselineSrc string

// BenchmarkDecodeKernels times the small kernels of one decode step at
// Laguna-S-2.1 shapes (bf16, a 512-token context), each as the decode
// graph runs it: 50 calls captured in a CUDA graph and replayed, so launch
// gaps are those of graph replay. "old" is the kernel (and geometry) this
// tree replaced, "new" the current one; matmul_split compares q, k, v and
// gate as four GEMVs with one GEMV over the concatenated weight, and
// qk_norm_rope the four launches of the unfused q/k norms and ropes with
// norm_rope's one; attention compares the decode attention's forms (see
// there). Reports microseconds per call.
//
//	./exec__gpu.test -test.run '^$' -test.bench DecodeKernels -test.benchtime 5x
func BenchmarkDecodeKernels(b *testing.B) {
	m := newMMBench(b)
	k, s := m.k, m.s
	old := func(name string, dts ...cuda.DType) *cuda.Kernel {
		kn, err := k.Dev.Compile(context.Background(), cuda.KernelSpec{Name: name, Source: decodeBaselineSrc,
			File: "decode_baseline.cu", DTypes: dts})
		if err != nil {
			b.Fatal(err)
		}
		return kn
	}
	f32 := func(v []float32) cuda.DevicePtr { return m.upload(cuda.AsBytes(v)) }
	const (
		H, nkv, d = 3072, 8, 128
		p         = 543 // position of the decoded token: 512 prefilled, 31 decoded
	)
	pos := m.upload(cuda.AsBytes([]int32{p}))

	// Router: f32 logits of 256 experts, top 10, of one token (decode) and
	// of 8 (batched decode) and a prefill chunk of 2048. "block" and "warp"
	// are router.cu's two kernels; "new" is lower's choice.
	logits := make([]float32, 2048*256)
	for i := range logits {
		logits[i] = float32(math.Sin(float64(i)*1.7)) * 3
	}
	dl, bias := f32(logits), f32(make([]float32, 256))
	rw, rid := m.rand(2048*64), m.rand(2048*64)
	oldRouter := old("router_topk", cuda.F32)
	routerSrc, err := source("router.cu")
	if err != nil {
		b.Fatal(err)
	}
	blockRouter, err := k.Dev.Compile(context.Background(), cuda.KernelSpec{Name: "router_topk_block", Source: routerSrc,
		File: "router.cu", DTypes: []cuda.DType{cuda.F32}})
	if err != nil {
		b.Fatal(err)
	}
	warpRouter, err := k.Dev.Compile(context.Background(), cuda.KernelSpec{Name: "router_topk", Source: routerSrc,
		File: "router.cu", DTypes: []cuda.DType{cuda.F32}, Ints: []int64{8}})
	if err != nil {
		b.Fatal(err)
	}
	for _, T := range []int{1, 8, 2048} {
		name := "router_topk"
		if T > 1 {
			name = fmt.Sprintf("router_topk_T%d", T)
		}
		b.Run(name+"/old", func(b *testing.B) {
			decodeTime(b, s, func() error {
				return s.Launch(oldRouter, cuda.Dim(uint32(T)), cuda.Dim(256), 8*256+4*10+256,
					int32(T), int32(256), int32(10), float32(0), float32(1), dl, int64(256), bias, rw, rid)
			})
		})
		b.Run(name+"/block", func(b *testing.B) {
			decodeTime(b, s, func() error {
				return s.Launch(blockRouter, cuda.Dim(uint32(T)), cuda.Dim(256), 12*256+4*10,
					int32(T), int32(256), int32(10), float32(0), float32(1), dl, int64(256), bias, rw, rid)
			})
		})
		b.Run(name+"/warp", func(b *testing.B) {
			decodeTime(b, s, func() error {
				return s.Launch(warpRouter, cuda.Dim(uint32((T+3)/4)), cuda.Dim(uint32(32*min(T, 4))), 0,
					int32(T), int32(256), int32(10), float32(0), float32(1), dl, int64(256), bias, rw, rid)
			})
		})
		b.Run(name+"/new", func(b *testing.B) {
			decodeTime(b, s, func() error { return k.RouterTopK(s, cuda.F32, rw, rid, dl, bias, T, 256, 10, 0, 1) })
		})
	}

	// The router logits' GEMV (256 x 3072 bf16 -> f32), weights cycled
	// through 64 copies (96 MiB, more than L2) as 48 layers' routers are in
	// a decode step; one token and 8.
	const routerN, copies = 256, 64
	rwts, rx, ry := m.rand(copies*routerN*H), m.rand(8*H), m.rand(2*8*routerN)
	for _, T := range []int{1, 8} {
		b.Run(fmt.Sprintf("router_gemv_T%d", T), func(b *testing.B) {
			i := 0
			decodeTime(b, s, func() error {
				i = (i + 1) % copies
				return k.MatMul(s, MatMulArgs{T: T, K: H, N: routerN, X: rx, W: rwts.Add(int64(i * 2 * routerN * H)), Y: ry,
					XType: cuda.BF16, WType: cuda.BF16, YType: cuda.F32})
			})
		})
	}

	// The router GEMV and its top-k of one token, as two launches and as
	// one (router_fused), weights cycled as above.
	counter, rw1, rid1 := m.upload(make([]byte, 4)), m.rand(32), m.rand(32)
	router := func(i int, fused bool) error {
		g, err := lower.MatMul(lower.MatMulArgs{T: 1, K: H, N: routerN, X: ptr(rx), W: ptr(rwts.Add(int64(i * 2 * routerN * H))), Y: ptr(ry),
			XType: "bf16", WType: "bf16", YType: "f32", SMs: k.SMs()})
		if err != nil {
			return err
		}
		r, err := lower.RouterTopK("f32", ptr(rw1), ptr(rid1), ptr(ry), ptr(bias), 1, routerN, 10, 0, 1)
		if err != nil {
			return err
		}
		if fused {
			return k.on(s).one(lower.RouterFused(g, r, ptr(counter)))
		}
		return k.on(s).all([]lower.Launch{g, r}, nil)
	}
	for _, fused := range []bool{false, true} {
		b.Run(fmt.Sprintf("router_gemv_topk_T1/fused=%v", fused), func(b *testing.B) {
			i := 0
			decodeTime(b, s, func() error {
				i = (i + 1) % copies
				return router(i, fused)
			})
		})
	}

	// argmax of S-2.1's 100352 f32 logits, one row: one block (old), or
	// split over blocks and reduced by a second launch (new).
	const vocab = 100352
	vl := make([]float32, vocab)
	for i := range vl {
		vl[i] = float32(math.Sin(float64(i) * 0.37))
	}
	dv, am := f32(vl), m.rand(2)
	amws := m.rand(int(k.ArgMaxWorkspace(1, vocab)/2) + 1)
	oldArgMax := old("argmax", cuda.F32)
	b.Run("argmax/old", func(b *testing.B) {
		decodeTime(b, s, func() error {
			return s.Launch(oldArgMax, cuda.Dim(1), cuda.Dim(1024), 0, int32(1), int32(vocab), dv, am)
		})
	})
	b.Run("argmax/new", func(b *testing.B) {
		decodeTime(b, s, func() error { return k.ArgMax(s, cuda.F32, am, dv, amws, 1, vocab) })
		b.ReportMetric(float64(lower.ArgMaxParts(1, vocab, k.SMs())), "parts")
	})

	// rms_norm of the hidden state and of 72 query heads.
	nw := make([]float32, H)
	for i := range nw {
		nw[i] = 1
	}
	w := f32(nw)
	x, y := m.rand(72*d), m.rand(72*d)
	oldBlock := old("rms_norm_block", cuda.BF16, cuda.BF16)
	oldWarp := old("rms_norm_warp", cuda.BF16, cuda.BF16)
	b.Run("rms_norm_hidden/old", func(b *testing.B) {
		decodeTime(b, s, func() error {
			return s.Launch(oldBlock, cuda.Dim(1), cuda.Dim(384), 0, int32(1), int32(H), float32(1e-6), x, w, y)
		})
	})
	b.Run("rms_norm_hidden/new", func(b *testing.B) {
		decodeTime(b, s, func() error { return k.RMSNorm(s, cuda.BF16, y, x, w, 1, H, 1e-6) })
	})
	b.Run("rms_norm_heads/old", func(b *testing.B) {
		decodeTime(b, s, func() error {
			return s.Launch(oldWarp, cuda.Dim(9), cuda.Dim(256), 0, int32(72), int32(d), float32(1e-6), x, w, y)
		})
	})
	b.Run("rms_norm_heads/new", func(b *testing.B) {
		decodeTime(b, s, func() error { return k.RMSNorm(s, cuda.BF16, y, x, w, 72, d, 1e-6) })
	})

	// rope of 72 query heads (sliding layer: theta 1e4, all channels).
	tab, err := prep.NewRopeTable(prep.RopeParams{RotaryDim: d, Theta: 1e4, Type: "default"})
	if err != nil {
		b.Fatal(err)
	}
	rope, err := UploadRope(s, m.rand(d), tab)
	if err != nil {
		b.Fatal(err)
	}
	oldRope := old("qk_norm_rope", cuda.BF16)
	b.Run("rope_q/old", func(b *testing.B) {
		decodeTime(b, s, func() error {
			return s.Launch(oldRope, cuda.Dim(18), cuda.Dim(128), 4*d*4, int32(1), int32(72), int32(0), int32(d),
				int64(72*d), int64(72*d), x, y, cuda.DevicePtr(0), cuda.DevicePtr(0), float32(0), pos, rope.InvFreq,
				int32(rope.RotaryDim), rope.AttnFactor)
		})
	})
	b.Run("rope_q/new", func(b *testing.B) {
		decodeTime(b, s, func() error { return k.RoPE(s, cuda.BF16, y, x, pos, 1, 72, d, rope) })
	})

	// q and k norms and ropes of a 72-head layer, in place in one row:
	// four launches (rms_norm and rope of q, then of k), or norm_rope's
	// one launch of both.
	qk, qkd := m.rand(80*d), int64(2*72*d)
	b.Run("qk_norm_rope/unfused", func(b *testing.B) {
		decodeTime(b, s, func() error {
			for _, part := range []struct {
				at    int64
				heads int
			}{{0, 72}, {qkd, nkv}} {
				h := qk.Add(part.at)
				if err := k.RMSNorm(s, cuda.BF16, h, h, w, part.heads, d, 1e-6); err != nil {
					return err
				}
				if err := k.RoPE(s, cuda.BF16, h, h, pos, 1, part.heads, d, rope); err != nil {
					return err
				}
			}
			return nil
		})
	})
	b.Run("qk_norm_rope/fused", func(b *testing.B) {
		decodeTime(b, s, func() error { return k.QKNormRope(s, cuda.BF16, qk, 0, 1, 72, nkv, d, w, w, 1e-6, pos, rope) })
	})

	// matmul_split of a 72-head layer: q 9216, k 1024, v 1024, gate 72 rows.
	sizes := []int{72 * d, nkv * d, nkv * d, 72}
	N := 0
	for _, n := range sizes {
		N += n
	}
	wq, xa, yq := m.rand(N*H), m.rand(H), m.rand(N)
	b.Run("matmul_split/old", func(b *testing.B) {
		decodeTime(b, s, func() error {
			row := 0
			for _, n := range sizes {
				a := MatMulArgs{T: 1, K: H, N: n, X: xa, W: wq.Add(int64(2 * row * H)), Y: yq.Add(int64(2 * row)),
					XType: cuda.BF16, WType: cuda.BF16, YType: cuda.BF16}
				if err := k.MatMul(s, a); err != nil {
					return err
				}
				row += n
			}
			return nil
		})
	})
	b.Run("matmul_split/new", func(b *testing.B) {
		decodeTime(b, s, func() error {
			return k.MatMul(s, MatMulArgs{T: 1, K: H, N: N, X: xa, W: wq, Y: yq, XType: cuda.BF16, WType: cuda.BF16, YType: cuda.BF16})
		})
	})

	// Attention at position 543: a sliding layer (72 heads, 512-slot ring)
	// and a full one (48 heads, 546 slots, as lagc bench --ctx 512 sizes it).
	// "old" is the pre-tuning kernel and its combine; "new" the current one
	// launch (the last block of each kv head merges the splits); "gated"
	// the same with the output gate applied (attention_gate), against
	// "gate_separate", the current kernel then softplus_gate; "splits-N"
	// the gated kernel forced to N splits, to choose DecodeSplits by.
	oldAttn := old("attn_decode", cuda.BF16)
	oldComb := old("attn_decode_combine", cuda.BF16)
	ws := m.rand(4 << 20)
	if err := s.Memset8(ws, 0, 8<<20); err != nil { // the split counters start at zero
		b.Fatal(err)
	}
	for _, c := range []struct {
		name       string
		nh, window int
	}{{"attention_sliding", 72, 512}, {"attention_full", 48, 0}} {
		cache := NewKVLayer(0, 0, nkv, d, c.window, p+3)
		cache.K, cache.V = m.rand(cache.Slots*nkv*d), m.rand(cache.Slots*nkv*d)
		q, kx, vx, out := m.rand(c.nh*d), m.rand(nkv*d), m.rand(nkv*d), m.rand(c.nh*d)
		group := c.nh / nkv
		b.Run(c.name+"/old", func(b *testing.B) {
			ns := max(1, min(ceilDiv(cache.Slots, 64), 2*k.Dev.Props().SMs/nkv)) // the old DecodeSplits
			shmem := 4 * (2*group*d + group*32 + 3*group + 32*(2*d+1))
			acc, ml := ws, ws.Add(4*int64(ns*c.nh*d))
			decodeTime(b, s, func() error {
				if err := k.KVAppend(s, cuda.BF16, cache, kx, vx, 0, pos, 1); err != nil {
					return err
				}
				if err := s.Launch(oldAttn, cuda.Dim(uint32(ns), nkv), cuda.Dim(128), shmem, int32(c.nh), int32(nkv), int32(d),
					int32(c.window), int32(cache.Slots), int32(ns), float32(0.088), pos, q, cache.K, cache.V, out, acc, ml); err != nil {
					return err
				}
				return s.Launch(oldComb, cuda.Dim(uint32(c.nh)), cuda.Dim(128), 0, int32(c.nh), int32(d), int32(ns), acc, ml, out)
			})
			b.ReportMetric(float64(ns), "splits")
		})
		b.Run(c.name+"/new", func(b *testing.B) {
			decodeTime(b, s, func() error {
				return k.AttentionDecodeAppend(s, cuda.BF16, cache, out, q, kx, vx, pos, c.nh, 0.088, ws)
			})
			b.ReportMetric(float64(k.DecodeSplits(cache)), "splits")
		})
		gate := Gate{G: m.rand(c.nh), Width: c.nh}
		b.Run(c.name+"/gate_separate", func(b *testing.B) {
			decodeTime(b, s, func() error {
				if err := k.AttentionDecodeAppend(s, cuda.BF16, cache, out, q, kx, vx, pos, c.nh, 0.088, ws); err != nil {
					return err
				}
				return k.SoftplusGate(s, cuda.BF16, out, out, gate.G, 1, c.nh, d, c.nh, 0)
			})
		})
		b.Run(c.name+"/gated", func(b *testing.B) {
			decodeTime(b, s, func() error {
				return k.AttentionDecodeGate(s, cuda.BF16, cache, out, q, kx, vx, pos, c.nh, 0.088, gate, ws)
			})
		})
		for _, ns := range []int{1, 2, 4, 8, 16, 33} {
			b.Run(fmt.Sprintf("%s/splits-%d", c.name, ns), func(b *testing.B) {
				decodeTime(b, s, func() error {
					return k.attentionDecode(s, cuda.BF16, cache, out, q, kx, vx, pos, c.nh, 0.088, gate, ws, ns, 0, 0)
				})
			})
		}
	}
}

// decodeTime captures 50 calls of f in a CUDA graph and reports the GPU
// microseconds per call over b.N replays.
func decodeTime(b *testing.B, s *cuda.Stream, f func() error) {
	const reps = 50
	b.ReportMetric(graphTime(b, s, reps, func(int) error { return f() }).Seconds()*1e6/reps, "us/call")
}
