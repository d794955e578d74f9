package cpu

import (
	"math"
	"testing"
)

func TestRMSNormHandComputed(t *testing.T) {
	// mean(x^2) = (1+4+9+16)/4 = 7.5; out = w * x / sqrt(7.5 + eps).
	x := []float32{1, 2, 3, 4}
	w := []float32{1, 0.5, 2, -1}
	out := make([]float32, 4)
	if err := RMSNorm(out, x, w, 1, 4, 0); err != nil {
		t.Fatal(err)
	}
	r := 1 / math.Sqrt(7.5)
	want := []float64{1 * r, 0.5 * 2 * r, 2 * 3 * r, -1 * 4 * r}
	if d := maxAbsDiff(out, want); d > 1e-6 {
		t.Fatalf("out = %v, want %v", out, want)
	}
	// Zero row: eps keeps it finite, and no "+1" is added to w.
	if err := RMSNorm(out, make([]float32, 4), w, 1, 4, 1e-6); err != nil {
		t.Fatal(err)
	}
	for i, v := range out {
		if v != 0 {
			t.Fatalf("zero input gave out[%d] = %v", i, v)
		}
	}
}

func TestRMSNorm(t *testing.T) {
	for _, tc := range []struct {
		rows, n int
		eps     float32
	}{{1, 1, 1e-6}, {3, 7, 1e-6}, {5, 16, 1e-5}, {12, 33, 1e-6}, {200, 128, 1e-6}} {
		x := randSlice(5, tc.rows*tc.n, 3)
		w := randSlice(6, tc.n, 2)
		out := make([]float32, len(x))
		if err := RMSNorm(out, x, w, tc.rows, tc.n, tc.eps); err != nil {
			t.Fatal(err)
		}
		want := make([]float64, len(x))
		for r := 0; r < tc.rows; r++ {
			ss := 0.0
			for i := 0; i < tc.n; i++ {
				v := float64(x[r*tc.n+i])
				ss += v * v
			}
			inv := 1 / math.Sqrt(ss/float64(tc.n)+float64(tc.eps))
			for i := 0; i < tc.n; i++ {
				want[r*tc.n+i] = float64(w[i]) * float64(x[r*tc.n+i]) * inv
			}
		}
		if d := maxAbsDiff(out, want); d > 4e-6 {
			t.Errorf("%+v: max |diff| = %g", tc, d)
		}
		// In place gives the same bits.
		in := append([]float32(nil), x...)
		if err := RMSNorm(in, in, w, tc.rows, tc.n, tc.eps); err != nil {
			t.Fatal(err)
		}
		requireBitwise(t, "in place", in, out)
	}
}

func TestRMSNormErrors(t *testing.T) {
	if err := RMSNorm(make([]float32, 4), make([]float32, 4), make([]float32, 3), 1, 4, 1e-6); err == nil {
		t.Error("short weight accepted")
	}
	if err := RMSNorm(make([]float32, 4), make([]float32, 5), make([]float32, 4), 1, 4, 1e-6); err == nil {
		t.Error("long x accepted")
	}
	if err := RMSNorm(nil, nil, nil, 0, 4, 1e-6); err == nil {
		t.Error("zero rows accepted")
	}
}
