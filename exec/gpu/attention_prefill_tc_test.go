package gpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"lagc/cuda"
	"lagc/exec/cpu"
	"lagc/lower"
)

// tcCase is one prefill chunk for attn_prefill_tc: T tokens from position
// p0 after p0 positions of history in the cache. fused lays q, k, v out as
// the columns of one QKV row of odd length (the element-wise variant);
// otherwise they are separate, aligned buffers (the cp.async variant).
type tcCase struct {
	T, p0, window, nh, nkv, d int
	fused                     bool
	// ramp scales key row j (its position) by 1 + j/64, so a row's
	// largest score grows tile after tile: the online softmax's running
	// maximum moves again and again, and attn_prefill_wg's lazy rescale
	// (a move of more than 2^8) runs with factors other than 0 and 1,
	// which random keys of one scale never ask for after the first tile.
	ramp bool
}

func (c tcCase) String() string {
	lay := "aligned"
	if c.fused {
		lay = "fused"
	}
	if c.ramp {
		lay += "-ramp"
	}
	return fmt.Sprintf("T%d-p%d-w%d-h%d_%d-d%d-%s", c.T, c.p0, c.window, c.nh, c.nkv, c.d, lay)
}

// tcCases: every T x p0 x window x d on a small GQA (4/2); the S-2.1 head
// counts (72/8 sliding, 48/8 full, and both with every window) up to
// T=300; the S-2.1 layers at T=2048. The layouts alternate so both
// variants meet every kind of shape. The CPU reference bounds the table:
// 72 heads x 2048 tokens x all windows would take minutes.
func tcCases() []tcCase {
	var cs []tcCase
	add := func(c tcCase) {
		c.fused = len(cs)%2 == 1
		cs = append(cs, c)
	}
	Ts := []int{1, 37, 128, 300, 2048}
	p0s := []int{0, 700}
	windows := []int{0, 5, 512, 4096}
	for _, d := range []int{128, 64} {
		for _, T := range Ts {
			for _, p0 := range p0s {
				for _, w := range windows {
					add(tcCase{T: T, p0: p0, window: w, nh: 4, nkv: 2, d: d})
				}
			}
		}
	}
	for _, h := range [][2]int{{72, 8}, {48, 8}} {
		for _, T := range Ts[:4] {
			for _, p0 := range p0s {
				for _, w := range windows {
					add(tcCase{T: T, p0: p0, window: w, nh: h[0], nkv: h[1], d: 128})
				}
			}
		}
	}
	for _, T := range []int{37, 300} {
		for _, w := range []int{0, 512} {
			add(tcCase{T: T, p0: 700, window: w, nh: 48, nkv: 8, d: 64})
		}
	}
	for _, p0 := range p0s {
		add(tcCase{T: 2048, p0: p0, window: 512, nh: 72, nkv: 8, d: 128})
		add(tcCase{T: 2048, p0: p0, window: 0, nh: 48, nkv: 8, d: 128})
	}
	return cs
}

// tcRig holds one case's inputs on both sides: the history in a
// cpu.KVCache and in a device KVLayer (slots never written are NaN, so a
// read of one shows), the chunk's q, k, v as host values and device
// buffers, and a poisoned output.
type tcRig struct {
	c                  tcCase
	scale              float32
	ref                *cpu.KVCache
	layer              KVLayer
	q, kk, vv          []float32
	pos                []int32
	qp, kp, vp, out    cuda.DevicePtr
	ldq, ldkv          int
	dpos               cuda.DevicePtr
	outElems, outBytes int
}

