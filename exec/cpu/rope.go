package cpu

import (
	"fmt"

	"lagc/prep"
)

// RoPE applies rotary position embedding to x [T,n,d] at positions pos [T],
// writing out (which may alias x): NeoX rotate-half on the first
// tab.RotaryDim channels of every head, channel i paired with i + r/2;
// channels from r on pass through. As transformers computes it: angle =
// float32(pos) * inv_freq in float32, cos and sin times the attention factor,
// out = x*cos + rotate_half(x)*sin with each product rounded to float32.
func RoPE(out, x []float32, pos []int32, T, n, d int, tab *prep.RopeTable) error {
	if err := checkRoPE(out, x, pos, T, n, d, tab); err != nil {
		return err
	}
	rope(out, x, pos, T, n, d, tab)
	return nil
}

// checkRoPE checks RoPE's arguments.
func checkRoPE(out, x []float32, pos []int32, T, n, d int, tab *prep.RopeTable) error {
	if tab == nil {
		return fmt.Errorf("cpu.RoPE: no rope table")
	}
	if err := checkDims("RoPE", dim{"T", T}, dim{"n", n}, dim{"d", d}); err != nil {
		return err
	}
	r := tab.RotaryDim
	if r <= 0 || r%2 != 0 || r > d || len(tab.InvFreq) != r/2 {
		return fmt.Errorf("cpu.RoPE: rotary width %d (table of %d frequencies) does not fit head_dim %d", r, len(tab.InvFreq), d)
	}
	if err := checkLen("RoPE", "pos", len(pos), T); err != nil {
		return err
	}
	if err := checkLen("RoPE", "x", len(x), T, n, d); err != nil {
		return err
	}
	if err := checkLen("RoPE", "out", len(out), T, n, d); err != nil {
		return err
	}
	for t, p := range pos {
		if p < 0 {
			return fmt.Errorf("cpu.RoPE: position %d (at %d) is negative", p, t)
		}
	}
	return nil
}

// rope is RoPE on checked arguments.
func rope(out, x []float32, pos []int32, T, n, d int, tab *prep.RopeTable) {
	r := tab.RotaryDim
	half := r / 2
	parallelFor(T, n*d+half*32, func(lo, hi int) {
		cs := make([]float32, 2*half)
		cos, sin := cs[:half], cs[half:]
		for t := lo; t < hi; t++ {
			tab.Angles(cos, sin, pos[t])
			for h := 0; h < n; h++ {
				xr := x[(t*n+h)*d : (t*n+h+1)*d]
				or := out[(t*n+h)*d : (t*n+h+1)*d]
				for i := 0; i < half; i++ {
					x1, x2 := xr[i], xr[i+half]
					c, s := cos[i], sin[i]
					or[i] = float32(x1*c) - float32(x2*s)
					or[i+half] = float32(x2*c) + float32(x1*s)
				}
				if &or[0] != &xr[0] {
					copy(or[r:], xr[r:])
				}
			}
		}
	})
}
