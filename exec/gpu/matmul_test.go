package gpu

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"lagc/config"
	"lagc/cuda"
	"lagc/exec/cpu"
	"lagc/ir"
	"lagc/lower"
)

// mmMode is one dtype signature of MatMul.
type mmMode struct {
	name    string
	x, w, y cuda.DType
}

var mmModes = []mmMode{
	{"f32", cuda.F32, cuda.F32, cuda.F32},
	{"bf16", cuda.BF16, cuda.BF16, cuda.BF16},
	{"f32x-bf16w", cuda.F32, cuda.BF16, cuda.F32},
	{"bf16x-f32y", cuda.BF16, cuda.BF16, cuda.F32},
}

// mmTol: the output dtype sets the tolerance (inputs are rounded to their
// dtypes before the reference sees them).
func mmTol(m mmMode) float64 { return tolFor(m.y) }

// mmRef is the CPU reference of a: x w^T, or the SwiGLU of the two halves,
// plus y0 when accumulating.
func mmRef(t *testing.T, a MatMulArgs, x, w, y0 []float32) []float32 {
	t.Helper()
	want := make([]float32, a.T*a.N)
	if a.SwiGLU {
		g := make([]float32, a.T*a.N)
		u := make([]float32, a.T*a.N)
		if err := cpu.MatMul(g, x, w[:a.N*a.K], a.T, a.K, a.N); err != nil {
			t.Fatal(err)
		}
		if err := cpu.MatMul(u, x, w[a.N*a.K:], a.T, a.K, a.N); err != nil {
			t.Fatal(err)
		}
		if err := cpu.SiLU(g, g); err != nil {
			t.Fatal(err)
		}
		if err := cpu.Mul(want, g, u); err != nil {
			t.Fatal(err)
		}
	} else if err := cpu.MatMul(want, x, w, a.T, a.K, a.N); err != nil {
		t.Fatal(err)
	}
	if y0 != nil {
		for i := range want {
			want[i] += y0[i]
		}
	}
	return want
}

// mmGPU is gpu with the stream closed when the test ends (an unclosed
// stream keeps a runtime.Pinner pinned, which panics once collected).
func mmGPU(t *testing.T) (*Kernels, *cuda.Stream) {
	t.Helper()
	k, s := gpu(t)
	t.Cleanup(func() { _ = s.Close() })
	return k, s
}

// mmRun uploads random inputs for a's shapes and dtypes (it fills in the
// pointers), runs it, and returns the output and the reference.
func mmRun(t *testing.T, k *Kernels, s *cuda.Stream, r *rand.Rand, a MatMulArgs) (got, want []float32) {
	t.Helper()
	rows := a.N
	if a.SwiGLU {
		rows = 2 * a.N
	}
	x := roundTo(a.XType, randF32(r, a.T*a.K, 1))
	w := roundTo(a.WType, randF32(r, rows*a.K, 1))
	a.X = upload(t, k, s, a.XType, x)
	a.W = upload(t, k, s, a.WType, w)
	var y0 []float32
	if a.Accumulate {
		y0 = roundTo(a.YType, randF32(r, a.T*a.N, 4))
		a.Y = upload(t, k, s, a.YType, y0)
	} else {
		n := int64(a.T * a.N * a.YType.Size())
		a.Y = alloc(t, k, n)
		poison(t, s, a.Y, n)
	}
	if err := k.MatMul(s, a); err != nil {
		t.Fatal(err)
	}
	got = download(t, s, a.YType, a.Y, a.T*a.N)
	return got, mmRef(t, a, x, w, y0)
}

func TestMatMulShapes(t *testing.T) {
	k, s := mmGPU(t)
	for _, m := range mmModes {
		for _, T := range []int{1, 2, 3, 7, 8, 9, 64, 129} {
			t.Run(fmt.Sprintf("%s/T%d", m.name, T), func(t *testing.T) {
				r := rand.New(rand.NewPCG(uint64(T), 7))
				for _, N := range []int{1, 17, 100, 1000} {
					for _, K := range []int{8, 13, 24, 136, 1000} {
						a := MatMulArgs{T: T, K: K, N: N, XType: m.x, WType: m.w, YType: m.y}
						got, want := mmRun(t, k, s, r, a)
						checkClose(t, fmt.Sprintf("N=%d K=%d", N, K), got, want, mmTol(m))
					}
				}
			})
		}
	}
}