func newTCRig(t *testing.T, k *Kernels, s *cuda.Stream, c tcCase, seed uint64) *tcRig {
	t.Helper()
	const dt = cuda.BF16
	r := rand.New(rand.NewPCG(seed, 5))
	nkv, d := c.nkv, c.d
	g := &tcRig{c: c, scale: float32(1 / math.Sqrt(float64(d)))}
	var err error
	if g.ref, err = cpu.NewKVCache(nkv, d, c.window, c.p0+c.T); err != nil {
		t.Fatal(err)
	}
	g.layer = NewKVLayer(0, 0, nkv, d, c.window, c.p0+c.T)
	row := nkv * d
	kimg := make([]float32, g.layer.Slots*row)
	vimg := make([]float32, g.layer.Slots*row)
	for i := range kimg {
		kimg[i] = float32(math.NaN())
		vimg[i] = float32(math.NaN())
	}
	if c.p0 > 0 {
		hk := roundTo(dt, rampKeys(c, randF32(r, c.p0*row, 1), 0, row))
		hv := roundTo(dt, randF32(r, c.p0*row, 1))
		hpos := make([]int32, c.p0)
		for i := range hpos {
			hpos[i] = int32(i)
		}
		// The reference cache is filled by attending with one query head
		// per kv head (its output is not used; the cache does not depend on nh).
		dummy := make([]float32, c.p0*row)
		if err := cpu.Attention(dummy, make([]float32, c.p0*row), hk, hv, hpos, c.p0, nkv, nkv, d, c.window, g.scale, g.ref); err != nil {
			t.Fatal(err)
		}
		for j := 0; j < c.p0; j++ {
			sl := j
			if c.window > 0 {
				sl = j % c.window
			}
			copy(kimg[sl*row:(sl+1)*row], hk[j*row:(j+1)*row])
			copy(vimg[sl*row:(sl+1)*row], hv[j*row:(j+1)*row])
		}
	}
	g.layer.K = upload(t, k, s, dt, kimg)
	g.layer.V = upload(t, k, s, dt, vimg)

	T, nh := c.T, c.nh
	g.q = roundTo(dt, randF32(r, T*nh*d, 1))
	g.kk = roundTo(dt, rampKeys(c, randF32(r, T*row, 1), c.p0, row))
	g.vv = roundTo(dt, randF32(r, T*row, 1))
	if c.fused {
		ld := (nh+2*nkv)*d + 3
		buf := make([]float32, T*ld)
		for i := range buf {
			buf[i] = float32(math.NaN()) // spare columns: never read
		}
		for tk := 0; tk < T; tk++ {
			copy(buf[tk*ld:], g.q[tk*nh*d:(tk+1)*nh*d])
			copy(buf[tk*ld+nh*d:], g.kk[tk*row:(tk+1)*row])
			copy(buf[tk*ld+nh*d+row:], g.vv[tk*row:(tk+1)*row])
		}
		g.qp = upload(t, k, s, dt, buf)
		g.kp, g.vp = g.qp.Add(int64(2*nh*d)), g.qp.Add(int64(2*(nh*d+row)))
		g.ldq, g.ldkv = ld, ld
	} else {
		g.qp, g.kp, g.vp = upload(t, k, s, dt, g.q), upload(t, k, s, dt, g.kk), upload(t, k, s, dt, g.vv)
		g.ldq, g.ldkv = nh*d, row
	}
	g.pos = make([]int32, T)
	for i := range g.pos {
		g.pos[i] = int32(c.p0 + i)
	}
	g.dpos = uploadI32(t, k, s, g.pos)
	g.outElems = T * nh * d
	g.outBytes = 2 * g.outElems
	g.out = alloc(t, k, int64(g.outBytes))
	poison(t, s, g.out, int64(g.outBytes))
	return g
}

// rampKeys scales k's rows (positions from p, row values each) as c.ramp
// asks; k unchanged otherwise.
func rampKeys(c tcCase, k []float32, p, row int) []float32 {
	if c.ramp {
		for i := range k {
			k[i] *= 1 + float32(p+i/row)/64
		}
	}
	return k
}

