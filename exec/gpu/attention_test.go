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
)

// attnRig runs one attention layer on both sides: exec/cpu.Attention over a
// cpu.KVCache (the reference) and the device kernels over a KVLayer, fed
// the same (dtype-rounded) q, k, v at the same positions.
type attnRig struct {
	t                        *testing.T
	k                        *Kernels
	s                        *cuda.Stream
	dt                       cuda.DType
	nh, nkv, d, window, maxT int
	scale                    float32
	ref                      *cpu.KVCache
	c                        KVLayer
	qkv, out, pos, ws        cuda.DevicePtr
	next                     int // next position
	r                        *rand.Rand
	// G > 0 gates every step's output (attention_gate): G gates a token,
	// nh (per head) or nh*d (per element), rows G+3 elements apart at gate.
	G    int
	gate cuda.DevicePtr
	g    []float32 // the last inputs' gates [T, G]
	// stages: the decode attention's tiles in flight (lower.DecodeStages'
	// force; 0: its choice); mma: its key loop on tensor cores
	// (lower.DecodeMMA's force; 0: its choice).
	stages, mma int
}

// attnRigMaxSplits bounds the decode split counts the rig's workspace fits.
const attnRigMaxSplits = 128

func newAttnRig(t *testing.T, k *Kernels, s *cuda.Stream, dt cuda.DType, nh, nkv, d, window, maxPos, maxT int, seed uint64) *attnRig {
	t.Helper()
	ref, err := cpu.NewKVCache(nkv, d, window, maxPos)
	if err != nil {
		t.Fatal(err)
	}
	a := &attnRig{t: t, k: k, s: s, dt: dt, nh: nh, nkv: nkv, d: d, window: window, maxT: maxT,
		scale: float32(1 / math.Sqrt(float64(d))), ref: ref, r: rand.New(rand.NewPCG(seed, 7))}
	a.c = NewKVLayer(0, 0, nkv, d, window, maxPos)
	a.c.K = alloc(t, k, a.c.Bytes(dt))
	a.c.V = alloc(t, k, a.c.Bytes(dt))
	// NaN in every slot not yet written: reading one shows in the output.
	poison(t, s, a.c.K, a.c.Bytes(dt))
	poison(t, s, a.c.V, a.c.Bytes(dt))
	a.qkv = alloc(t, k, int64(maxT*a.ld()*dt.Size()))
	a.out = alloc(t, k, int64(maxT*nh*d*dt.Size()))
	a.pos = alloc(t, k, int64(4*maxT))
	wsBytes := decodeWorkspaceBytes(attnRigMaxSplits, a.c, nh)
	a.ws = alloc(t, k, wsBytes)
	if err := s.Memset8(a.ws, 0, max(wsBytes, 4)); err != nil { // the counters start at zero
		t.Fatal(err)
	}
	return a
}

// withGate makes every later step apply an output gate of G gates a token.
func (a *attnRig) withGate(G int) *attnRig {
	a.G = G
	a.gate = alloc(a.t, a.k, int64(a.maxT*a.ldg()*a.dt.Size()))
	return a
}

// ldg is the gate rows' stride: 3 spare values, as a fused row has others.
func (a *attnRig) ldg() int { return a.G + 3 }

// gateGPU is the rig's gate for the launchers (none when G is 0).
func (a *attnRig) gateGPU() Gate {
	if a.G == 0 {
		return Gate{}
	}
	return Gate{G: a.gate, Width: a.G, LD: a.ldg()}
}

// ld is the fused QKV row: q heads, k heads, v heads, and 3 spare values
// so that strides differ from the plain row lengths.
func (a *attnRig) ld() int { return (a.nh+2*a.nkv)*a.d + 3 }

