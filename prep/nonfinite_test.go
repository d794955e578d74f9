package prep

import (
	"math"
	"testing"
)

func TestCountNonFinite(t *testing.T) {
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	for _, tc := range []struct {
		d                 []float32
		nans, infs, first int
	}{
		{nil, 0, 0, -1},
		{[]float32{1, -2, math.MaxFloat32}, 0, 0, -1},
		{[]float32{1, nan, -inf, nan}, 2, 1, 1},
		{[]float32{-inf, 0}, 0, 1, 0},
	} {
		n, i, f := CountNonFinite(tc.d)
		if n != tc.nans || i != tc.infs || f != tc.first {
			t.Errorf("CountNonFinite(%v) = %d, %d, %d; want %d, %d, %d", tc.d, n, i, f, tc.nans, tc.infs, tc.first)
		}
	}
}
