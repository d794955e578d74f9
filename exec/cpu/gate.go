package cpu

import (
	"fmt"
	"math"
)

// SoftplusGate computes out = x * softplus(g), the attention output gate.
// x is [T,nh,d]; g is [T,G] with G = nh (per-head: one gate per head,
// broadcast over its d channels) or G = nh*d (per-element). out may alias x.
func SoftplusGate(out, x, g []float32, T, nh, d, G int) error {
	if err := checkSoftplusGate(out, x, g, T, nh, d, G); err != nil {
		return err
	}
	softplusGate(out, x, g, T, nh, d, G)
	return nil
}

// checkSoftplusGate checks SoftplusGate's arguments.
func checkSoftplusGate(out, x, g []float32, T, nh, d, G int) error {
	if err := checkDims("SoftplusGate", dim{"T", T}, dim{"nh", nh}, dim{"d", d}); err != nil {
		return err
	}
	if G != nh && G != nh*d {
		return fmt.Errorf("cpu.SoftplusGate: gate width %d is neither nh = %d (per-head) nor nh*d = %d (per-element)", G, nh, nh*d)
	}
	if err := checkLen("SoftplusGate", "x", len(x), T, nh, d); err != nil {
		return err
	}
	if err := checkLen("SoftplusGate", "g", len(g), T, G); err != nil {
		return err
	}
	return checkLen("SoftplusGate", "out", len(out), T, nh, d)
}

// softplusGate is SoftplusGate on checked arguments.
func softplusGate(out, x, g []float32, T, nh, d, G int) {
	perHead := G == nh && G != nh*d // d == 1 makes the two the same
	for t := 0; t < T; t++ {
		xr := x[t*nh*d : (t+1)*nh*d]
		or := out[t*nh*d : (t+1)*nh*d]
		gr := g[t*G : (t+1)*G]
		if perHead {
			for h := 0; h < nh; h++ {
				s := Softplus(gr[h])
				for c := h * d; c < (h+1)*d; c++ {
					or[c] = xr[c] * s
				}
			}
			continue
		}
		for c := range xr {
			or[c] = xr[c] * Softplus(gr[c])
		}
	}
}

// Softplus is log(1 + exp(x)) as torch computes it with beta 1 and threshold
// 20: x itself above 20, else log1p(exp(x)) (in float64, which neither
// overflows nor loses small values here).
func Softplus(x float32) float32 {
	if x > 20 {
		return x
	}
	return float32(math.Log1p(math.Exp(float64(x))))
}