// inputs draws q, k, v for T tokens, rounded to the rig's dtype, uploads
// them into the fused buffer and the positions, and returns them.
func (a *attnRig) inputs(T int) (q, kk, vv []float32, pos []int32) {
	t := a.t
	t.Helper()
	if T > a.maxT {
		t.Fatalf("attnRig: %d tokens > %d", T, a.maxT)
	}
	q = roundTo(a.dt, randF32(a.r, T*a.nh*a.d, 1))
	kk = roundTo(a.dt, randF32(a.r, T*a.nkv*a.d, 1))
	vv = roundTo(a.dt, randF32(a.r, T*a.nkv*a.d, 1))
	ld := a.ld()
	buf := make([]float32, T*ld)
	for i := range buf {
		buf[i] = float32(math.NaN()) // spare columns: never read
	}
	qd, kd := a.nh*a.d, a.nkv*a.d
	for tk := 0; tk < T; tk++ {
		copy(buf[tk*ld:], q[tk*qd:(tk+1)*qd])
		copy(buf[tk*ld+qd:], kk[tk*kd:(tk+1)*kd])
		copy(buf[tk*ld+qd+kd:], vv[tk*kd:(tk+1)*kd])
	}
	a.uploadTo(a.qkv, buf)
	if a.G > 0 {
		// Gates spread to +-25: both sides of softplus's threshold at 20.
		a.g = roundTo(a.dt, randF32(a.r, T*a.G, 25))
		gbuf := make([]float32, T*a.ldg())
		for tk := 0; tk < T; tk++ {
			copy(gbuf[tk*a.ldg():], a.g[tk*a.G:(tk+1)*a.G])
		}
		a.uploadTo(a.gate, gbuf)
	}
	pos = make([]int32, T)
	for i := range pos {
		pos[i] = int32(a.next + i)
	}
	if err := cuda.Upload(a.s, a.pos, pos); err != nil {
		t.Fatal(err)
	}
	return q, kk, vv, pos
}

func (a *attnRig) uploadTo(dst cuda.DevicePtr, v []float32) {
	a.t.Helper()
	var err error
	switch a.dt {
	case cuda.F32:
		err = cuda.Upload(a.s, dst, v)
	case cuda.BF16:
		h := make([]uint16, len(v))
		for i, x := range v {
			h[i] = cuda.F32ToBF16(x)
		}
		err = cuda.Upload(a.s, dst, h)
	default:
		a.t.Fatalf("attnRig: dtype %v", a.dt)
	}
	if err != nil {
		a.t.Fatal(err)
	}
}

func (a *attnRig) kvPtrs() (qp, kp, vp cuda.DevicePtr) {
	es := int64(a.dt.Size())
	return a.qkv, a.qkv.Add(int64(a.nh*a.d) * es), a.qkv.Add(int64((a.nh+a.nkv)*a.d) * es)
}

// reference runs cpu.Attention with the rig's cache, then the rig's gate;
// nh may differ from the rig's (the cache does not depend on it) to fill
// history cheaply, ungated.
func (a *attnRig) reference(q, kk, vv []float32, pos []int32, nh int) []float32 {
	a.t.Helper()
	T := len(pos)
	want := make([]float32, T*nh*a.d)
	if err := cpu.Attention(want, q, kk, vv, pos, T, nh, a.nkv, a.d, a.window, a.scale, a.ref); err != nil {
		a.t.Fatal(err)
	}
	if a.G > 0 && nh == a.nh {
		if err := cpu.SoftplusGate(want, want, a.g, T, nh, a.d, a.G); err != nil {
			a.t.Fatal(err)
		}
	}
	return want
}

// prefill runs a chunk of T tokens through AttentionPrefill and then
// stores it (KVCompactRing or KVAppend), as the executor's prefill does.
func (a *attnRig) prefill(T int) (got, want []float32) {
	t := a.t
	t.Helper()
	q, kk, vv, pos := a.inputs(T)
	want = a.reference(q, kk, vv, pos, a.nh)
	poison(t, a.s, a.out, int64(T*a.nh*a.d*a.dt.Size()))
	qp, kp, vp := a.kvPtrs()
	if err := a.k.AttentionPrefillGate(a.s, a.dt, a.c, a.out, qp, kp, vp, a.ld(), a.ld(), a.pos, T, a.nh, a.scale, a.gateGPU()); err != nil {
		t.Fatal(err)
	}
	a.store(kp, vp, T)
	a.next += T
	return download(t, a.s, a.dt, a.out, T*a.nh*a.d), want
}

func (a *attnRig) store(kp, vp cuda.DevicePtr, T int) {
	a.t.Helper()
	var err error
	if a.window > 0 {
		err = a.k.KVCompactRing(a.s, a.dt, a.c, kp, vp, a.ld(), a.pos, T)
	} else {
		err = a.k.KVAppend(a.s, a.dt, a.c, kp, vp, a.ld(), a.pos, T)
	}
	if err != nil {
		a.t.Fatal(err)
	}
}

