package quant

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestF16Exhaustive(t *testing.T) {
	for h := 0; h < 1<<16; h++ {
		f := F16ToF32(uint16(h))
		back := F32ToF16(f)
		if math.IsNaN(float64(f)) {
			if back&0x7c00 != 0x7c00 || back&0x3ff == 0 {
				t.Fatalf("NaN %#04x came back as %#04x", h, back)
			}
			continue
		}
		if back != uint16(h) {
			t.Fatalf("%#04x -> %v -> %#04x", h, f, back)
		}
	}
}

// refF16 rounds x to the nearest binary16 by search, ties to even, from
// the exact values: an oracle for F32ToF16.
func refF16(x float32) uint16 {
	sign := uint16(0)
	v := float64(x)
	if v < 0 || (v == 0 && math.Signbit(v)) {
		sign, v = 0x8000, -v
	}
	val := func(h uint16) float64 {
		if h == 0x7c00 {
			return 65536 // rounding treats infinity as the next step
		}
		return float64(F16ToF32(h))
	}
	lo, hi := uint16(0), uint16(0x7c00)
	for hi-lo > 1 { // largest h with val(h) <= v
		mid := (lo + hi) / 2
		if val(mid) <= v {
			lo = mid
		} else {
			hi = mid
		}
	}
	if v >= 65536 {
		return sign | 0x7c00
	}
	dl, dh := v-val(lo), val(hi)-v
	if dh < dl || (dh == dl && lo&1 == 1) {
		return sign | hi
	}
	return sign | lo
}

func TestF32ToF16Rounding(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	cases := []float32{0, 1, -1, 65504, 65519.99, 65520, 65536, 1e9, 5.96e-8, 2.98e-8, 2.99e-8, 1e-9, 6.1e-5, 6.097e-5,
		1 + 1.0/2048, 1 + 3.0/2048, float32(math.Inf(1)), float32(math.Inf(-1))}
	for i := 0; i < 200000; i++ {
		// Random bit patterns over the interesting exponent range.
		b := r.Uint32()&0x807fffff | (uint32(r.IntN(50)+97) << 23)
		cases = append(cases, math.Float32frombits(b))
	}
	for _, x := range cases {
		if got, want := F32ToF16(x), refF16(x); got != want {
			t.Fatalf("F32ToF16(%g) = %#04x, want %#04x", x, got, want)
		}
	}
	if h := F32ToF16(float32(math.NaN())); h&0x7c00 != 0x7c00 || h&0x3ff == 0 {
		t.Errorf("NaN -> %#04x", h)
	}
}

func TestBF16(t *testing.T) {
	for h := 0; h < 1<<16; h++ {
		f := BF16ToF32(uint16(h))
		if math.IsNaN(float64(f)) {
			continue
		}
		if back := F32ToBF16(f); back != uint16(h) {
			t.Fatalf("%#04x -> %v -> %#04x", h, f, back)
		}
	}
	r := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 200000; i++ {
		b := r.Uint32()
		x := math.Float32frombits(b)
		if math.IsNaN(float64(x)) {
			if h := F32ToBF16(x); !math.IsNaN(float64(BF16ToF32(h))) {
				t.Fatalf("NaN %#08x -> %#04x", b, h)
			}
			continue
		}
		lo := b & 0xffff0000
		v, vl := float64(x), float64(math.Float32frombits(lo))
		vh := float64(math.Float32frombits(lo + 0x10000))
		if lo&0x7fffffff == 0x7f7f0000 { // next step up is infinity
			vh = math.Copysign(math.Pow(2, 128), v)
		}
		want := uint16(lo >> 16)
		dl, dh := math.Abs(v-vl), math.Abs(vh-v)
		if dh < dl || (dh == dl && want&1 == 1) {
			want++
		}
		if got := F32ToBF16(x); got != want {
			t.Fatalf("F32ToBF16(%g) = %#04x, want %#04x", x, got, want)
		}
	}
}