// want is cpu.Attention over the same history and chunk.
func (g *tcRig) want(t *testing.T) []float32 {
	t.Helper()
	c := g.c
	w := make([]float32, g.outElems)
	if err := cpu.Attention(w, g.q, g.kk, g.vv, g.pos, c.T, c.nh, c.nkv, c.d, c.window, g.scale, g.ref); err != nil {
		t.Fatal(err)
	}
	return w
}

func (g *tcRig) runTC(k *Kernels, s *cuda.Stream) error { return g.run(k, s, true, false) }

// runFFMA runs attn_prefill through AttentionPrefill with the fast path off.
func (g *tcRig) runFFMA(k *Kernels, s *cuda.Stream) error { return g.run(k, s, false, false) }

// runWG runs AttentionPrefill with the wgmma kernel asked for, its
// variant v.
func (g *tcRig) runWG(k *Kernels, s *cuda.Stream, v wgVariant) error {
	defer v.use()()
	return g.run(k, s, true, true)
}

// wgVariant is one of attn_prefill_wg's variants
// (lower.AttentionPrefillArgs.WgCTAs, WgRows, WgStages).
type wgVariant struct{ ctas, rows, stages int }

// wgVariants are the variants the tests check and time: 64 rows a CTA at
// 2, 3 and 4 CTAs a multiprocessor, 128 (two warpgroups sharing K and V)
// at 2, with one stage of K and V and two.
var wgVariants = []wgVariant{{ctas: 2, rows: 64}, {ctas: 3, rows: 64}, {ctas: 4, rows: 64}, {ctas: 2, rows: 128},
	{ctas: 2, rows: 128, stages: 2}}

func (v wgVariant) name() string {
	switch {
	case v.rows == 64:
		return fmt.Sprintf("ctas%d", v.ctas)
	case v.stages == 2:
		return fmt.Sprintf("ctas%d-rows%d-stages2", v.ctas, v.rows)
	}
	return fmt.Sprintf("ctas%d-rows%d", v.ctas, v.rows)
}

// split and nw are attn_prefill_wg's SPLIT and NW for v: SPLIT 0
// double-buffers K and V (64 rows at 2 CTAs, or 128 rows at 2 stages).
func (v wgVariant) split() int {
	switch {
	case v.rows == 128 && v.stages == 2:
		return 0
	case v.rows == 128:
		return 1
	}
	return v.ctas - 2
}

func (v wgVariant) nw() int { return v.rows / 64 }

// with sets a's variant fields to v's.
func (v wgVariant) with(a lower.AttentionPrefillArgs) lower.AttentionPrefillArgs {
	a.WgCTAs, a.WgRows, a.WgStages = v.ctas, v.rows, v.stages
	return a
}

// use makes v the variant the executor's prefill attention runs until
// the returned function restores the previous one.
func (v wgVariant) use() func() {
	c, r, st := prefillWGCTAs, prefillWGRows, prefillWGStages
	prefillWGCTAs, prefillWGRows, prefillWGStages = v.ctas, v.rows, v.stages
	return func() { prefillWGCTAs, prefillWGRows, prefillWGStages = c, r, st }
}

func (g *tcRig) run(k *Kernels, s *cuda.Stream, tc, wg bool) error {
	saved, savedWG := prefillTC, prefillWG
	prefillTC, prefillWG = tc, wg
	defer func() { prefillTC, prefillWG = saved, savedWG }()
	return k.AttentionPrefill(s, cuda.BF16, g.layer, g.out, g.qp, g.kp, g.vp, g.ldq, g.ldkv, g.dpos, g.c.T, g.c.nh, g.scale)
}

