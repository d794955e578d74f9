package cuda_test

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"lagc/cuda"
	"lagc/cuda/cudatest"
)

// TestGPUCublasLt: cuBLASLt's y = x w^T (bf16 in, f32 accumulation) against
// a float64 reference of the same bf16 values, into bf16 and f32, storing
// and accumulating (y += x w^T over y's bf16/f32 values), over ragged
// shapes; the optional library's absence skips, saying so.
func TestGPUCublasLt(t *testing.T) {
	d := cudatest.Device(t)
	lt, err := d.NewLt()
	if errors.Is(err, cuda.ErrNoCublasLt) {
		t.Skipf("optional cuBLASLt baseline: %v", err)
	}
	must(t, err)
	t.Cleanup(func() { lt.Close() })
	s := stream(t, d)
	r := rand.New(rand.NewPCG(5, 6))
	for _, c := range []struct{ T, N, K int }{{1, 8, 16}, {37, 100, 64}, {256, 384, 3072}, {2048, 1024, 3072}} {
		xh, wh := make([]uint16, c.T*c.K), make([]uint16, c.N*c.K)
		for i := range xh {
			xh[i] = cuda.F32ToBF16(r.Float32()*2 - 1)
		}
		for i := range wh {
			wh[i] = cuda.F32ToBF16((r.Float32()*2 - 1) * 0.1)
		}
		x, w := alloc(t, d, int64(2*len(xh))), alloc(t, d, int64(2*len(wh)))
		must(t, s.CopyHtoD(x, cuda.AsBytes(xh)))
		must(t, s.CopyHtoD(w, cuda.AsBytes(wh)))
		ref := make([]float64, c.T*c.N)
		checked := func(i int) bool { return c.T < 300 || i%97 == 0 || i == c.T-1 } // rows the reference computes
		for i := 0; i < c.T; i++ {
			if !checked(i) {
				continue
			}
			for n := 0; n < c.N; n++ {
				var a float64
				for k := 0; k < c.K; k++ {
					a += float64(cuda.BF16ToF32(xh[i*c.K+k])) * float64(cuda.BF16ToF32(wh[n*c.K+k]))
				}
				ref[i*c.N+n] = a
			}
		}
		for _, v := range []struct {
			yt  cuda.DType
			acc bool
		}{{cuda.F32, false}, {cuda.BF16, false}, {cuda.F32, true}, {cuda.BF16, true}} {
			yt := v.yt
			y := alloc(t, d, int64(4*c.T*c.N))
			y0 := make([]float32, c.T*c.N) // y before: 0, or values to accumulate onto
			if v.acc {
				for i := range y0 {
					y0[i] = cuda.BF16ToF32(cuda.F32ToBF16(r.Float32()*4 - 2))
				}
			}
			if yt == cuda.F32 {
				must(t, s.CopyHtoD(y, cuda.AsBytes(y0)))
			} else {
				h := make([]uint16, len(y0))
				for i, f := range y0 {
					h[i] = cuda.F32ToBF16(f)
				}
				must(t, s.CopyHtoD(y, cuda.AsBytes(h)))
			}
			must(t, lt.GEMM(s, c.T, c.N, c.K, x, w, y, yt, v.acc))
			got := make([]float32, c.T*c.N)
			if yt == cuda.F32 {
				must(t, s.CopyDtoH(cuda.AsBytes(got), y))
			} else {
				h := make([]uint16, c.T*c.N)
				must(t, s.CopyDtoH(cuda.AsBytes(h), y))
				for i, v := range h {
					got[i] = cuda.BF16ToF32(v)
				}
			}
			for i := range got {
				got[i] -= y0[i]
			}
			tol := 1e-4 // f32 accumulation over K terms of size ~0.1
			if yt == cuda.BF16 {
				tol = 1.0 / 64 // y rounded to bf16, relative to |ref| + |y0| <= |ref| + 2
			}
			for i, g := range got {
				if !checked(i / c.N) {
					continue
				}
				if e := math.Abs(float64(g) - ref[i]); e > tol*(math.Abs(ref[i])+math.Abs(float64(y0[i]))+1) {
					t.Fatalf("%d x %d x %d into %s (accumulate %v): y[%d] - y0 = %v, reference %v", c.T, c.N, c.K, yt, v.acc, i, g, ref[i])
				}
			}
		}
	}
}