// TestMatMulPaths reaches every kernel variant: GEMV splits up to 8 warps a
// row, both tensor-core tile heights and K steps, the FFMA fallback,
// accumulate and SwiGLU epilogues, at sizes with many k-tiles.
func TestMatMulPaths(t *testing.T) {
	k, s := mmGPU(t)
	r := rand.New(rand.NewPCG(3, 4))
	cases := []struct {
		T, K, N     int
		acc, swiglu bool
		rows        int // tensor-core tile rows (0: automatic)
	}{
		{T: 1, K: 3072, N: 3072},           // split 2, unrolled main loop
		{T: 2, K: 3072, N: 17},             // split 8
		{T: 8, K: 1024, N: 300, acc: true}, // residual add
		{T: 3, K: 1000, N: 77, swiglu: true},
		{T: 1, K: 13, N: 33, swiglu: true, acc: true},
		{T: 200, K: 1000, N: 300, rows: 64},
		{T: 200, K: 1000, N: 300, rows: 128},
		{T: 130, K: 520, N: 130, rows: 128, acc: true},
		{T: 131, K: 264, N: 200, rows: 64, swiglu: true},
		{T: 257, K: 264, N: 70, rows: 128, swiglu: true, acc: true},
		{T: 40, K: 37, N: 90, swiglu: true}, // FFMA (K % 8 != 0)
		{T: 512, K: 3072, N: 384},           // planner's choice, many k-tiles
	}
	for _, m := range mmModes {
		for _, c := range cases {
			for _, bk := range []int{32, 64} {
				a := MatMulArgs{T: c.T, K: c.K, N: c.N, XType: m.x, WType: m.w, YType: m.y, Accumulate: c.acc, SwiGLU: c.swiglu,
					Tile: MMATile{Rows: c.rows, K: bk}}
				got, want := mmRun(t, k, s, r, a)
				checkClose(t, fmt.Sprintf("%s %+v bk=%d", m.name, c, bk), got, want, mmTol(m))
			}
		}
	}
}

// TestMatMulDeterministic: two runs of each kernel give the same bits.
func TestMatMulDeterministic(t *testing.T) {
	k, s := mmGPU(t)
	r := rand.New(rand.NewPCG(5, 6))
	for _, c := range []MatMulArgs{
		{T: 3, K: 3072, N: 1000, XType: cuda.BF16, WType: cuda.BF16, YType: cuda.BF16},
		{T: 300, K: 1000, N: 1000, XType: cuda.BF16, WType: cuda.BF16, YType: cuda.F32},
		{T: 100, K: 100, N: 100, XType: cuda.F32, WType: cuda.F32, YType: cuda.F32, SwiGLU: true},
	} {
		rows := c.N
		if c.SwiGLU {
			rows *= 2
		}
		c.X = upload(t, k, s, c.XType, randF32(r, c.T*c.K, 1))
		c.W = upload(t, k, s, c.WType, randF32(r, rows*c.K, 1))
		n := c.T * c.N * c.YType.Size()
		c.Y = alloc(t, k, int64(n))
		var outs [2][]byte
		for i := range outs {
			poison(t, s, c.Y, int64(n))
			if err := k.MatMul(s, c); err != nil {
				t.Fatal(err)
			}
			outs[i] = make([]byte, n)
			if err := s.CopyDtoH(outs[i], c.Y); err != nil {
				t.Fatal(err)
			}
		}
		if !bytes.Equal(outs[0], outs[1]) {
			t.Errorf("T=%d K=%d N=%d: two runs differ", c.T, c.K, c.N)
		}
	}
}

// TestMatMulErrors: bad arguments are errors, not launches.
func TestMatMulErrors(t *testing.T) {
	k := &Kernels{} // MatMulLaunch fails before it needs a device
	for _, a := range []MatMulArgs{
		{T: 0, K: 8, N: 8, X: 16, W: 16, Y: 16, XType: cuda.F32, WType: cuda.F32, YType: cuda.F32},
		{T: 1, K: 8, N: 8, X: 16, W: 16, Y: 16, XType: cuda.F16, WType: cuda.F32, YType: cuda.F32},
		{T: 1, K: 8, N: 8, X: 0, W: 16, Y: 16, XType: cuda.F32, WType: cuda.F32, YType: cuda.F32},
		{T: 1, K: -3, N: 8, X: 16, W: 16, Y: 16, XType: cuda.F32, WType: cuda.F32, YType: cuda.F32},
		{T: 9, K: 8, N: 8, X: 16, W: 16, Y: 16, XType: cuda.BF16, WType: cuda.BF16, YType: cuda.F32, Tile: MMATile{Rows: 96}},
		{T: 9, K: 8, N: 8, X: 16, W: 16, Y: 16, XType: cuda.BF16, WType: cuda.BF16, YType: cuda.F32, Tile: MMATile{K: 16}},
	} {
		if _, err := k.MatMulLaunch(a); err == nil {
			t.Errorf("MatMulLaunch(%+v) accepted bad arguments", a)
		}
	}
}

