package quant

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestQ8_0Layout(t *testing.T) {
	// d = 0.5 (f16 0x3800), q[j] = j - 16.
	b := make([]byte, 34)
	b[0], b[1] = 0x00, 0x38
	for j := range 32 {
		b[2+j] = byte(int8(j - 16))
	}
	got := make([]float32, 32)
	if err := Dequantize(Q8_0, got, b); err != nil {
		t.Fatal(err)
	}
	for j, v := range got {
		if want := float32(j-16) * 0.5; v != want {
			t.Fatalf("element %d = %v, want %v", j, v, want)
		}
	}
}

func TestQ8_0Quantize(t *testing.T) {
	// A block whose amax is 127 has d = 1 and quantises integers exactly;
	// halves round away from zero (roundf).
	x := make([]float32, 32)
	for j := range x {
		x[j] = float32(j - 16)
	}
	x[0], x[1], x[2] = 127, 2.5, -2.5
	b := make([]byte, 34)
	if err := Quantize(Q8_0, b, x); err != nil {
		t.Fatal(err)
	}
	if d := f16(b); d != 1 {
		t.Fatalf("d = %v, want 1", d)
	}
	want := append([]float32(nil), x...)
	want[1], want[2] = 3, -3
	got := make([]float32, 32)
	if err := Dequantize(Q8_0, got, b); err != nil {
		t.Fatal(err)
	}
	for j := range got {
		if got[j] != want[j] {
			t.Errorf("element %d: %v -> %v, want %v", j, x[j], got[j], want[j])
		}
	}
	// An all-zero block has d = 0 and zero quants.
	zero := make([]byte, 34)
	if err := Quantize(Q8_0, zero, make([]float32, 32)); err != nil {
		t.Fatal(err)
	}
	for i, v := range zero {
		if v != 0 {
			t.Fatalf("zero block byte %d = %#x", i, v)
		}
	}
}

// Round trip of random rows: every element within half a step of its input,
// plus 127 times the f16 rounding of d (relative 2^-11).
func TestQ8_0RoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	x := make([]float32, 32*64)
	for i := range x {
		x[i] = float32(r.NormFloat64()) * 0.02
	}
	b := make([]byte, 34*64)
	if err := Quantize(Q8_0, b, x); err != nil {
		t.Fatal(err)
	}
	y := make([]float32, len(x))
	if err := Dequantize(Q8_0, y, b); err != nil {
		t.Fatal(err)
	}
	for blk := 0; blk < 64; blk++ {
		d := f16(b[34*blk:])
		for j := range 32 {
			i := 32*blk + j
			if e := math.Abs(float64(y[i] - x[i])); e > 0.57*float64(d)+1e-9 {
				t.Fatalf("element %d: %v -> %v (d %v)", i, x[i], y[i], d)
			}
		}
	}
}

func TestDotRow(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, ty := range []Type{F32, F16, BF16, Q8_0} {
		for _, n := range []int{0, 32, 96, 256, 544} {
			w := make([]float32, n)
			x := make([]float32, n)
			for i := range w {
				w[i], x[i] = float32(r.NormFloat64()), float32(r.NormFloat64())
			}
			nb, _ := ty.RowBytes(n)
			b := make([]byte, nb)
			if err := Quantize(ty, b, w); err != nil {
				t.Fatal(err)
			}
			deq := make([]float32, n)
			if err := Dequantize(ty, deq, b); err != nil {
				t.Fatal(err)
			}
			var want float64
			for i := range deq {
				want += float64(deq[i]) * float64(x[i])
			}
			got, err := DotRow(ty, b, x)
			if err != nil {
				t.Fatal(err)
			}
			if math.Abs(float64(got)-want) > 1e-4*(1+math.Abs(want)) {
				t.Errorf("%s n=%d: DotRow = %v, want %v", ty, n, got, want)
			}
		}
	}
	if _, err := DotRow(Q8_0, make([]byte, 34), make([]float32, 64)); err == nil {
		t.Error("DotRow with a short row should fail")
	}
}

// Quantize writes every byte of its output: a buffer full of garbage gives
// the same bytes as a zeroed one (the writer reuses its buffers).
func TestQuantizeOverwritesAll(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	x := make([]float32, 4*QK)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	clear(x[QK : QK+64]) // zero sub-blocks and a zero 32-block
	for _, name := range Names() {
		ty, _ := ParseType(name)
		if !ty.CanQuantize() {
			continue
		}
		n, _ := ty.RowBytes(len(x))
		clean, dirty := make([]byte, n), make([]byte, n)
		for i := range dirty {
			dirty[i] = 0xff
		}
		if err := Quantize(ty, clean, x); err != nil {
			t.Fatal(err)
		}
		if err := Quantize(ty, dirty, x); err != nil {
			t.Fatal(err)
		}
		if string(clean) != string(dirty) {
			t.Errorf("%s: output depends on what the buffer held before", name)
		}
	}
}
