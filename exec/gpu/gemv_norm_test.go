package gpu

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"lagc/cuda"
	"lagc/lower"
	"lagc/quant"
)

// gemvNormCase is a quantised GEMV of one row (qgemv, or qgemv_xin with
// xin) and the norm of its y after it: plain, _q8x, add_ (y is b, or a
// and the sum) or add_ _q8x.
type gemvNormCase struct {
	qt        quant.Type
	N, K      int
	xin, acc  bool
	norm      string // norm, q8x, add, addq8x
	yIsA      bool
	odt       string // the norm's output dtype; "": y's
	nw, split int
}

var gemvNormCases = []gemvNormCase{
	{qt: quant.Q8_0, N: 3072, K: 9216, acc: true, norm: "q8x"},                   // o_proj, then the MLP norm
	{qt: quant.Q8_0, N: 3072, K: 1024, xin: true, acc: true, norm: "addq8x"},     // shared down, then residual + norm
	{qt: quant.Q4_K, N: 3072, K: 6144, acc: true, norm: "norm", nw: 4, split: 2}, // 384 lanes on 256 threads
	{qt: quant.Q8_0, N: 1001, K: 256, norm: "norm"},                              // warp norm, element-wise
	{qt: quant.Q8_0, N: 3076, K: 512, acc: true, norm: "add", yIsA: true},        // block norm, element-wise
	{qt: quant.Q6_K, N: 8992, K: 256, norm: "q8x", odt: "f32"},                   // 1024 lanes, two chunks some
	{qt: quant.Q8_0, N: 512, K: 1024, xin: true, norm: "addq8x", odt: "f32"},     // warp norm, q8x
	{qt: quant.Q8_0, N: 2000, K: 512, acc: true, norm: "add", odt: "f32", nw: 1}, // block of 256 lanes
}

// launches are the GEMV (weights w, quantised activations xq, or x for
// qgemv_xin, output y) and the norm (weight wn, output out; the add's
// other operand res and its sum; the quantised copy at xq, over the
// GEMV's own) with y and x in dtype dt.
func (c gemvNormCase) launches(w, xq, x, y, res, sum, out, wn lower.Ptr, dt string) (g, n lower.Launch, err error) {
	a := lower.QGEMVArgs{T: 1, K: c.K, N: c.N, XQ: xq, W: w, Y: y, WType: c.qt, WRows: c.N, YType: dt, Accumulate: c.acc,
		RowsPerWarp: c.nw, Split: c.split}
	if c.xin {
		g, err = lower.QGEMVXIn(a, x, dt)
	} else {
		g, err = lower.QGEMV(a)
	}
	if err != nil {
		return
	}
	odt := c.odt
	if odt == "" {
		odt = dt
	}
	pa, pb := res, y
	if c.yIsA {
		pa, pb, sum = y, res, y
	}
	const eps = 1e-6
	switch c.norm {
	case "norm":
		n, err = lower.RMSNorm(dt, odt, out, y, wn, 1, c.N, eps)
	case "q8x":
		n, err = lower.RMSNormQ8X(dt, odt, out, y, wn, xq, 1, c.N, eps)
	case "add":
		n, err = lower.AddRMSNorm(dt, odt, sum, out, pa, pb, wn, 1, c.N, eps)
	case "addq8x":
		n, err = lower.AddRMSNormQ8X(dt, odt, sum, out, pa, pb, wn, xq, 1, c.N, eps)
	}
	return
}

