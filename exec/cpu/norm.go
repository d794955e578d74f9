package cpu

import "math"

// RMSNorm computes out = w * (x / sqrt(mean(x^2) + eps)) over the last axis
// of x viewed as [rows, n], as transformers' LagunaRMSNorm does in float32:
// no "+1" on w. Per-head q/k norm is the same call over [T*heads, d].
// The mean of squares is accumulated in float64; out may alias x.
func RMSNorm(out, x, w []float32, rows, n int, eps float32) error {
	if err := checkDims("RMSNorm", dim{"rows", rows}, dim{"n", n}); err != nil {
		return err
	}
	if err := checkLen("RMSNorm", "x", len(x), rows, n); err != nil {
		return err
	}
	if err := checkLen("RMSNorm", "w", len(w), n); err != nil {
		return err
	}
	if err := checkLen("RMSNorm", "out", len(out), rows, n); err != nil {
		return err
	}
	parallelFor(rows, 4*n, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			xr := x[r*n : r*n+n]
			or := out[r*n : r*n+n]
			var ss float64
			for _, v := range xr {
				ss += float64(v) * float64(v)
			}
			variance := float32(ss / float64(n))
			inv := float32(1 / math.Sqrt(float64(variance+eps)))
			for i, v := range xr {
				or[i] = w[i] * float32(v*inv)
			}
		}
	})
	return nil
}
