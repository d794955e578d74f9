package cpu

import (
	"math"
	"testing"
)

func TestSoftplus(t *testing.T) {
	for _, tc := range []struct {
		x    float32
		want float64
	}{
		{0, math.Ln2},
		{1, 1.3132616875182228},
		{-1, 0.31326168751822286},
		{19.5, 19.500000003380},
		{20, 20.000000002061}, // below the threshold: log1p(exp(20)), rounds to 20
		{25, 25},              // above: x itself
		{-30, 9.357622968840175e-14},
		{-200, 0}, // exp(-200) is still representable in float64: 1.38e-87, rounds to 0 in float32
		{1000, 1000},
	} {
		got := Softplus(tc.x)
		if math.Abs(float64(got)-tc.want) > 1e-7*math.Max(1, math.Abs(tc.want)) {
			t.Errorf("softplus(%v) = %v, want %v", tc.x, got, tc.want)
		}
		if tc.x < 20 && got < 0 {
			t.Errorf("softplus(%v) negative", tc.x)
		}
	}
	if Softplus(-30) == 0 {
		t.Error("softplus(-30) underflowed to 0: not computed stably")
	}
}

func TestSoftplusGate(t *testing.T) {
	for _, tc := range []struct {
		T, nh, d int
		perHead  bool
	}{{1, 1, 1, true}, {3, 4, 5, true}, {3, 4, 5, false}, {2, 6, 8, true}, {2, 6, 8, false}, {1, 3, 1, false}} {
		G := tc.nh * tc.d
		if tc.perHead {
			G = tc.nh
		}
		x := randSlice(11, tc.T*tc.nh*tc.d, 2)
		g := randSlice(12, tc.T*G, 4)
		out := make([]float32, len(x))
		if err := SoftplusGate(out, x, g, tc.T, tc.nh, tc.d, G); err != nil {
			t.Fatal(err)
		}
		for tt := 0; tt < tc.T; tt++ {
			for h := 0; h < tc.nh; h++ {
				for c := 0; c < tc.d; c++ {
					i := (tt*tc.nh+h)*tc.d + c
					gi := tt*G + h*tc.d + c
					if tc.perHead {
						gi = tt*G + h
					}
					want := float64(x[i]) * math.Log1p(math.Exp(float64(g[gi])))
					if math.Abs(float64(out[i])-want) > 1e-6 {
						t.Fatalf("%+v: out[%d] = %v, want %v", tc, i, out[i], want)
					}
				}
			}
		}
	}
	if err := SoftplusGate(make([]float32, 12), make([]float32, 12), make([]float32, 5), 1, 3, 4, 5); err == nil {
		t.Error("gate width 5 for nh=3, d=4 accepted")
	}
	if err := SoftplusGate(make([]float32, 12), make([]float32, 12), make([]float32, 4), 1, 3, 4, 3); err == nil {
		t.Error("short g accepted")
	}
}
