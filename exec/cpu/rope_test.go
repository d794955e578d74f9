package cpu

import (
	"math"
	"testing"

	"lagc/prep"
)

// refRoPE applies rope with float64 rotations; the angle is float32(pos) *
// inv_freq rounded to float32, as the reference computes it.
func refRoPE(x []float32, pos []int32, T, n, d int, tab *prep.RopeTable) []float64 {
	out := to64(x)
	half := tab.RotaryDim / 2
	for t := 0; t < T; t++ {
		for h := 0; h < n; h++ {
			b := (t*n + h) * d
			for i := 0; i < half; i++ {
				a := float64(float32(float32(pos[t]) * tab.InvFreq[i]))
				c := math.Cos(a) * float64(tab.AttnFactor)
				s := math.Sin(a) * float64(tab.AttnFactor)
				x1, x2 := float64(x[b+i]), float64(x[b+i+half])
				out[b+i] = x1*c - x2*s
				out[b+i+half] = x2*c + x1*s
			}
		}
	}
	return out
}

func TestRoPE(t *testing.T) {
	for _, tc := range []struct {
		name    string
		T, n, d int
		p       prep.RopeParams
	}{
		{"full rotary", 5, 3, 8, prep.RopeParams{RotaryDim: 8, Theta: 1e4}},
		{"partial 0.5", 4, 2, 16, prep.RopeParams{RotaryDim: 8, Theta: 5e5}},
		{"partial, odd passthrough", 3, 3, 10, prep.RopeParams{RotaryDim: 6, Theta: 1e4}},
		{"yarn partial", 6, 4, 16, prep.RopeParams{RotaryDim: 8, Theta: 5e5, Type: "yarn", Factor: 32, OriginalContext: 64}},
		{"many tokens", 70, 2, 4, prep.RopeParams{RotaryDim: 4, Theta: 1e4}},
	} {
		tab, err := prep.NewRopeTable(tc.p)
		if err != nil {
			t.Fatal(err)
		}
		x := randSlice(21, tc.T*tc.n*tc.d, 2)
		pos := make([]int32, tc.T)
		for i := range pos {
			pos[i] = int32(3*i + 1000*(i%2)) // positions need not be consecutive for rope
		}
		out := make([]float32, len(x))
		if err := RoPE(out, x, pos, tc.T, tc.n, tc.d, tab); err != nil {
			t.Fatal(err)
		}
		if d := maxAbsDiff(out, refRoPE(x, pos, tc.T, tc.n, tc.d, tab)); d > 2e-6 {
			t.Errorf("%s: max |diff| = %g", tc.name, d)
		}
		// Channels from RotaryDim on pass through unchanged.
		for i := range x {
			if i%tc.d >= tc.p.RotaryDim && out[i] != x[i] {
				t.Fatalf("%s: pass-through channel %d changed", tc.name, i%tc.d)
			}
		}
		in := append([]float32(nil), x...)
		if err := RoPE(in, in, pos, tc.T, tc.n, tc.d, tab); err != nil {
			t.Fatal(err)
		}
		requireBitwise(t, tc.name+": in place", in, out)
	}
}

func TestRoPEHandComputed(t *testing.T) {
	tab, err := prep.NewRopeTable(prep.RopeParams{RotaryDim: 4, Theta: 1e4})
	if err != nil {
		t.Fatal(err)
	}
	// Head of 6 channels, rotary 4: pairs (0,2) and (1,3); 4 and 5 pass.
	// At position 1, pair 0 turns by 1 rad, pair 1 by 0.01 rad.
	x := []float32{1, 1, 0, 0, 7, -7}
	out := make([]float32, 6)
	if err := RoPE(out, x, []int32{1}, 1, 1, 6, tab); err != nil {
		t.Fatal(err)
	}
	want := []float64{math.Cos(1), math.Cos(0.01), math.Sin(1), math.Sin(0.01), 7, -7}
	if d := maxAbsDiff(out, want); d > 1e-7 {
		t.Fatalf("got %v, want %v", out, want)
	}
	// Position 0 is the identity times the attention factor.
	y, _ := prep.NewRopeTable(prep.RopeParams{RotaryDim: 4, Theta: 1e4, Type: "yarn", Factor: 4, OriginalContext: 16})
	if err := RoPE(out, x, []int32{0}, 1, 1, 6, y); err != nil {
		t.Fatal(err)
	}
	m := float32(0.1*math.Log(4) + 1)
	requireBitwise(t, "position 0", out, []float32{m, m, 0, 0, 7, -7})
}

func TestRoPEErrors(t *testing.T) {
	tab, _ := prep.NewRopeTable(prep.RopeParams{RotaryDim: 8, Theta: 1e4})
	x := make([]float32, 2*4)
	if err := RoPE(x, x, []int32{0, 1}, 2, 1, 4, tab); err == nil {
		t.Error("rotary width 8 > head_dim 4 accepted")
	}
	small, _ := prep.NewRopeTable(prep.RopeParams{RotaryDim: 4, Theta: 1e4})
	if err := RoPE(x, x, []int32{0, -1}, 2, 1, 4, small); err == nil {
		t.Error("negative position accepted")
	}
	if err := RoPE(x, x, []int32{0}, 2, 1, 4, small); err == nil {
		t.Error("short pos accepted")
	}
	if err := RoPE(x, x, []int32{0, 1}, 2, 1, 4, nil); err == nil {
		t.Error("nil table accepted")
	}
}
