package prep

import (
	"math"
	"testing"

	"lagc/config"
)

// refInvFreq recomputes inverse frequencies in float64 straight from the
// formulas of transformers' rope initialisation (independently of
// NewRopeTable's float32 steps).
func refInvFreq(p RopeParams) (inv []float64, low, high, attn float64) {
	r := float64(p.RotaryDim)
	inv = make([]float64, p.RotaryDim/2)
	for i := range inv {
		inv[i] = math.Pow(p.Theta, -2*float64(i)/r)
	}
	if p.Type != "yarn" {
		return inv, 0, 0, 1
	}
	bf, bs := p.BetaFast, p.BetaSlow
	if bf == 0 {
		bf = 32
	}
	if bs == 0 {
		bs = 1
	}
	corr := func(b float64) float64 {
		return r * math.Log(float64(p.OriginalContext)/(2*math.Pi*b)) / (2 * math.Log(p.Theta))
	}
	low = math.Max(math.Floor(corr(bf)), 0)
	high = math.Min(math.Ceil(corr(bs)), r-1)
	if low == high {
		high += 0.001
	}
	for i, f := range inv {
		ramp := math.Min(math.Max((float64(i)-low)/(high-low), 0), 1)
		inv[i] = f/p.Factor*ramp + f*(1-ramp)
	}
	attn = p.AttentionFactor
	if attn == 0 {
		attn = 1
		if p.Factor > 1 {
			attn = 0.1*math.Log(p.Factor) + 1
		}
	}
	return inv, low, high, attn
}

func TestRopeTable(t *testing.T) {
	yarn := func(r int, theta, s float64, l0 int) RopeParams {
		return RopeParams{RotaryDim: r, Theta: theta, Type: "yarn", Factor: s, OriginalContext: l0}
	}
	for _, tc := range []struct {
		name      string
		p         RopeParams
		low, high float64 // hand-computed where the test states them; -1: not checked
		attn      float64
	}{
		{"default r=128 theta=1e4", RopeParams{RotaryDim: 128, Theta: 1e4}, -1, -1, 1},
		{"default r=64 theta=5e5", RopeParams{RotaryDim: 64, Theta: 5e5, Type: "default"}, -1, -1, 1},
		{"default r=2", RopeParams{RotaryDim: 2, Theta: 1e4}, -1, -1, 1},
		// S-2.1 full layers: corr(32) = 64 ln(8192/(64 pi)) / (2 ln 5e5) = 9.04 -> 9,
		// corr(1) = 64 ln(8192/(2 pi)) / (2 ln 5e5) = 17.49 -> 18; m = 0.1 ln 32 + 1.
		{"yarn S-2.1", yarn(64, 5e5, 32, 8192), 9, 18, 1.3465735902799727},
		// corr(32) = -0.99 -> clamped to 0; corr(1) = 2.016 -> 3.
		{"yarn tiny clamp low", yarn(16, 1e4, 4, 64), 0, 3, 0.1*math.Log(4) + 1},
		// corr(32) = 3.33 -> 3 = r-1 and corr(1) clamped to r-1 = 3: low == high, ramp uses 3.001.
		{"yarn low == high", yarn(4, 1e4, 8, 400000000), 3, 3.001, 0.1*math.Log(8) + 1},
		{"yarn explicit attention factor and betas", RopeParams{RotaryDim: 32, Theta: 5e5, Type: "yarn", Factor: 16,
			OriginalContext: 4096, BetaFast: 16, BetaSlow: 2, AttentionFactor: 0.75}, -1, -1, 0.75},
		{"yarn factor below 1", yarn(8, 1e4, 0.5, 256), -1, -1, 1},
	} {
		tab, err := NewRopeTable(tc.p)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		want, low, high, attn := refInvFreq(tc.p)
		if tc.low >= 0 && (low != tc.low || math.Abs(high-tc.high) > 1e-12) {
			t.Errorf("%s: reference low/high = %v/%v, hand-computed %v/%v", tc.name, low, high, tc.low, tc.high)
		}
		if len(tab.InvFreq) != len(want) {
			t.Fatalf("%s: %d frequencies, want %d", tc.name, len(tab.InvFreq), len(want))
		}
		for i, f := range tab.InvFreq {
			if rel := math.Abs(float64(f)-want[i]) / want[i]; rel > 5e-7 {
				t.Errorf("%s: inv_freq[%d] = %v, want %v (rel %g)", tc.name, i, f, want[i], rel)
			}
		}
		if math.Abs(attn-tc.attn) > 1e-12 || math.Abs(float64(tab.AttnFactor)-tc.attn) > 1e-7 {
			t.Errorf("%s: attention factor %v (reference %v), want %v", tc.name, tab.AttnFactor, attn, tc.attn)
		}
	}
}

func TestRopeTableExactFloat32Steps(t *testing.T) {
	// theta^(2i/r) with r=4, theta=1e4: 1 and 100 exactly, so inv_freq = 1, 0.01f.
	tab, err := NewRopeTable(RopeParams{RotaryDim: 4, Theta: 1e4})
	if err != nil {
		t.Fatal(err)
	}
	if tab.InvFreq[0] != 1 || tab.InvFreq[1] != float32(1)/100 {
		t.Fatalf("inv_freq = %v", tab.InvFreq)
	}
	// YaRN whose ramp is 0 for every channel pair (low = high = 3 >= r/2):
	// pure extrapolation, equal to the default frequencies bit for bit.
	y, err := NewRopeTable(RopeParams{RotaryDim: 4, Theta: 1e4, Type: "yarn", Factor: 8, OriginalContext: 400000000})
	if err != nil {
		t.Fatal(err)
	}
	for i := range y.InvFreq {
		if math.Float32bits(y.InvFreq[i]) != math.Float32bits(tab.InvFreq[i]) {
			t.Fatalf("yarn, extrapolation only: element %d is %v, default %v", i, y.InvFreq[i], tab.InvFreq[i])
		}
	}
}

func TestRopeParamsOf(t *testing.T) {
	r := config.Rope{Type: "yarn", Theta: 5e5, PartialRotaryFactor: 0.5, Factor: 32, OriginalContext: 8192, BetaFast: 32, BetaSlow: 1}
	p := RopeParamsOf(r, 128)
	want := RopeParams{RotaryDim: 64, Theta: 5e5, Type: "yarn", Factor: 32, OriginalContext: 8192, BetaFast: 32, BetaSlow: 1}
	if p != want {
		t.Fatalf("got %+v, want %+v", p, want)
	}
	if m := YarnAttentionFactor(32, 0); math.Abs(m-r.YarnAttentionFactor()) > 0 {
		t.Fatalf("attention factor %v differs from config.Rope's %v", m, r.YarnAttentionFactor())
	}
}

func TestRopeTableErrors(t *testing.T) {
	for _, p := range []RopeParams{
		{RotaryDim: 0, Theta: 1e4},
		{RotaryDim: 5, Theta: 1e4},
		{RotaryDim: 4, Theta: 0},
		{RotaryDim: 4, Theta: math.NaN()},
		{RotaryDim: 4, Theta: 1e4, Type: "longrope"},
		{RotaryDim: 4, Theta: 1e4, Type: "yarn"},                              // no factor
		{RotaryDim: 4, Theta: 1e4, Type: "yarn", Factor: 4},                   // no original context
		{RotaryDim: 4, Theta: 1, Type: "yarn", Factor: 4, OriginalContext: 8}, // log(theta) = 0
	} {
		if _, err := NewRopeTable(p); err == nil {
			t.Errorf("%+v accepted", p)
		}
	}
}
