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

// ropeTables are the rope flavours Laguna uses: S-2.1's full layers (YaRN
// factor 32 over 8192, theta 5e5, half the channels), its sliding layers
// (default, theta 1e4, all channels), and a small default partial one.
func ropeTables(t *testing.T, d int) map[string]*prep.RopeTable {
	t.Helper()
	out := map[string]*prep.RopeTable{}
	for name, p := range map[string]prep.RopeParams{
		"yarn-half":    {RotaryDim: d / 2, Theta: 5e5, Type: "yarn", Factor: 32, OriginalContext: 8192},
		"default-full": {RotaryDim: d, Theta: 1e4, Type: "default"},
		"default-half": {RotaryDim: d / 2, Theta: 1e4},
	} {
		if p.RotaryDim%2 != 0 {
			continue
		}
		tab, err := prep.NewRopeTable(p)
		if err != nil {
			t.Fatal(err)
		}
		out[name] = tab
	}
	return out
}

// ropeUpload puts tab on the device.
func ropeUpload(t *testing.T, k *Kernels, s *cuda.Stream, tab *prep.RopeTable) Rope {
	t.Helper()
	r, err := UploadRope(s, alloc(t, k, RopeTableBytes(tab)), tab)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// ropePositions draws T positions in [0, 5000), the first 0.
func ropePositions(r *rand.Rand, T int) []int32 {
	pos := make([]int32, T)
	for i := 1; i < T; i++ {
		pos[i] = int32(r.IntN(5000))
	}
	return pos
}

func TestRoPEGPU(t *testing.T) {
	k, s := gpu(t)
	t.Cleanup(func() { _ = s.Close() }) // an unclosed stream's pinned buffer panics at GC
	r := rand.New(rand.NewPCG(9, 10))
	for _, c := range []struct{ T, n, d int }{{7, 3, 128}, {5, 2, 16}, {4, 5, 40}, {1, 72, 128}, {33, 1, 8}} {
		for name, tab := range ropeTables(t, c.d) {
			for _, dt := range DTypes {
				t.Run(fmt.Sprintf("T%d-n%d-d%d-%s/%v", c.T, c.n, c.d, name, dt), func(t *testing.T) {
					x := roundTo(dt, randF32(r, c.T*c.n*c.d, 2))
					pos := ropePositions(r, c.T)
					want := make([]float32, len(x))
					if err := cpu.RoPE(want, x, pos, c.T, c.n, c.d, tab); err != nil {
						t.Fatal(err)
					}
					out := alloc(t, k, int64(len(x)*dt.Size()))
					poison(t, s, out, int64(len(x)*dt.Size()))
					if err := k.RoPE(s, dt, out, upload(t, k, s, dt, x), uploadI32(t, k, s, pos), c.T, c.n, c.d, ropeUpload(t, k, s, tab)); err != nil {
						t.Fatal(err)
					}
					checkClose(t, "rope", download(t, s, dt, out, len(x)), want, tolFor(dt))
				})
			}
		}
	}
}

// TestNormRoPEGPU: norm_rope's kernel (one group of heads, its own
// weight) against cpu.NormRoPE, out of place over a poisoned buffer and in
// place.
func TestNormRoPEGPU(t *testing.T) {
	k, s := gpu(t)
	t.Cleanup(func() { _ = s.Close() }) // an unclosed stream's pinned buffer panics at GC
	r := rand.New(rand.NewPCG(13, 14))
	const eps = 1e-6
	// T 300: bf16, d 128: the fast path, 3 items a 16-thread slot (blocks of
	// 48 across tokens); f32 and d 40: the one-warp path, two heads a warp
	// (72 heads: blocks of 15 across tokens; 5 heads: a token a block); the
	// others one head a warp, or one item a slot.
	for _, c := range []struct{ T, n, d int }{{1, 72, 128}, {1, 8, 128}, {7, 3, 128}, {5, 2, 16}, {4, 5, 40}, {33, 1, 8},
		{300, 72, 128}, {300, 5, 40}} {
		for name, tab := range ropeTables(t, c.d) {
			for _, dt := range DTypes {
				t.Run(fmt.Sprintf("T%d-n%d-d%d-%s/%v", c.T, c.n, c.d, name, dt), func(t *testing.T) {
					x := roundTo(dt, randF32(r, c.T*c.n*c.d, 2))
					w := normWeights(r, c.d)
					pos := ropePositions(r, c.T)
					want := make([]float32, len(x))
					if err := cpu.NormRoPE(want, x, w, pos, c.T, c.n, c.d, eps, tab); err != nil {
						t.Fatal(err)
					}
					bytes := int64(len(x) * dt.Size())
					dx, dw, dpos, rope := upload(t, k, s, dt, x), upload(t, k, s, cuda.F32, w), uploadI32(t, k, s, pos), ropeUpload(t, k, s, tab)
					out := alloc(t, k, bytes)
					poison(t, s, out, bytes)
					if err := k.NormRoPE(s, dt, out, dx, dw, dpos, c.T, c.n, c.d, eps, rope); err != nil {
						t.Fatal(err)
					}
					checkClose(t, "norm_rope", download(t, s, dt, out, len(x)), want, tolFor(dt))
					if err := k.NormRoPE(s, dt, dx, dx, dw, dpos, c.T, c.n, c.d, eps, rope); err != nil {
						t.Fatal(err)
					}
					checkClose(t, "norm_rope in place", download(t, s, dt, dx, len(x)), want, tolFor(dt))
				})
			}
		}
	}
}

// TestQKNormRopeGPU: the fused per-head norm + rope, in place on a fused
// QKV buffer (q heads, k heads, v heads, spare columns: 5 of them make the
// rows unaligned, 0 keeps them aligned for the vector path), against
// cpu.RMSNorm then cpu.RoPE on q and k; v and the spare columns must come
// back bit for bit.
func TestQKNormRopeGPU(t *testing.T) {
	k, s := gpu(t)
	t.Cleanup(func() { _ = s.Close() }) // an unclosed stream's pinned buffer panics at GC
	r := rand.New(rand.NewPCG(11, 12))
	const eps = 1e-6
	for _, c := range []struct {
		T, nq, nk, d int
		noKNorm      bool
		pad          int // spare columns after v: 5 makes rows unaligned (the element-wise path), 0 keeps the vector one
	}{{5, 8, 2, 128, false, 5}, {1, 72, 8, 128, false, 5}, {37, 4, 1, 16, false, 5}, {3, 6, 3, 40, true, 5}, {2, 3, 0, 64, false, 5},
		{1, 72, 8, 128, false, 0}, {3, 6, 3, 40, true, 0}, {300, 48, 8, 128, false, 0}, {300, 48, 8, 128, false, 5}} {
		for name, tab := range ropeTables(t, c.d) {
			for _, dt := range DTypes {
				t.Run(fmt.Sprintf("T%d-q%d-k%d-d%d-pad%d-%s/%v", c.T, c.nq, c.nk, c.d, c.pad, name, dt), func(t *testing.T) {
					qd, kd := c.nq*c.d, c.nk*c.d
					ld := qd + 2*kd + c.pad
					buf := roundTo(dt, randF32(r, c.T*ld, 2))
					pos := ropePositions(r, c.T)
					wq, wk := normWeights(r, c.d), normWeights(r, c.d)
					dwk := upload(t, k, s, cuda.F32, wk)
					if c.noKNorm {
						dwk = 0
					}
					want := append([]float32(nil), buf...)
					for _, part := range []struct {
						off, heads int
						w          []float32
					}{{0, c.nq, wq}, {qd, c.nk, wk}} {
						if part.heads == 0 {
							continue
						}
						n := part.heads * c.d
						x := make([]float32, c.T*n)
						for tk := 0; tk < c.T; tk++ {
							copy(x[tk*n:(tk+1)*n], buf[tk*ld+part.off:])
						}
						if part.off == 0 || !c.noKNorm {
							if err := cpu.RMSNorm(x, x, part.w, c.T*part.heads, c.d, eps); err != nil {
								t.Fatal(err)
							}
						}
						if err := cpu.RoPE(x, x, pos, c.T, part.heads, c.d, tab); err != nil {
							t.Fatal(err)
						}
						for tk := 0; tk < c.T; tk++ {
							copy(want[tk*ld+part.off:], x[tk*n:(tk+1)*n])
						}
					}
					dx := upload(t, k, s, dt, buf)
					if err := k.QKNormRope(s, dt, dx, ld, c.T, c.nq, c.nk, c.d, upload(t, k, s, cuda.F32, wq), dwk, eps, uploadI32(t, k, s, pos), ropeUpload(t, k, s, tab)); err != nil {
						t.Fatal(err)
					}
					got := download(t, s, dt, dx, len(buf))
					var gotQK, wantQK []float32
					for tk := 0; tk < c.T; tk++ {
						gotQK = append(gotQK, got[tk*ld:tk*ld+qd+kd]...)
						wantQK = append(wantQK, want[tk*ld:tk*ld+qd+kd]...)
						for i := tk*ld + qd + kd; i < (tk+1)*ld; i++ {
							if math.Float32bits(got[i]) != math.Float32bits(buf[i]) {
								t.Fatalf("token %d column %d (v or spare) changed: %v -> %v", tk, i-tk*ld, buf[i], got[i])
							}
						}
					}
					checkClose(t, "qk_norm_rope", gotQK, wantQK, tolFor(dt))
				})
			}
		}
	}
}

// TestNormRoPEItemsGPU: qk_norm_rope's fast path with several (token,
// head) items a 16-thread slot (lower picks 16 to 128 items a block by the
// SMs it is given: 1 packs 8 a slot into few blocks), q and k heads with
// their own weights then v heads in each row, against cpu.RMSNorm then
// cpu.RoPE, out of place over a poisoned buffer and in place (bit for
// bit); v comes back untouched. The one-warp path (the same rows 4
// elements further apart: not 16-byte aligned) gives the fast path's bits:
// the decode attention's fused rotation is that path's code, and a batched
// step (the fast path) must give a row the decode schedule's bits (until
// rope.cu pinned its roundings, nvcc's contractions made an ulp of
// difference).
func TestNormRoPEItemsGPU(t *testing.T) {
	k, s := gpu(t)
	t.Cleanup(func() { _ = s.Close() }) // an unclosed stream's pinned buffer panics at GC
	r := rand.New(rand.NewPCG(15, 16))
	const d, eps = 128, 1e-6
	for _, c := range []struct {
		T, nq, nk, sms int
		per            int  // items a block lower must pick
		far            bool // positions past sincosf's fast range (1e5 radians)
	}{
		{301, 72, 0, 1, 128, false},    // 8 a slot, blocks across tokens, the last of 40 items
		{37, 5, 3, 1, 80, false},       // q and k heads in one warp, 10 tokens a block, the last 7
		{19, 6, 3, 1, 48, false},       // 3 a slot
		{23, 13, 0, 1, 80, true},       // 5 a slot
		{1, 72, 8, 0, 16, false},       // decode's q and k
		{1, 7, 2, 0, 16, false},        // one block of 9 heads
		{2048, 72, 0, 132, 128, false}, // S-2.1's q heads on an H200
		{2048, 8, 0, 132, 32, false},   // its k heads
	} {
		for name, tab := range ropeTables(t, d) {
			for _, dt := range []cuda.DType{cuda.BF16, cuda.F16} {
				t.Run(fmt.Sprintf("T%d-q%d-k%d-sms%d-%s/%v", c.T, c.nq, c.nk, c.sms, name, dt), func(t *testing.T) {
					nv := c.nk
					qk, ld := (c.nq+c.nk)*d, (c.nq+c.nk+nv)*d
					buf := roundTo(dt, randF32(r, c.T*ld, 2))
					pos := ropePositions(r, c.T)
					if c.far {
						for i := range pos {
							pos[i] = int32(r.IntN(300000))
						}
					}
					wq, wk := normWeights(r, d), normWeights(r, d)
					want := append([]float32(nil), buf...)
					for _, part := range []struct {
						off, heads int
						w          []float32
					}{{0, c.nq, wq}, {c.nq * d, c.nk, wk}} {
						if part.heads == 0 {
							continue
						}
						n := part.heads * d
						x := make([]float32, c.T*n)
						for tk := 0; tk < c.T; tk++ {
							copy(x[tk*n:(tk+1)*n], buf[tk*ld+part.off:])
						}
						if err := cpu.RMSNorm(x, x, part.w, c.T*part.heads, d, eps); err != nil {
							t.Fatal(err)
						}
						if err := cpu.RoPE(x, x, pos, c.T, part.heads, d, tab); err != nil {
							t.Fatal(err)
						}
						for tk := 0; tk < c.T; tk++ {
							copy(want[tk*ld+part.off:], x[tk*n:(tk+1)*n])
						}
					}
					dwq, dwk, dpos, rope := upload(t, k, s, cuda.F32, wq), upload(t, k, s, cuda.F32, wk), uploadI32(t, k, s, pos), ropeUpload(t, k, s, tab)
					// run launches qk_norm_rope over rows ldr apart, fast or not.
					run := func(x, out cuda.DevicePtr, ldr int, fast bool) {
						t.Helper()
						l, err := lower.NormRoPE(lower.NormRoPEArgs{DType: dt.String(), Out: ptr(out), X: ptr(x), LD: ldr, T: c.T, NQ: c.nq, NK: c.nk,
							D: d, WQ: ptr(dwq), WK: ptr(dwk), Eps: eps, Pos: ptr(dpos), Table: rope.table(), SMs: c.sms})
						if err != nil {
							t.Fatal(err)
						}
						if per := l.Args[len(l.Args)-1].Int; (l.Ints[0] == 1) != fast || (fast && per != int64(c.per)) {
							t.Fatalf("lower launched FAST %d with %d items a block, want fast %v with %d", l.Ints[0], per, fast, c.per)
						}
						if err := k.on(s).one(l, nil); err != nil {
							t.Fatal(err)
						}
					}
					// rows: the q and k columns of rows ldr apart, and the v ones.
					rows := func(v []float32, ldr int) (qkv, rest []float32) {
						for tk := 0; tk < c.T; tk++ {
							qkv = append(qkv, v[tk*ldr:tk*ldr+qk]...)
							rest = append(rest, v[tk*ldr+qk:tk*ldr+ld]...)
						}
						return qkv, rest
					}
					same := func(what string, got, want []float32) {
						t.Helper()
						for i := range want {
							if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
								t.Fatalf("%s: element %d is %v, want %v bit for bit", what, i, got[i], want[i])
							}
						}
					}
					bytes := int64(c.T * ld * dt.Size())
					dx, out := upload(t, k, s, dt, buf), alloc(t, k, bytes)
					poison(t, s, out, bytes)
					run(dx, out, ld, true)
					fast, _ := rows(download(t, s, dt, out, c.T*ld), ld)
					wantQK, wantV := rows(want, ld)
					checkClose(t, "fast path", fast, wantQK, tolFor(dt))
					run(dx, dx, ld, true)
					inPlace, v := rows(download(t, s, dt, dx, c.T*ld), ld)
					same("in place", inPlace, fast)
					same("v in place", v, wantV)
					// The one-warp path on the same rows 4 elements further apart.
					ld2 := ld + 4
					buf2 := make([]float32, c.T*ld2)
					for tk := 0; tk < c.T; tk++ {
						copy(buf2[tk*ld2:], buf[tk*ld:(tk+1)*ld])
					}
					dx2 := upload(t, k, s, dt, buf2)
					run(dx2, dx2, ld2, false)
					warp, _ := rows(download(t, s, dt, dx2, c.T*ld2), ld2)
					checkClose(t, "the one-warp path", warp, wantQK, tolFor(dt))
					same("the one-warp path against the fast path", warp, fast)
				})
			}
		}
	}
}