// TestMatMulCublasLtGPU: with CublasLt, lower puts the plain bf16 GEMMs of
// lower.CublasLtMinRows rows or more on cuBLASLt (and keeps the rest on
// lagc's kernels), and cuBLASLt's results, stored and accumulated, into
// bf16 and f32, match the CPU reference.
func TestMatMulCublasLtGPU(t *testing.T) {
	k, s := mmGPU(t)
	lt, err := k.Dev.NewLt()
	if err != nil {
		t.Skipf("optional cuBLASLt: %v", err)
	}
	t.Cleanup(func() { lt.Close() })
	kl := &Kernels{Dev: k.Dev, Lt: lt}
	r := rand.New(rand.NewPCG(9, 10))
	for _, c := range []struct {
		T, K, N     int
		acc, swiglu bool
		y           cuda.DType
		lt          bool // lower should choose cuBLASLt
	}{
		{T: 1024, K: 512, N: 384, y: cuda.BF16, lt: true},
		{T: 1024, K: 512, N: 384, acc: true, y: cuda.BF16, lt: true},
		{T: 1100, K: 264, N: 136, y: cuda.F32, lt: true},
		{T: 2048, K: 1024, N: 3072, acc: true, y: cuda.F32, lt: true},
		{T: lower.CublasLtMinRows, K: 3072, N: 256, y: cuda.F32, lt: true}, // S-2.1's router logits
		{T: lower.CublasLtMinRows - 1, K: 512, N: 384, y: cuda.BF16},       // under CublasLtMinRows
		{T: 1024, K: 512, N: 384, swiglu: true, y: cuda.BF16},              // no SwiGLU epilogue there
		{T: 1024, K: 512, N: 100, y: cuda.BF16},                            // N % 8: rows not 16-byte aligned
	} {
		a := MatMulArgs{T: c.T, K: c.K, N: c.N, XType: cuda.BF16, WType: cuda.BF16, YType: c.y, Accumulate: c.acc, SwiGLU: c.swiglu,
			CC: 90, CublasLt: true}
		choice := a // lower's choice, on aligned stand-in addresses (mmRun allocates the real ones)
		choice.X, choice.W, choice.Y = 1<<20, 2<<20, 3<<20
		l, err := lower.MatMul(choice.lower(k.SMs()))
		if err != nil {
			t.Fatal(err)
		}
		if got := l.Kernel == lower.CublasLtGEMM; got != c.lt {
			t.Fatalf("%+v: lower chose %s", c, l.Kernel)
		}
		got, want := mmRun(t, kl, s, r, a)
		checkClose(t, fmt.Sprintf("%+v", c), got, want, tolFor(c.y))
	}
}

// TestPrefillCublasLtGPU: a prefill of 1100 tokens (the plan's GEMMs of
// 1024 rows or more on cuBLASLt) gives the last row's logits of the same
// plan on lagc's own GEMMs within bf16 rounding carried through two layers
// of random weights (under 10% of the largest logit; a transposed or
// misplaced GEMM is off by about all of it), and mostly the same argmax
// (random weights make near-ties; the share is logged): the executor binds
// and runs the cuBLASLt launches in stream order with the kernels around
// them.
func TestPrefillCublasLtGPU(t *testing.T) {
	k, _ := gpu(t)
	if !cuda.HaveCublasLt() {
		t.Skip("optional cuBLASLt not found")
	}
	m := traceModel{name: "laguna-xs-2", config: func() (*config.Config, error) { return config.Preset("laguna-xs-2") }, layers: 2}
	own := tracePlan(t, m, ir.BF16)
	m.cublasLt = true
	withLt := tracePlan(t, m, ir.BF16)
	const T = 1100
	count := func(p *lower.Plan) int {
		ls, err := p.At(p.Prefill, T)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, st := range ls {
			for _, l := range st {
				if l.Kernel == lower.CublasLtGEMM {
					n++
				}
			}
		}
		return n
	}
	if n := count(withLt); n == 0 || count(own) != 0 {
		t.Fatalf("cuBLASLt launches at T=%d: %d with it, %d without", T, n, count(own))
	}
	toks := make([]int32, T)
	for i := range toks {
		toks[i] = int32(1 + (i*7919)%5000)
	}
	run := func(p *lower.Plan) ([]float32, []int32) {
		ex, err := New(p, nil, Options{Device: k.Dev})
		if err != nil {
			t.Fatal(err)
		}
		defer ex.Close()
		last, next, err := ex.ForwardLast(toks)
		if err != nil {
			t.Fatal(err)
		}
		return last, next
	}
	wantLast, wantNext := run(own)
	gotLast, gotNext := run(withLt)
	scale, worst := 0.0, 0.0
	for i := range wantLast {
		scale = max(scale, math.Abs(float64(wantLast[i])))
		worst = max(worst, math.Abs(float64(gotLast[i]-wantLast[i])))
	}
	same := 0
	for i := range wantNext {
		if gotNext[i] == wantNext[i] {
			same++
		}
	}
	t.Logf("cuBLASLt launches %d; last row max |diff| %.3g of max |logit| %.3g; argmax equal at %d of %d positions", count(withLt), worst, scale, same, T)
	if !(worst <= 0.1*scale) || same < T/2 {
		t.Errorf("prefill on cuBLASLt differs from lagc's GEMMs: max |diff| %.3g (max |logit| %.3g), argmax equal at %d of %d", worst, scale, same, T)
	}
}