// decode runs one decode step: KVAppend, then AttentionDecode with nsplit
// splits (0: DecodeSplits).
func (a *attnRig) decode(nsplit int) (got, want []float32) { return a.decodeStep(nsplit, false) }

// decodeAppend runs one decode step through AttentionDecodeAppend: the
// attention kernel appends this token's k, v itself.
func (a *attnRig) decodeAppend(nsplit int) (got, want []float32) { return a.decodeStep(nsplit, true) }

func (a *attnRig) decodeStep(nsplit int, fused bool) (got, want []float32) {
	t := a.t
	t.Helper()
	q, kk, vv, pos := a.inputs(1)
	want = a.reference(q, kk, vv, pos, a.nh)
	poison(t, a.s, a.out, int64(a.nh*a.d*a.dt.Size()))
	qp, kp, vp := a.kvPtrs()
	if nsplit > attnRigMaxSplits || (nsplit == 0 && a.k.DecodeSplits(a.c) > attnRigMaxSplits) {
		t.Fatalf("attnRig: too many splits for the workspace")
	}
	var err error
	if fused {
		err = a.k.attentionDecode(a.s, a.dt, a.c, a.out, qp, kp, vp, a.pos, a.nh, a.scale, a.gateGPU(), a.ws, nsplit, a.stages, a.mma)
	} else {
		if err := a.k.KVAppend(a.s, a.dt, a.c, kp, vp, a.ld(), a.pos, 1); err != nil {
			t.Fatal(err)
		}
		err = a.k.attentionDecode(a.s, a.dt, a.c, a.out, qp, 0, 0, a.pos, a.nh, a.scale, a.gateGPU(), a.ws, nsplit, a.stages, a.mma)
	}
	if err != nil {
		t.Fatal(err)
	}
	a.next++
	return download(t, a.s, a.dt, a.out, a.nh*a.d), want
}

// fill appends n positions of history without checking attention outputs:
// the reference with one query head per kv head (cheaper; the cache does
// not depend on nh), the device cache with KVAppend in ring-sized pieces.
func (a *attnRig) fill(n int) {
	t := a.t
	t.Helper()
	for n > 0 {
		T := min(n, a.maxT)
		if a.window > 0 {
			T = min(T, a.window)
		}
		_, kk, vv, pos := a.inputs(T)
		q := make([]float32, T*a.nkv*a.d)
		a.reference(q, kk, vv, pos, a.nkv)
		_, kp, vp := a.kvPtrs()
		if err := a.k.KVAppend(a.s, a.dt, a.c, kp, vp, a.ld(), a.pos, T); err != nil {
			t.Fatal(err)
		}
		a.next += T
		n -= T
	}
}

