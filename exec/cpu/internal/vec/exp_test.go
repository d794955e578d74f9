package vec

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// sameFloat: equal bits, or both NaN (payloads may differ).
func sameFloat(a, b float32) bool {
	return math.Float32bits(a) == math.Float32bits(b) || a != a && b != b
}

// expInputs are float32 values where exp is interesting: zeros, the
// subnormal and underflow range of float64 results (-745 < x < -708), the
// overflow edge, the specials, and every 4093rd bit pattern (all signs and
// exponents).
func expInputs() []float32 {
	v := []float32{0, float32(math.Copysign(0, -1)), 1, -1, 0.5, -0.5, 1e-30, -1e-30,
		float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), -float32(math.NaN()),
		math.MaxFloat32, -math.MaxFloat32, math.SmallestNonzeroFloat32, -math.SmallestNonzeroFloat32,
		709.78, 709.79, 710, -708.39, -708.4, -744.4, -745.13, -745.14, -746, -1022 * math.Ln2}
	for x := float32(-760); x < 720; x += 0.37 {
		v = append(v, x)
	}
	for b := uint64(0); b < 1<<32; b += 4093 {
		v = append(v, math.Float32frombits(uint32(b)))
	}
	return v
}

func TestExpShifted(t *testing.T) {
	in := expInputs()
	paths(t, func(t *testing.T) {
		for _, m := range []float32{0, 3.5, -2, 700, float32(math.Inf(1))} {
			s := append([]float32(nil), in...)
			ExpShifted(s, m)
			for i, x := range in {
				want := float32(math.Exp(float64(x - m)))
				if !sameFloat(s[i], want) {
					t.Fatalf("exp(%g - %g) = %g (%#x), math.Exp gives %g (%#x)", x, m, s[i], math.Float32bits(s[i]), want, math.Float32bits(want))
				}
			}
		}
	})
}

// TestExp64Float64: exp64 on float64 arguments that float32 ones never
// reach (through SiLU's float64 v: -v is exact), including the whole
// subnormal range of results.
func TestExp64Float64(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 5))
	g := make([]float32, 0, 1<<16)
	for range cap(g) {
		g = append(g, float32(r.Float64()*1500-750))
	}
	g = append(g, expInputs()...)
	u := make([]float32, len(g))
	for i := range u {
		u[i] = float32(r.NormFloat64())
	}
	paths(t, func(t *testing.T) {
		y := make([]float32, len(g))
		SiLUMul(y, g, u)
		for i := range y {
			if want := SiLU(g[i]) * u[i]; !sameFloat(y[i], want) {
				t.Fatalf("silu(%g) * %g = %g (%#x), scalar %g (%#x)", g[i], u[i], y[i], math.Float32bits(y[i]), want, math.Float32bits(want))
			}
		}
	})
}

func TestDivide(t *testing.T) {
	in := expInputs()
	paths(t, func(t *testing.T) {
		for _, d := range []float64{1, 3, 0.1, 1e-300, 1e300, 7.000000000000001, math.Inf(1)} {
			s := append([]float32(nil), in...)
			Divide(s, d)
			for i, x := range in {
				if want := float32(float64(x) / d); !sameFloat(s[i], want) {
					t.Fatalf("%g / %g = %g, want %g", x, d, s[i], want)
				}
			}
		}
	})
}

// TestElementwiseLengths: every length 0..40 (whole vectors and masked
// tails), no element outside the slices written.
func TestElementwiseLengths(t *testing.T) {
	paths(t, func(t *testing.T) {
		for n := 0; n <= 40; n++ {
			const guard = float32(-12345)
			buf := make([]float32, n+2)
			for i := range buf {
				buf[i] = guard
			}
			s := buf[1 : n+1]
			for i := range s {
				s[i] = float32(i) - 20
			}
			ExpShifted(s, 1)
			Divide(s, 2)
			SiLUMul(s, s, s)
			if buf[0] != guard || buf[n+1] != guard {
				t.Fatalf("n=%d: wrote outside the slice: %g, %g", n, buf[0], buf[n+1])
			}
			for i, v := range s {
				x := float32(float64(float32(math.Exp(float64(float32(i)-20-1)))) / 2)
				if want := SiLU(x) * x; !sameFloat(v, want) {
					t.Fatalf("n=%d: element %d = %g, want %g", n, i, v, want)
				}
			}
		}
	})
}

func FuzzExpShifted(f *testing.F) {
	f.Add([]byte{0, 0, 0x80, 0x3f, 0, 0, 0x30, 0xc4}, float32(0))
	f.Fuzz(func(t *testing.T, data []byte, m float32) {
		in := make([]float32, len(data)/4)
		for i := range in {
			in[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:]))
		}
		s := append([]float32(nil), in...)
		ExpShifted(s, m)
		g := append([]float32(nil), in...)
		SiLUMul(g, g, in)
		for i, x := range in {
			if want := float32(math.Exp(float64(x - m))); !sameFloat(s[i], want) {
				t.Fatalf("exp(%g - %g) = %g, want %g", x, m, s[i], want)
			}
			if want := SiLU(x) * x; !sameFloat(g[i], want) {
				t.Fatalf("silu(%g) * %g = %g, want %g", x, x, g[i], want)
			}
		}
	})
}

// BenchmarkExpShifted: a softmax's numerators over 512 scores.
func BenchmarkExpShifted(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	x := randFloats(r, 512)
	s := make([]float32, len(x))
	for ks := best(); ks >= fmaKernels; ks-- {
		b.Run(fmt.Sprint(ks), func(b *testing.B) {
			withKernels(ks, func() {
				for b.Loop() {
					copy(s, x)
					ExpShifted(s, 3)
				}
			})
		})
	}
}
