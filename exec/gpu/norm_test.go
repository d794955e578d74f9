package gpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"lagc/cuda"
	"lagc/exec/cpu"
	"lagc/lower"
)

// normWeights are float32 weights around 1 (never rounded: norm weights are
// f32 whatever the activation dtype).
func normWeights(r *rand.Rand, n int) []float32 {
	w := randF32(r, n, 0.5)
	for i := range w {
		w[i] += 1
	}
	return w
}

func TestRMSNormGPU(t *testing.T) {
	k, s := gpu(t)
	t.Cleanup(func() { _ = s.Close() }) // an unclosed stream's pinned buffer panics at GC
	r := rand.New(rand.NewPCG(5, 6))
	const eps = 1e-6
	for _, c := range []struct {
		rows, n int
		inPlace bool
	}{{1, 3072, false}, {5, 37, false}, {130, 128, false}, {3, 1000, true}, {2, 4096, false}, {1, 1, false}, {7, 1500, true}, {9, 1024, false}} {
		for _, dt := range DTypes {
			t.Run(fmt.Sprintf("%dx%d-inplace%v/%v", c.rows, c.n, c.inPlace, dt), func(t *testing.T) {
				x := roundTo(dt, randF32(r, c.rows*c.n, 3))
				w := normWeights(r, c.n)
				want := make([]float32, len(x))
				if err := cpu.RMSNorm(want, x, w, c.rows, c.n, eps); err != nil {
					t.Fatal(err)
				}
				dx := upload(t, k, s, dt, x)
				out := dx
				if !c.inPlace {
					out = alloc(t, k, int64(len(x)*dt.Size()))
					poison(t, s, out, int64(len(x)*dt.Size()))
				}
				if err := k.RMSNorm(s, dt, out, dx, upload(t, k, s, cuda.F32, w), c.rows, c.n, eps); err != nil {
					t.Fatal(err)
				}
				checkClose(t, "rms_norm", download(t, s, dt, out, len(x)), want, tolFor(dt))
			})
		}
	}
}

// TestRMSNormUnalignedGPU: rows that are not 16-byte aligned (x and out one
// element past an aligned address) take the element-wise path of both
// kernels; the aligned cases above take the 16-byte one.
func TestRMSNormUnalignedGPU(t *testing.T) {
	k, s := gpu(t)
	t.Cleanup(func() { _ = s.Close() }) // an unclosed stream's pinned buffer panics at GC
	r := rand.New(rand.NewPCG(15, 16))
	const eps = 1e-6
	for _, c := range []struct{ rows, n int }{{72, 128}, {1, 3072}} {
		for _, dt := range DTypes {
			t.Run(fmt.Sprintf("%dx%d/%v", c.rows, c.n, dt), func(t *testing.T) {
				x := roundTo(dt, randF32(r, c.rows*c.n, 3))
				w := normWeights(r, c.n)
				want := make([]float32, len(x))
				if err := cpu.RMSNorm(want, x, w, c.rows, c.n, eps); err != nil {
					t.Fatal(err)
				}
				es := int64(dt.Size())
				dx := upload(t, k, s, dt, append([]float32{0}, x...)).Add(es)
				out := alloc(t, k, int64(len(x)+1)*es).Add(es)
				poison(t, s, out, int64(len(x))*es)
				if err := k.RMSNorm(s, dt, out, dx, upload(t, k, s, cuda.F32, w), c.rows, c.n, eps); err != nil {
					t.Fatal(err)
				}
				checkClose(t, "rms_norm", download(t, s, dt, out, len(x)), want, tolFor(dt))
			})
		}
	}
}

// TestRMSNormCastGPU: bf16 in, f32 out is exact up to float32 rounding (the
// tight tolerance); f32 in, bf16 out costs the output rounding only.
func TestRMSNormCastGPU(t *testing.T) {
	k, s := gpu(t)
	t.Cleanup(func() { _ = s.Close() }) // an unclosed stream's pinned buffer panics at GC
	r := rand.New(rand.NewPCG(7, 8))
	for _, c := range []struct {
		xdt, odt cuda.DType
		rows, n  int
		tol      float64
	}{{cuda.BF16, cuda.F32, 3, 3072, 1e-5}, {cuda.BF16, cuda.F32, 10, 100, 1e-5}, {cuda.F32, cuda.BF16, 4, 2000, tolFor(cuda.BF16)}} {
		t.Run(fmt.Sprintf("%v-to-%v-%dx%d", c.xdt, c.odt, c.rows, c.n), func(t *testing.T) {
			x := roundTo(c.xdt, randF32(r, c.rows*c.n, 2))
			w := normWeights(r, c.n)
			want := make([]float32, len(x))
			if err := cpu.RMSNorm(want, x, w, c.rows, c.n, 1e-5); err != nil {
				t.Fatal(err)
			}
			out := alloc(t, k, int64(len(x)*c.odt.Size()))
			poison(t, s, out, int64(len(x)*c.odt.Size()))
			if err := k.RMSNormCast(s, c.xdt, c.odt, out, upload(t, k, s, c.xdt, x), upload(t, k, s, cuda.F32, w), c.rows, c.n, 1e-5); err != nil {
				t.Fatal(err)
			}
			checkClose(t, "rms_norm", download(t, s, c.odt, out, len(x)), want, c.tol)
		})
	}
}