// TestAttentionDecodeGPU: two decode steps after a history (KVAppend then
// AttentionDecode, then AttentionDecodeAppend, whose kernel appends), over
// a table of shapes: GQA groups 1/2/4/6/9 and 20 (two blocks of heads per
// kv head), head_dim 128 and small ones (40: not a multiple of 32; 20: not
// a multiple of the bf16 vector, element-wise loads; 6: not a multiple of
// 4, a zero-padded tail; 256: two channel chunks per lane), windows
// shorter and longer than the sequence, ring wrap-around, a 5000-key cache
// for the split path, forced split counts (including splits left empty at
// position 0).
func TestAttentionDecodeGPU(t *testing.T) {
	k, s := gpu(t)
	t.Cleanup(func() { _ = s.Close() }) // an unclosed stream's pinned buffer panics at GC
	cases := []struct {
		name                          string
		nh, nkv, d, window, hist, spl int
	}{
		{"s21-full-5000-auto", 72, 8, 128, 0, 5000, 0},
		{"s21-full-5000-nosplit", 72, 8, 128, 0, 5000, 1},
		{"s21-sliding-512-wrap", 72, 8, 128, 512, 1300, 0},
		{"g2-d40-full-split3", 8, 4, 40, 0, 100, 3},
		{"g4-d16-win5-wrap", 4, 1, 16, 5, 23, 1},
		{"g4-d16-win5-wrap-split2", 4, 1, 16, 5, 23, 2},
		{"g1-d64-win64-longer", 4, 4, 64, 64, 10, 2},
		{"g9-d128-first-token-split4", 18, 2, 128, 0, 0, 4},
		{"s21-fullheads-546-auto", 48, 8, 128, 0, 530, 0},
		{"g20-d64-win16-wrap", 40, 2, 64, 16, 40, 0},
		{"g3-d20-full-split2", 6, 2, 20, 0, 50, 2},
		{"g2-d6-win9-wrap", 4, 2, 6, 9, 30, 0},
		{"g2-d256-full-split3", 4, 2, 256, 0, 70, 3},
		// dec_merge keeps up to 64 splits' (max, sum) in registers, past that
		// it reads them from memory: both sides of the edge, and 128 splits
		// (DecodeSplits for 2 kv heads over 4096 slots).
		{"g4-d128-full-split64", 8, 2, 128, 0, 3000, 64},
		{"g4-d128-full-split65", 8, 2, 128, 0, 3000, 65},
		{"g4-d128-full-auto128", 8, 2, 128, 0, 3000, 0},
	}
	for ci, c := range cases {
		for _, dt := range DTypes {
			t.Run(fmt.Sprintf("%s/%v", c.name, dt), func(t *testing.T) {
				a := newAttnRig(t, k, s, dt, c.nh, c.nkv, c.d, c.window, c.hist+8, 4096, uint64(ci))
				a.fill(c.hist)
				got, want := a.decode(c.spl)
				checkClose(t, "decode", got, want, attnTol(dt))
				got, want = a.decodeAppend(c.spl)
				checkClose(t, "decode (fused append)", got, want, attnTol(dt))
			})
		}
	}
}

// attnTol: f32 differs from the reference only by summation order.
func attnTol(dt cuda.DType) float64 {
	if dt == cuda.F32 {
		return 2e-5
	}
	return tolFor(dt)
}

// TestAttentionDecodeSequenceGPU appends and attends for 3*window steps,
// comparing every step with cpu.Attention over its KVCache, for a sliding
// layer (the ring wraps twice) and a full layer, with and without splits;
// odd steps append in the attention kernel (AttentionDecodeAppend), so
// later steps read keys either way wrote.
func TestAttentionDecodeSequenceGPU(t *testing.T) {
	k, s := gpu(t)
	t.Cleanup(func() { _ = s.Close() }) // an unclosed stream's pinned buffer panics at GC
	const window = 8
	for _, c := range []struct {
		name   string
		window int
		spl    int
	}{{"sliding", window, 0}, {"sliding-split3", window, 3}, {"full", 0, 0}, {"full-split3", 0, 3}} {
		for _, dt := range DTypes {
			t.Run(fmt.Sprintf("%s/%v", c.name, dt), func(t *testing.T) {
				a := newAttnRig(t, k, s, dt, 8, 2, 32, c.window, 3*window+1, 1, 11)
				for step := 0; step < 3*window; step++ {
					var got, want []float32
					if step%2 == 1 {
						got, want = a.decodeAppend(c.spl)
					} else {
						got, want = a.decode(c.spl)
					}
					checkClose(t, fmt.Sprintf("step %d", step), got, want, attnTol(dt))
				}
			})
		}
	}
}

// TestAttentionPrefillGPU runs prefill chunks (T=37 and others) against
// cpu.Attention over the same tokens, then continues with decode steps
// that read what the chunks left in the cache (the ring after compaction).
func TestAttentionPrefillGPU(t *testing.T) {
	k, s := gpu(t)
	t.Cleanup(func() { _ = s.Close() }) // an unclosed stream's pinned buffer panics at GC
	cases := []struct {
		name               string
		nh, nkv, d, window int
		chunks             []int
		decode             int
	}{
		{"g4-d16-win8-shorter", 8, 2, 16, 8, []int{37, 37}, 10},
		{"g4-d16-win64-longer", 8, 2, 16, 64, []int{37, 20}, 10},
		{"g1-d40-full", 8, 8, 40, 0, []int{37, 37}, 5},
		{"g9-d128-win16", 18, 2, 128, 16, []int{37, 37}, 20},
		{"g4-d64-full-chunk1", 16, 4, 64, 0, []int{1, 37, 2}, 5},
		{"g2-d128-win5-long-chunk", 4, 2, 128, 5, []int{100}, 7},
		{"s21-heads-full", 72, 8, 128, 0, []int{37}, 3},
		{"s21-heads-sliding", 72, 8, 128, 32, []int{37, 37}, 3},
	}
	for ci, c := range cases {
		for _, dt := range DTypes {
			t.Run(fmt.Sprintf("%s/%v", c.name, dt), func(t *testing.T) {
				total := c.decode
				maxT := 1
				for _, n := range c.chunks {
					total += n
					maxT = max(maxT, n)
				}
				a := newAttnRig(t, k, s, dt, c.nh, c.nkv, c.d, c.window, total, maxT, uint64(100+ci))
				for i, n := range c.chunks {
					got, want := a.prefill(n)
					checkClose(t, fmt.Sprintf("chunk %d (T=%d)", i, n), got, want, attnTol(dt))
				}
				for step := 0; step < c.decode; step++ {
					got, want := a.decodeAppend(0)
					checkClose(t, fmt.Sprintf("decode step %d", step), got, want, attnTol(dt))
				}
			})
		}
	}
}