// TestQGEMVNormGPU: a GEMV ending with the norm of its y (QGEMVNorm, what
// fuseGEMVNorm makes of the two launches) writes y, the norm's output, the
// sum and the quantised copy bit for bit as the GEMV then the norm launch
// do, for y in f32 and bf16, the planned shapes (o_proj then the MLP
// norm, the shared expert's down then the residual add and norm), warp
// and block norms of 32 to 1024 lanes on the GEMV's 256 threads, their
// element-wise paths, and the norm's copy over the GEMV's quantised
// activations; run five times with the same counter, each run from fresh
// inputs and poisoned outputs, and the counter is zero after.
func TestQGEMVNormGPU(t *testing.T) {
	k, s := gpu(t)
	s.SetProgrammaticLaunch(true) // as the executor launches
	r := rand.New(rand.NewPCG(41, 42))
	counter := alloc(t, k, 4)
	if err := s.Memset8(counter, 0, 4); err != nil {
		t.Fatal(err)
	}
	for _, c := range gemvNormCases {
		for _, dt := range []cuda.DType{cuda.BF16, cuda.F32} {
			name := fmt.Sprintf("%s_N%d_K%d_xin%v_acc%v_%s_yIsA%v_o%s_%v", c.qt, c.N, c.K, c.xin, c.acc, c.norm, c.yIsA, c.odt, dt)
			t.Run(name, func(t *testing.T) {
				odt := dt
				if c.odt != "" {
					var err error
					if odt, err = cuda.ParseDType(c.odt); err != nil {
						t.Fatal(err)
					}
				}
				x := roundTo(dt, randF32(r, c.K, 1))
				y0 := roundTo(dt, randF32(r, c.N, 2))
				res0 := roundTo(dt, randF32(r, c.N, 3))
				w := uploadQuant(t, k, s, c.qt, c.N, c.K, randQuantBlocks(r, c.qt, c.N, c.K))
				wn := upload(t, k, s, cuda.F32, normWeights(r, c.N))
				xp := upload(t, k, s, dt, x)
				y0p, res0p := upload(t, k, s, dt, y0), upload(t, k, s, dt, res0)
				yBytes, oBytes, qBytes := int64(c.N*dt.Size()), int64(c.N*odt.Size()), lower.Q8XBytes(1, c.N)
				qxBytes := max(qBytes, lower.Q8XBytes(1, c.K))
				type bufs struct{ xq, y, res, sum, out cuda.DevicePtr }
				newBufs := func() bufs {
					return bufs{alloc(t, k, qxBytes), alloc(t, k, yBytes), alloc(t, k, yBytes), alloc(t, k, yBytes), alloc(t, k, oBytes)}
				}
				// reset: fresh inputs (y, res, the GEMV's quantised
				// activations) and outputs filled with v.
				reset := func(b bufs, v byte) {
					for _, e := range []error{
						s.CopyDtoD(b.y, y0p, yBytes), s.CopyDtoD(b.res, res0p, yBytes),
						s.Memset8(b.sum, v, yBytes), s.Memset8(b.out, v, oBytes), s.Memset8(b.xq, v, qxBytes),
					} {
						if e != nil {
							t.Fatal(e)
						}
					}
					if !c.xin {
						if err := k.Q8XQuantize(s, dt, xp, b.xq, 1, c.K); err != nil {
							t.Fatal(err)
						}
					}
				}
				launches := func(b bufs) (g, n lower.Launch) {
					g, n, err := c.launches(ptr(w), ptr(b.xq), ptr(xp), ptr(b.y), ptr(b.res), ptr(b.sum), ptr(b.out), ptr(wn), dt.String())
					if err != nil {
						t.Fatal(err)
					}
					return g, n
				}
				ref := newBufs()
				reset(ref, 0x00)
				g, n := launches(ref)
				if err := k.on(s).all([]lower.Launch{g, n}, nil); err != nil {
					t.Fatal(err)
				}
				got := newBufs()
				g, n = launches(got)
				f, err := lower.QGEMVNorm(g, n, ptr(counter))
				if err != nil {
					t.Fatal(err)
				}
				for run := range 5 {
					reset(got, 0xFF)
					if err := k.on(s).one(f, nil); err != nil {
						t.Fatal(err)
					}
					type part struct {
						what     string
						got, exp cuda.DevicePtr
						n        int64
					}
					parts := []part{{"y", got.y, ref.y, yBytes}, {"out", got.out, ref.out, oBytes}}
					if strings.HasPrefix(c.norm, "add") && !c.yIsA {
						parts = append(parts, part{"sum", got.sum, ref.sum, yBytes})
					}
					if strings.HasSuffix(c.norm, "q8x") {
						vals, scales := q8xWritten(1, c.N)
						parts = append(parts, part{"quantised values", got.xq, ref.xq, vals},
							part{"quantised scales", got.xq.Add(scales), ref.xq.Add(scales), qBytes - scales})
					}
					for _, p := range parts {
						if i := firstByteDiff(downloadBytes(t, s, p.got, p.n), downloadBytes(t, s, p.exp, p.n)); i >= 0 {
							t.Fatalf("run %d: %s: byte %d differs from the GEMV then the norm", run, p.what, i)
						}
					}
				}
				if cnt := downloadBytes(t, s, counter, 4); cnt[0]|cnt[1]|cnt[2]|cnt[3] != 0 {
					t.Fatalf("counter left at %v", cnt)
				}
			})
		}
	}
}