func TestRMSNormArgs(t *testing.T) {
	k := &Kernels{}
	p := cuda.DevicePtr(256)
	for name, err := range map[string]error{
		"rows 0":    k.RMSNorm(nil, cuda.F32, p, p, p, 0, 8, 1e-6),
		"eps < 0":   k.RMSNorm(nil, cuda.F32, p, p, p, 1, 8, -1),
		"null w":    k.RMSNorm(nil, cuda.F32, p, p, 0, 1, 8, 1e-6),
		"bad odt":   k.RMSNormCast(nil, cuda.F32, cuda.U8, p, p, p, 1, 8, 1e-6),
		"n too big": k.RMSNorm(nil, cuda.F32, p, p, p, 1, 1<<40, 1e-6),
	} {
		if err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// TestRMSNormQ8XGPU: the fused norm writes the output rms_norm writes and
// the int8 groups and scales q8x_quantize then makes of it, bit for bit:
// one row or several (a batch), the block and the warp kernel, their
// 16-byte and element-wise paths (x and out one element off alignment),
// groups of zeros and a row of NaNs.
func TestRMSNormQ8XGPU(t *testing.T) {
	k, s := gpu(t)
	r := rand.New(rand.NewPCG(25, 26))
	const eps = 1e-6
	type tc struct {
		xdt, odt  cuda.DType
		rows, n   int
		unaligned bool
	}
	var cases []tc
	for _, dt := range []cuda.DType{cuda.BF16, cuda.F32} {
		for _, n := range []int{3072, 1024, 256} {
			for _, rows := range []int{1, 2, 3, 5, 8} {
				cases = append(cases, tc{dt, dt, rows, n, false})
			}
			cases = append(cases, tc{dt, dt, 3, n, true})
		}
	}
	cases = append(cases, tc{cuda.F32, cuda.BF16, 4, 3072, false}, tc{cuda.BF16, cuda.F32, 2, 1024, false})
	for _, c := range cases {
		t.Run(fmt.Sprintf("%v-to-%v-%dx%d-unaligned%v", c.xdt, c.odt, c.rows, c.n, c.unaligned), func(t *testing.T) {
			x := roundTo(c.xdt, randF32(r, c.rows*c.n, 3))
			for row := 0; row < c.rows; row++ {
				clear(x[row*c.n+64 : row*c.n+96]) // a group of zeros
			}
			if c.rows > 2 {
				x[c.n+5] = float32(math.NaN()) // row 1: NaN everywhere
			}
			off := int64(0)
			if c.unaligned {
				off = int64(c.odt.Size())
			}
			dx := upload(t, k, s, c.xdt, x)
			if c.unaligned {
				dx = upload(t, k, s, c.xdt, append([]float32{0}, x...)).Add(int64(c.xdt.Size()))
			}
			w := upload(t, k, s, cuda.F32, normWeights(r, c.n))
			outBytes, qBytes := int64(c.rows*c.n*c.odt.Size()), lower.Q8XBytes(c.rows, c.n)
			run := func(fused bool, fill byte) (out, xq []byte) {
				o := alloc(t, k, outBytes+off).Add(off)
				q := alloc(t, k, qBytes)
				for _, b := range []struct {
					p cuda.DevicePtr
					n int64
				}{{o, outBytes}, {q, qBytes}} {
					if err := s.Memset8(b.p, fill, b.n); err != nil {
						t.Fatal(err)
					}
				}
				var err error
				if fused {
					err = k.RMSNormQ8X(s, c.xdt, c.odt, o, dx, w, q, c.rows, c.n, eps)
				} else if err = k.RMSNormCast(s, c.xdt, c.odt, o, dx, w, c.rows, c.n, eps); err == nil {
					err = k.Q8XQuantize(s, c.odt, o, q, c.rows, c.n)
				}
				if err != nil {
					t.Fatal(err)
				}
				out, xq = make([]byte, outBytes), make([]byte, qBytes)
				if err := cuda.Download(s, out, o); err != nil {
					t.Fatal(err)
				}
				if err := cuda.Download(s, xq, q); err != nil {
					t.Fatal(err)
				}
				return out, xq
			}
			// Different fills: a byte one of them leaves unwritten differs.
			gotOut, gotQ := run(true, 0xFF)
			wantOut, wantQ := run(false, 0x00)
			if i := firstByteDiff(gotOut, wantOut); i >= 0 {
				t.Fatalf("output byte %d: fused %#02x, rms_norm %#02x", i, gotOut[i], wantOut[i])
			}
			scales := qBytes - int64(16*c.rows*c.n/32)
			for _, part := range []struct {
				what          string
				lo, hi, group int64 // bytes, and bytes a group
			}{{"int8 values", 0, int64(c.rows * c.n), 32}, {"scales", scales, qBytes, 16}} {
				if i := firstByteDiff(gotQ[part.lo:part.hi], wantQ[part.lo:part.hi]); i >= 0 {
					t.Fatalf("%s: byte %d (group %d): fused %#02x, q8x_quantize %#02x", part.what, i, int64(i)/part.group,
						gotQ[part.lo+int64(i)], wantQ[part.lo+int64(i)])
				}
			}
		})
	}
}

// firstByteDiff is the first index where a and b differ, or -1.
func firstByteDiff(a, b []byte) int {
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}