func TestRopeArgs(t *testing.T) {
	k := &Kernels{}
	p := cuda.DevicePtr(256)
	r := Rope{InvFreq: p, RotaryDim: 8, AttnFactor: 1}
	for name, err := range map[string]error{
		"rot odd":       k.RoPE(nil, cuda.F32, p, p, p, 1, 1, 16, Rope{InvFreq: p, RotaryDim: 7}),
		"rot > d":       k.RoPE(nil, cuda.F32, p, p, p, 1, 1, 4, r),
		"null table":    k.RoPE(nil, cuda.F32, p, p, p, 1, 1, 16, Rope{RotaryDim: 8}),
		"null pos":      k.RoPE(nil, cuda.F32, p, p, 0, 1, 1, 16, r),
		"short stride":  k.QKNormRope(nil, cuda.F32, p, 10, 1, 2, 1, 16, p, p, 1e-6, p, r),
		"no heads":      k.QKNormRope(nil, cuda.F32, p, 0, 1, 0, 0, 16, p, p, 1e-6, p, r),
		"negative eps":  k.QKNormRope(nil, cuda.F32, p, 0, 1, 1, 1, 16, p, p, -1, p, r),
		"upload no tab": func() error { _, err := UploadRope(nil, p, nil); return err }(),
	} {
		if err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// BenchmarkQKNormRope: the q heads' norm + rope of a 2048-token S-2.1
// prefill chunk, in place (a full layer's 48 heads, half rotated; a
// sliding layer's 72, all rotated); GB/s of the bytes read and written,
// beside a device copy of as many bytes.
func BenchmarkQKNormRope(b *testing.B) {
	m := newMMBench(b)
	const T, d = 2048, 128
	pos := make([]int32, T)
	for i := range pos {
		pos[i] = int32(i)
	}
	dpos, err := m.k.Dev.Alloc(4 * T)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = m.k.Dev.Free(dpos) })
	if err := cuda.Upload(m.s, dpos, pos); err != nil {
		b.Fatal(err)
	}
	w := m.rand(2 * d) // d floats: bf16 pairs read as f32, finite
	for _, c := range []struct {
		name string
		nq   int
		p    prep.RopeParams
	}{
		{"full-48", 48, prep.RopeParams{RotaryDim: d / 2, Theta: 5e5, Type: "yarn", Factor: 32, OriginalContext: 8192}},
		{"sliding-72", 72, prep.RopeParams{RotaryDim: d, Theta: 1e4, Type: "default"}},
	} {
		tab, err := prep.NewRopeTable(c.p)
		if err != nil {
			b.Fatal(err)
		}
		rp, err := m.k.Dev.Alloc(RopeTableBytes(tab))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = m.k.Dev.Free(rp) })
		r, err := UploadRope(m.s, rp, tab)
		if err != nil {
			b.Fatal(err)
		}
		n := T * c.nq * d
		x := m.rand(n)
		bytes := float64(4 * n)
		b.Run(c.name, func(b *testing.B) {
			m.run(b, bytes, 0, func() error {
				return m.k.QKNormRope(m.s, cuda.BF16, x, 0, T, c.nq, 0, d, w, 0, 1e-6, dpos, r)
			})
		})
		y := m.rand(n)
		b.Run(c.name+"/copy", func(b *testing.B) {
			m.run(b, bytes, 0, func() error { return m.s.CopyDtoD(y, x, int64(2*n)) })
		})
	}
}