// TestAttentionArgs checks argument validation; it needs no GPU (every case
// fails before a kernel is compiled).
func TestAttentionArgs(t *testing.T) {
	k := &Kernels{}
	p := cuda.DevicePtr(256)
	good := KVLayer{K: p, V: p, NKV: 2, HeadDim: 16, Slots: 10}
	ring := KVLayer{K: p, V: p, NKV: 2, HeadDim: 16, Window: 4, Slots: 4}
	cases := []struct {
		name string
		err  error
	}{
		{"nh not multiple", k.AttentionDecode(nil, cuda.F32, good, p, p, p, 3, 1, p)},
		{"bad dtype", k.AttentionDecode(nil, cuda.I32, good, p, p, p, 4, 1, p)},
		{"head dim too big", k.AttentionDecode(nil, cuda.F32, KVLayer{K: p, V: p, NKV: 1, HeadDim: 300, Slots: 4}, p, p, p, 1, 1, p)},
		{"null q", k.AttentionDecode(nil, cuda.F32, good, p, 0, p, 4, 1, p)},
		{"append null v", k.AttentionDecodeAppend(nil, cuda.F32, good, p, p, p, 0, p, 4, 1, p)},
		{"too many splits", k.attentionDecode(nil, cuda.F32, good, p, p, 0, 0, p, 4, 1, Gate{}, p, lower.MaxSplits+1, 0, 0)},
		{"too many stages", k.attentionDecode(nil, cuda.F32, good, p, p, 0, 0, p, 4, 1, Gate{}, p, 2, lower.MaxDecodeStages+1, 0)},
		{"negative stages", k.attentionDecode(nil, cuda.F32, good, p, p, 0, 0, p, 4, 1, Gate{}, p, 2, -1, 0)},
		{"bad tensor-core choice", k.attentionDecode(nil, cuda.F32, good, p, p, 0, 0, p, 4, 1, Gate{}, p, 2, 0, 3)},
		{"gate width", k.AttentionDecodeGate(nil, cuda.F32, good, p, p, p, p, p, 4, 1, Gate{G: p, Width: 5}, p)},
		{"gate stride", k.AttentionDecodeGate(nil, cuda.F32, good, p, p, p, p, p, 4, 1, Gate{G: p, Width: 4, LD: 3}, p)},
		{"split without workspace", k.attentionDecode(nil, cuda.F32, good, p, p, 0, 0, p, 4, 1, Gate{}, 0, 2, 0, 0)},
		{"prefill gate width", k.AttentionPrefillGate(nil, cuda.F32, good, p, p, p, p, 0, 0, p, 3, 4, 1, Gate{G: p, Width: 63})},
		{"ring slots", k.AttentionDecode(nil, cuda.F32, KVLayer{K: p, V: p, NKV: 2, HeadDim: 16, Window: 4, Slots: 10}, p, p, p, 4, 1, p)},
		{"null cache", k.AttentionPrefill(nil, cuda.F32, KVLayer{NKV: 2, HeadDim: 16, Slots: 10}, p, p, p, p, 0, 0, p, 3, 4, 1)},
		{"prefill T 0", k.AttentionPrefill(nil, cuda.F32, good, p, p, p, p, 0, 0, p, 0, 4, 1)},
		{"prefill short ldq", k.AttentionPrefill(nil, cuda.F32, good, p, p, p, p, 10, 0, p, 3, 4, 1)},
		{"append ring too many", k.KVAppend(nil, cuda.F32, ring, p, p, 0, p, 5)},
		{"compact linear", k.KVCompactRing(nil, cuda.F32, good, p, p, 0, p, 5)},
		{"append short ld", k.KVAppend(nil, cuda.F32, good, p, p, 31, p, 1)},
		{"append null pos", k.KVAppend(nil, cuda.F32, good, p, p, 0, 0, 1)},
	}
	for _, c := range cases {
		if c.err == nil {
			t.Errorf("%s: no error", c.name)
		}
	}
}

