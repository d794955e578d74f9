package gpu

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"lagc/cuda"
	"lagc/exec/cpu"
)

func TestElementwiseGPU(t *testing.T) {
	k, s := gpu(t)
	t.Cleanup(func() { _ = s.Close() }) // an unclosed stream's pinned buffer panics at GC
	r := rand.New(rand.NewPCG(17, 18))
	type op struct {
		name string
		cpu  func(out, a, b []float32) error
		gpu  func(dt cuda.DType, out, a, b cuda.DevicePtr, n int) error
	}
	ops := []op{
		{"silu", func(out, a, _ []float32) error { return cpu.SiLU(out, a) },
			func(dt cuda.DType, out, a, _ cuda.DevicePtr, n int) error { return k.SiLU(s, dt, out, a, n) }},
		{"mul", cpu.Mul, func(dt cuda.DType, out, a, b cuda.DevicePtr, n int) error { return k.Mul(s, dt, out, a, b, n) }},
		{"add", cpu.Add, func(dt cuda.DType, out, a, b cuda.DevicePtr, n int) error { return k.Add(s, dt, out, a, b, n) }},
	}
	for _, o := range ops {
		for _, n := range []int{1, 63, 1000, 70001} {
			for _, dt := range DTypes {
				t.Run(fmt.Sprintf("%s-%d/%v", o.name, n, dt), func(t *testing.T) {
					a := roundTo(dt, randF32(r, n, 8))
					b := roundTo(dt, randF32(r, n, 8))
					want := make([]float32, n)
					if err := o.cpu(want, a, b); err != nil {
						t.Fatal(err)
					}
					out := alloc(t, k, int64(n*dt.Size()))
					poison(t, s, out, int64(n*dt.Size()))
					if err := o.gpu(dt, out, upload(t, k, s, dt, a), upload(t, k, s, dt, b), n); err != nil {
						t.Fatal(err)
					}
					checkClose(t, o.name, download(t, s, dt, out, n), want, tolFor(dt))
				})
			}
		}
	}
}

// TestSwiGLUGPU: silu(a)*b over a fused gate|up buffer (ld = 2n) and over
// separate buffers (ld = n), against cpu.SiLU then cpu.Mul.
func TestSwiGLUGPU(t *testing.T) {
	k, s := gpu(t)
	t.Cleanup(func() { _ = s.Close() }) // an unclosed stream's pinned buffer panics at GC
	r := rand.New(rand.NewPCG(19, 20))
	for _, c := range []struct {
		rows, n int
		fused   bool
	}{{3, 37, true}, {1, 1024, true}, {130, 100, false}, {2, 1, true}} {
		for _, dt := range DTypes {
			t.Run(fmt.Sprintf("%dx%d-fused%v/%v", c.rows, c.n, c.fused, dt), func(t *testing.T) {
				gu := roundTo(dt, randF32(r, c.rows*2*c.n, 6))
				a := make([]float32, c.rows*c.n)
				b := make([]float32, c.rows*c.n)
				for i := 0; i < c.rows; i++ {
					copy(a[i*c.n:(i+1)*c.n], gu[i*2*c.n:])
					copy(b[i*c.n:(i+1)*c.n], gu[i*2*c.n+c.n:])
				}
				want := make([]float32, len(a))
				if err := cpu.SiLU(want, a); err != nil {
					t.Fatal(err)
				}
				if err := cpu.Mul(want, want, b); err != nil {
					t.Fatal(err)
				}
				var da, db cuda.DevicePtr
				ld := c.n
				if c.fused {
					da = upload(t, k, s, dt, gu)
					db = da.Add(int64(c.n * dt.Size()))
					ld = 2 * c.n
				} else {
					da, db = upload(t, k, s, dt, a), upload(t, k, s, dt, b)
				}
				out := alloc(t, k, int64(len(a)*dt.Size()))
				poison(t, s, out, int64(len(a)*dt.Size()))
				if err := k.SwiGLU(s, dt, out, da, db, c.rows, c.n, ld); err != nil {
					t.Fatal(err)
				}
				checkClose(t, "swiglu", download(t, s, dt, out, len(a)), want, tolFor(dt))
			})
		}
	}
}

func TestElementwiseArgs(t *testing.T) {
	k := &Kernels{}
	p := cuda.DevicePtr(256)
	for name, err := range map[string]error{
		"silu n 0":      k.SiLU(nil, cuda.F32, p, p, 0),
		"mul null":      k.Mul(nil, cuda.F32, p, 0, p, 4),
		"add dtype":     k.Add(nil, cuda.I8, p, p, p, 4),
		"swiglu ld < n": k.SwiGLU(nil, cuda.F32, p, p, p, 2, 8, 4),
		"swiglu rows 0": k.SwiGLU(nil, cuda.F32, p, p, p, 0, 8, 0),
	} {
		if err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
