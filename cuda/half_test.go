package cuda

import (
	"math"
	"testing"
)

func TestF16Known(t *testing.T) {
	for _, c := range []struct {
		f float32
		h uint16
	}{
		{0, 0x0000}, {float32(math.Copysign(0, -1)), 0x8000}, {1, 0x3c00}, {-2, 0xc000},
		{65504, 0x7bff}, {65520, 0x7c00}, // max finite; halfway to 2^16 rounds to inf
		{float32(math.Inf(1)), 0x7c00}, {float32(math.Inf(-1)), 0xfc00},
		{5.960464477539063e-08, 0x0001},                                // smallest subnormal 2^-24
		{2.98023223876953125e-08, 0x0000},                              // 2^-25: tie, rounds to even (zero)
		{3.0e-08, 0x0001},                                              // just above the tie
		{6.103515625e-05, 0x0400},                                      // smallest normal
		{0.1, 0x2e66}, {1.0009765625, 0x3c01}, {1.00048828125, 0x3c00}, // tie to even
		{1.00146484375, 0x3c02}, // tie, odd below: rounds up
	} {
		if got := F32ToF16(c.f); got != c.h {
			t.Errorf("F32ToF16(%g) = %#04x want %#04x", c.f, got, c.h)
		}
	}
	if h := F32ToF16(float32(math.NaN())); h&0x7c00 != 0x7c00 || h&0x3ff == 0 {
		t.Errorf("NaN -> %#04x", h)
	}
}

// TestF16Exhaustive: every f16 widens and narrows back to itself, and the
// midpoint between each pair of neighbours rounds to the even one.
func TestF16Exhaustive(t *testing.T) {
	for h := 0; h < 1<<16; h++ {
		f := F16ToF32(uint16(h))
		if f != f { // NaN
			if h&0x7c00 != 0x7c00 || h&0x3ff == 0 {
				t.Fatalf("%#04x widened to NaN", h)
			}
			continue
		}
		if back := F32ToF16(f); back != uint16(h) {
			t.Fatalf("%#04x -> %g -> %#04x", h, f, back)
		}
		if h&0x7fff >= 0x7bff { // no finite upper neighbour
			continue
		}
		g := F16ToF32(uint16(h + 1))
		mid := float32((float64(f) + float64(g)) / 2) // exact in f32
		want := uint16(h)
		if h&1 == 1 {
			want = uint16(h + 1)
		}
		if got := F32ToF16(mid); got != want {
			t.Fatalf("midpoint of %#04x and %#04x (%g) -> %#04x want %#04x", h, h+1, mid, got, want)
		}
	}
}

func TestBF16(t *testing.T) {
	for _, c := range []struct {
		f float32
		h uint16
	}{
		{1, 0x3f80}, {-1, 0xbf80}, {0, 0}, {float32(math.Inf(1)), 0x7f80},
		{math.Float32frombits(0x3f808000), 0x3f80}, // tie, even below
		{math.Float32frombits(0x3f818000), 0x3f82}, // tie, odd below
		{math.Float32frombits(0x3f808001), 0x3f81},
		{math.MaxFloat32, 0x7f80}, // rounds up to inf
	} {
		if got := F32ToBF16(c.f); got != c.h {
			t.Errorf("F32ToBF16(%g) = %#04x want %#04x", c.f, got, c.h)
		}
	}
	for h := 0; h < 1<<16; h++ {
		f := BF16ToF32(uint16(h))
		if f != f {
			if F32ToBF16(f)&0x7f80 != 0x7f80 || F32ToBF16(f)&0x7f == 0 {
				t.Fatalf("NaN %#04x not kept NaN", h)
			}
			continue
		}
		if F32ToBF16(f) != uint16(h) {
			t.Fatalf("%#04x does not round-trip", h)
		}
	}
}