// BenchmarkAttentionGPU times the attention kernels at Laguna-S-2.1 shapes
// (72 query heads over 8 kv heads of 128 channels, bf16): prefill chunks of
// 2048 tokens (full, full late in an 8192 prompt, window 512) and decode
// steps over 8192 positions (full) or the 512-slot ring. Reports tokens/s
// and TFLOP/s (prefill: 4*nh*d flops per visible query-key pair) or the KV
// bytes read per second (decode).
//
//	go test -run '^$' -bench AttentionGPU ./exec/gpu
func BenchmarkAttentionGPU(b *testing.B) {
	dev := cudatest.Device(b)
	s, err := dev.NewStream()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	k := NewKernels(dev)
	const nh, nkv, d, maxPos = 72, 8, 128, 8192
	dt := cuda.BF16
	mk := func(n int64) cuda.DevicePtr {
		p, err := dev.Alloc(n)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = dev.Free(p) })
		if err := s.Memset8(p, 0, n); err != nil {
			b.Fatal(err)
		}
		return p
	}
	es := int64(dt.Size())
	for _, c := range []struct {
		name          string
		window, p0, T int // T 0: decode at p0
	}{
		{"prefill-full-T2048-p0", 0, 0, 2048},
		{"prefill-full-T2048-p6144", 0, 6144, 2048},
		{"prefill-win512-T2048-p0", 512, 0, 2048},
		{"prefill-win512-T2048-p6144", 512, 6144, 2048},
		{"decode-full-p8191", 0, 8191, 0},
		{"decode-win512-p8191", 512, 8191, 0},
	} {
		b.Run(c.name, func(b *testing.B) {
			cache := NewKVLayer(0, 0, nkv, d, c.window, maxPos)
			cache.K, cache.V = mk(cache.Bytes(dt)), mk(cache.Bytes(dt))
			T := max(c.T, 1)
			q, kx, vx := mk(int64(T*nh*d)*es), mk(int64(T*nkv*d)*es), mk(int64(T*nkv*d)*es)
			out := mk(int64(T*nh*d) * es)
			pos := make([]int32, T)
			var pairs float64
			for i := range pos {
				pos[i] = int32(c.p0 + i)
				first := 0
				if c.window > 0 {
					first = max(0, c.p0+i-c.window+1)
				}
				pairs += float64(c.p0 + i - first + 1)
			}
			dpos := mk(int64(4 * T))
			if err := cuda.Upload(s, dpos, pos); err != nil {
				b.Fatal(err)
			}
			ws := mk(max(k.DecodeWorkspaceBytes(cache, nh), 4))
			step := func() error {
				if c.T == 0 {
					return k.AttentionDecode(s, dt, cache, out, q, dpos, nh, 0.088, ws)
				}
				return k.AttentionPrefill(s, dt, cache, out, q, kx, vx, 0, 0, dpos, T, nh, 0.088)
			}
			if err := step(); err != nil { // compile and warm up
				b.Fatal(err)
			}
			if err := s.Synchronize(); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := step(); err != nil {
					b.Fatal(err)
				}
			}
			if err := s.Synchronize(); err != nil {
				b.Fatal(err)
			}
			sec := b.Elapsed().Seconds() / float64(b.N)
			if c.T == 0 {
				b.ReportMetric(2*pairs*float64(nkv*d)*float64(es)/sec/1e9, "KV-GB/s")
				b.ReportMetric(float64(k.DecodeSplits(cache)), "splits")
			} else {
				b.ReportMetric(float64(T)/sec, "tok/s")
				b.ReportMetric(4*float64(nh*d)*pairs/sec/1e12, "TFLOP/s")
			}
		})
	}
}