// TestAttentionPrefillTCGPU compares attn_prefill_tc with cpu.Attention
// (bf16 tolerance: P is rounded to bf16 before P V, the output is bf16)
// over tcCases, with history before the chunk read from the cache.
func TestAttentionPrefillTCGPU(t *testing.T) {
	k, s := gpu(t)
	for i, c := range tcCases() {
		t.Run(c.String(), func(t *testing.T) {
			g := newTCRig(t, k, s, c, uint64(1000+i))
			if err := g.runTC(k, s); err != nil {
				t.Fatal(err)
			}
			got := download(t, s, cuda.BF16, g.out, g.outElems)
			checkClose(t, "attn_prefill_tc", got, g.want(t), tolFor(cuda.BF16))
		})
	}
}

// TestAttentionPrefillTCTimingGPU logs old (attn_prefill, FFMA) against new
// (attn_prefill_tc) kernel times at the Laguna-S-2.1 layer shapes, T=2048
// from position 0, median of several CUDA-event-timed runs, and checks the
// two agree. It asserts no time: figures are for the log.
//
//	go test -run AttentionPrefillTCTimingGPU -v ./exec/gpu
func TestAttentionPrefillTCTimingGPU(t *testing.T) {
	if testing.Short() {
		t.Skip("timing")
	}
	k, s := gpu(t)
	for i, c := range []tcCase{
		{T: 2048, window: 512, nh: 72, nkv: 8, d: 128}, // S-2.1 sliding layer
		{T: 2048, window: 0, nh: 48, nkv: 8, d: 128},   // S-2.1 full layer
		{T: 2048, window: 0, nh: 72, nkv: 8, d: 128},
	} {
		t.Run(c.String(), func(t *testing.T) {
			g := newTCRig(t, k, s, c, uint64(2000+i))
			var pairs float64
			for tk := 0; tk < c.T; tk++ {
				p := c.p0 + tk
				first := 0
				if c.window > 0 {
					first = max(0, p-c.window+1)
				}
				pairs += float64(p - first + 1)
			}
			flops := 4 * float64(c.nh*c.d) * pairs
			run := func(name string, f func() error) []float32 {
				poison(t, s, g.out, int64(g.outBytes))
				med := timeMedian(t, s, 7, f)
				t.Logf("%-5s %8.3f ms  %6.1f TFLOP/s", name, med.Seconds()*1e3, flops/med.Seconds()/1e12)
				return download(t, s, cuda.BF16, g.out, g.outElems)
			}
			old := run("ffma", func() error { return g.runFFMA(k, s) })
			tc := run("tc", func() error { return g.runTC(k, s) })
			checkClose(t, "tc vs ffma", tc, old, tolFor(cuda.BF16))
			if k.CC() >= 90 {
				for _, v := range wgVariants {
					wg := run("wgmma-"+v.name(), func() error { return g.runWG(k, s, v) })
					checkClose(t, "wgmma vs ffma", wg, old, tolFor(cuda.BF16))
				}
			}
		})
	}
}

