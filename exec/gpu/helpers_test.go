package gpu

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"lagc/cuda"
	"lagc/cuda/cudatest"
)

// gpu gives a test the device and kernels, or skips (fails with
// LAGC_REQUIRE_GPU=1) where CUDA cannot run.
func gpu(t testing.TB) (*Kernels, *cuda.Stream) {
	t.Helper()
	dev := cudatest.Device(t)
	s, err := dev.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	// An unclosed stream's pinned argument buffer panics when collected.
	t.Cleanup(func() { _ = s.Close() })
	return NewKernels(dev), s
}

// randF32 returns n values uniform in [-scale, scale).
func randF32(r *rand.Rand, n int, scale float32) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = (r.Float32()*2 - 1) * scale
	}
	return v
}

// roundTo rounds v through dtype dt (bf16 loses mantissa bits), so the CPU
// reference sees exactly the values the GPU does.
func roundTo(dt cuda.DType, v []float32) []float32 {
	out := make([]float32, len(v))
	for i, x := range v {
		switch dt {
		case cuda.BF16:
			out[i] = cuda.BF16ToF32(cuda.F32ToBF16(x))
		case cuda.F16:
			out[i] = cuda.F16ToF32(cuda.F32ToF16(x))
		default:
			out[i] = x
		}
	}
	return out
}

// upload copies v to a new device buffer stored as dtype dt.
func upload(t testing.TB, k *Kernels, s *cuda.Stream, dt cuda.DType, v []float32) cuda.DevicePtr {
	t.Helper()
	p := alloc(t, k, int64(len(v)*dt.Size()))
	uploadTo(t, s, p, dt, v)
	return p
}

// uploadTo copies v, converted to dt, to the device buffer at p.
func uploadTo(t testing.TB, s *cuda.Stream, p cuda.DevicePtr, dt cuda.DType, v []float32) {
	t.Helper()
	var bytes []byte
	switch dt {
	case cuda.F32:
		bytes = cuda.AsBytes(v)
	case cuda.BF16:
		h := make([]uint16, len(v))
		for i, x := range v {
			h[i] = cuda.F32ToBF16(x)
		}
		bytes = cuda.AsBytes(h)
	case cuda.F16:
		h := make([]uint16, len(v))
		for i, x := range v {
			h[i] = cuda.F32ToF16(x)
		}
		bytes = cuda.AsBytes(h)
	default:
		t.Fatalf("upload: unsupported dtype %v", dt)
	}
	if err := s.CopyHtoD(p, bytes); err != nil {
		t.Fatal(err)
	}
}

// uploadI32 copies v to a new device buffer.
func uploadI32(t testing.TB, k *Kernels, s *cuda.Stream, v []int32) cuda.DevicePtr {
	t.Helper()
	p := alloc(t, k, int64(4*len(v)))
	if err := cuda.Upload(s, p, v); err != nil {
		t.Fatal(err)
	}
	return p
}

// alloc allocates n bytes (at least 4), freed when the test ends. The bytes
// are not initialised: poison them where an unwritten output must fail.
func alloc(t testing.TB, k *Kernels, n int64) cuda.DevicePtr {
	t.Helper()
	if n < 4 {
		n = 4
	}
	p, err := k.Dev.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.Dev.Free(p) })
	return p
}

// poison fills a buffer of n bytes with 0xFF (NaN in f32, bf16 and f16).
func poison(t testing.TB, s *cuda.Stream, p cuda.DevicePtr, n int64) {
	t.Helper()
	if err := s.Memset8(p, 0xFF, n); err != nil {
		t.Fatal(err)
	}
}

// download reads n values of dtype dt back as float32.
func download(t *testing.T, s *cuda.Stream, dt cuda.DType, p cuda.DevicePtr, n int) []float32 {
	t.Helper()
	out := make([]float32, n)
	switch dt {
	case cuda.F32:
		if err := cuda.Download(s, out, p); err != nil {
			t.Fatal(err)
		}
	case cuda.BF16, cuda.F16:
		h := make([]uint16, n)
		if err := cuda.Download(s, h, p); err != nil {
			t.Fatal(err)
		}
		for i, x := range h {
			if dt == cuda.BF16 {
				out[i] = cuda.BF16ToF32(x)
			} else {
				out[i] = cuda.F16ToF32(x)
			}
		}
	default:
		t.Fatalf("download: unsupported dtype %v", dt)
	}
	return out
}

// tolFor is the relative tolerance (||got-want|| / ||want||) for a dtype:
// f32 kernels land far under 1e-5; bf16 storage of the output costs ~4e-3.
func tolFor(dt cuda.DType) float64 {
	if dt == cuda.F32 {
		return 1e-5
	}
	return 1.5e-2
}

// checkClose fails unless got matches want within tol in relative L2 norm,
// and every element is finite.
func checkClose(t *testing.T, what string, got, want []float32, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: got %d values, want %d", what, len(got), len(want))
	}
	var num, den float64
	worst, wi := 0.0, 0
	for i := range got {
		g, w := float64(got[i]), float64(want[i])
		if math.IsNaN(g) || math.IsInf(g, 0) {
			t.Fatalf("%s: element %d is %v (want %v): unwritten or overflowed", what, i, g, w)
		}
		d := g - w
		num += d * d
		den += w * w
		if math.Abs(d) > worst {
			worst, wi = math.Abs(d), i
		}
	}
	rel := math.Sqrt(num / math.Max(den, 1e-30))
	if rel > tol {
		t.Fatalf("%s: relative error %.3g > %.3g (worst |diff| %.4g at %d: got %v want %v)", what, rel, tol, worst, wi, got[wi], want[wi])
	}
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// downloadBytes reads n bytes at p back, as stored.
func downloadBytes(t testing.TB, s *cuda.Stream, p cuda.DevicePtr, n int64) []byte {
	t.Helper()
	out := make([]byte, n)
	if err := cuda.Download(s, out, p); err != nil {
		t.Fatal(err)
	}
	return out
}

// sameBits reports whether a equals b bit for bit (NaNs included).
func sameBits(a, b []float32) bool {
	return slices.EqualFunc(a, b, func(x, y float32) bool { return math.Float32bits(x) == math.Float32bits(y) })
}

// checkBits fails unless got equals want bit for bit (NaNs included).
func checkBits(t *testing.T, what string, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: got %d values, want %d", what, len(got), len(want))
	}
	diff, first := 0, -1
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			if first < 0 {
				first = i
			}
			diff++
		}
	}
	if diff > 0 {
		t.Fatalf("%s: %d of %d values differ, the first at %d: %v against %v", what, diff, len(got), first, got[first], want[first])
	}
}