// timeMedian runs f once to compile and warm up, then n times between CUDA
// events, and returns the median.
func timeMedian(t *testing.T, s *cuda.Stream, n int, f func() error) time.Duration {
	t.Helper()
	if err := f(); err != nil {
		t.Fatal(err)
	}
	dev := s.Device()
	e0, err := dev.NewEvent()
	if err != nil {
		t.Fatal(err)
	}
	defer e0.Close()
	e1, err := dev.NewEvent()
	if err != nil {
		t.Fatal(err)
	}
	defer e1.Close()
	ds := make([]time.Duration, n)
	for i := range ds {
		if err := s.Record(e0); err != nil {
			t.Fatal(err)
		}
		if err := f(); err != nil {
			t.Fatal(err)
		}
		if err := s.Record(e1); err != nil {
			t.Fatal(err)
		}
		if err := e1.Synchronize(); err != nil {
			t.Fatal(err)
		}
		if ds[i], err = cuda.Elapsed(e0, e1); err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(ds)
	return ds[n/2]
}

// TestAttentionPrefillWGGPU compares attn_prefill_wg (Hopper, head_dim 128,
// 16-byte operands), each variant (WgCTAs 2: K and V double-buffered; 3,
// 4: one tile each loaded in halves; WgRows 128: two warpgroups a CTA
// sharing one tile of each), with cpu.Attention over
// tcCases' aligned head_dim 128 cases, and checks the launch is that
// kernel's; then two gated chunks (a gate per head, per element).
func TestAttentionPrefillWGGPU(t *testing.T) {
	k, s := hopperGPU(t)
	cases := tcCases()
	// Scores that grow along the keys: the running maximum moves often.
	for _, c := range []tcCase{{T: 2048, p0: 0, window: 0, nh: 4, nkv: 2}, {T: 300, p0: 700, window: 512, nh: 72, nkv: 8},
		{T: 2048, p0: 700, window: 512, nh: 8, nkv: 1}, {T: 128, p0: 700, window: 0, nh: 48, nkv: 8}} {
		c.d, c.ramp = 128, true
		cases = append(cases, c)
	}
	for _, v := range wgVariants {
		name := v.name()
		for i, c := range cases {
			if c.d != 128 || c.fused {
				continue
			}
			t.Run(name+"/"+c.String(), func(t *testing.T) {
				g := newTCRig(t, k, s, c, uint64(1000+i))
				l, err := lower.AttentionPrefill(v.with(lower.AttentionPrefillArgs{DType: "bf16", Cache: g.layer.cache(), Out: ptr(g.out),
					Q: ptr(g.qp), K: ptr(g.kp), V: ptr(g.vp), LDQ: g.ldq, LDKV: g.ldkv, Pos: ptr(g.dpos), T: c.T, NH: c.nh,
					Scale: g.scale, Wgmma: true, CC: k.CC()}))
				if err != nil || l.Kernel != "attn_prefill_wg" || l.Ints[1] != int64(v.split()) || l.Ints[2] != int64(v.nw()) {
					t.Fatalf("AttentionPrefill chose %s (%v), not attn_prefill_wg<128, %d, %d>", l.NameExpr(), err, v.split(), v.nw())
				}
				if err := g.runWG(k, s, v); err != nil {
					t.Fatal(err)
				}
				got := download(t, s, cuda.BF16, g.out, g.outElems)
				checkClose(t, "attn_prefill_wg", got, g.want(t), tolFor(cuda.BF16))
			})
		}
		// Gated: per head and per element, a sliding and a full S-2.1 layer.
		for ci, c := range []struct {
			tc tcCase
			G  int
		}{
			{tcCase{T: 300, p0: 700, window: 512, nh: 72, nkv: 8, d: 128}, 72},
			{tcCase{T: 128, p0: 0, window: 0, nh: 48, nkv: 8, d: 128}, 48 * 128},
		} {
			t.Run(fmt.Sprintf("%s/gate%d/%v", name, c.G, c.tc), func(t *testing.T) {
				g := newTCRig(t, k, s, c.tc, uint64(3000+ci))
				gate := roundTo(cuda.BF16, randF32(rand.New(rand.NewPCG(uint64(ci), 9)), c.tc.T*c.G, 2))
				gp := upload(t, k, s, cuda.BF16, gate)
				saved := prefillWG
				prefillWG = true
				restore := v.use()
				err := k.AttentionPrefillGate(s, cuda.BF16, g.layer, g.out, g.qp, g.kp, g.vp, g.ldq, g.ldkv, g.dpos, c.tc.T, c.tc.nh, g.scale,
					Gate{G: gp, Width: c.G, LD: c.G})
				prefillWG = saved
				restore()
				if err != nil {
					t.Fatal(err)
				}
				want := g.want(t)
				if err := cpu.SoftplusGate(want, want, gate, c.tc.T, c.tc.nh, c.tc.d, c.G); err != nil {
					t.Fatal(err)
				}
				checkClose(t, "gated attn_prefill_wg", download(t, s, cuda.BF16, g.out, g.outElems), want, tolFor(cuda.BF16))
			})
		}
	}
}
