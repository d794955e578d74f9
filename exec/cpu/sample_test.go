package cpu

import (
	"math"
	"slices"
	"testing"
)

func mustSampler(t *testing.T, cfg SamplerConfig) *Sampler {
	t.Helper()
	s, err := NewSampler(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// draws samples n tokens from fixed logits and returns the frequency of each.
func draws(t *testing.T, s *Sampler, logits []float32, n int) []float64 {
	t.Helper()
	f := make([]float64, len(logits))
	for i := 0; i < n; i++ {
		id, err := s.Sample(logits, nil)
		if err != nil {
			t.Fatal(err)
		}
		f[id]++
	}
	for i := range f {
		f[i] /= float64(n)
	}
	return f
}

func logitsOf(p ...float64) []float32 {
	l := make([]float32, len(p))
	for i, v := range p {
		l[i] = float32(math.Log(v))
	}
	return l
}

func TestSamplerGreedyAndPenalty(t *testing.T) {
	for _, tc := range []struct {
		name    string
		logits  []float32
		history []int32
		penalty float64
		want    int32
	}{
		{"argmax", []float32{0.1, 3, -2, 2.9}, nil, 0, 1},
		{"first of ties", []float32{1, 4, 4}, nil, 1, 1},
		{"positive logit divided", []float32{2, 1.9}, []int32{0}, 1.2, 1},     // 2/1.2 = 1.67 < 1.9
		{"negative logit multiplied", []float32{-1, -1.1}, []int32{0}, 2, 1},  // -1*2 = -2 < -1.1
		{"each id penalised once", []float32{4, 3}, []int32{0, 0, 0}, 1.2, 0}, // 3.33 > 3
		{"penalty below 1 rewards", []float32{1.9, 2}, []int32{0}, 0.5, 0},    // 3.8 > 2
	} {
		s := mustSampler(t, SamplerConfig{RepetitionPenalty: tc.penalty})
		got, err := s.Sample(tc.logits, tc.history)
		if err != nil {
			t.Fatal(err)
		}
		if got != tc.want {
			t.Errorf("%s: got %d, want %d", tc.name, got, tc.want)
		}
	}
	// The caller's logits are not modified.
	l := []float32{2, 1.9}
	s := mustSampler(t, SamplerConfig{RepetitionPenalty: 1.2, Temperature: 0.8})
	if _, err := s.Sample(l, []int32{0}); err != nil || l[0] != 2 {
		t.Fatalf("logits changed to %v (%v)", l, err)
	}
}

func TestSamplerPresenceFrequency(t *testing.T) {
	for _, tc := range []struct {
		name       string
		logits     []float32
		history    []int32
		promptLen  int
		pres, freq float64
		want       []float32 // the penalised logits
	}{
		{"presence once per id", []float32{1, 2, 3}, []int32{1, 1, 2}, 0, 0.5, 0, []float32{1, 1.5, 2.5}},
		{"frequency per occurrence", []float32{1, 2, 3}, []int32{1, 1, 2}, 0, 0, 0.25, []float32{1, 1.5, 2.75}},
		{"both", []float32{1, 2, 3}, []int32{1, 1, 2}, 0, 1, 0.5, []float32{1, 0, 1.5}},
		{"prompt not counted", []float32{1, 2, 3}, []int32{0, 0, 1, 2}, 2, 1, 1, []float32{1, 0, 1}},
		{"negative rewards", []float32{1, 2, 3}, []int32{0}, 0, -2, 0, []float32{3, 2, 3}},
		{"nothing generated", []float32{1, 2, 3}, []int32{0, 1}, 2, 2, 2, []float32{1, 2, 3}},
	} {
		s := mustSampler(t, SamplerConfig{PresencePenalty: tc.pres, FrequencyPenalty: tc.freq, PromptLen: tc.promptLen})
		sc := slices.Clone(tc.logits)
		if err := s.penaliseGenerated(sc, tc.history); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(sc, tc.want) {
			t.Errorf("%s: penalised %v, want %v", tc.name, sc, tc.want)
		}
		if i := slices.IndexFunc(s.counts, func(c int32) bool { return c != 0 }); i >= 0 {
			t.Errorf("%s: counts[%d] left %d", tc.name, i, s.counts[i])
		}
		// Sample applies them: greedy takes the argmax of the penalised logits.
		got, err := s.Sample(tc.logits, tc.history)
		if err != nil {
			t.Fatal(err)
		}
		if want := int32(argmax(tc.want)); got != want {
			t.Errorf("%s: sampled %d, want %d", tc.name, got, want)
		}
	}
}

func TestSamplerLogitBias(t *testing.T) {
	l := []float32{1, 5, 3}
	for _, tc := range []struct {
		name string
		bias map[int32]float64
		temp float64
		want int32
	}{
		{"none", nil, 0, 1},
		{"ban the best", map[int32]float64{1: -100}, 0, 2},
		{"force the worst", map[int32]float64{0: 100}, 0, 0},
		{"small nudge", map[int32]float64{2: 2.5}, 0, 2},
		{"ban, sampling", map[int32]float64{1: -100, 2: -100}, 1, 0},
	} {
		s := mustSampler(t, SamplerConfig{LogitBias: tc.bias, Temperature: tc.temp})
		for range 20 {
			got, err := s.Sample(l, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("%s: sampled %d, want %d", tc.name, got, tc.want)
			}
		}
	}
	if l[1] != 5 {
		t.Errorf("the caller's logits changed: %v", l)
	}
	s := mustSampler(t, SamplerConfig{LogitBias: map[int32]float64{3: 1}})
	if _, err := s.Sample(l, nil); err == nil {
		t.Error("a bias outside the vocabulary accepted")
	}
}

func TestSamplerTopK1IsGreedy(t *testing.T) {
	greedy := mustSampler(t, SamplerConfig{})
	for seed := uint64(0); seed < 20; seed++ {
		logits := randSlice(seed, 1000, 5)
		want, _ := greedy.Sample(logits, nil)
		for _, temp := range []float64{0.3, 1, 2.5} {
			s := mustSampler(t, SamplerConfig{Temperature: temp, TopK: 1, Seed: seed})
			for i := 0; i < 3; i++ {
				if got, err := s.Sample(logits, nil); err != nil || got != want {
					t.Fatalf("seed %d temperature %g: top-k=1 drew %d, greedy %d (%v)", seed, temp, got, want, err)
				}
			}
		}
	}
}

func TestSamplerDeterministicPerSeed(t *testing.T) {
	logits := randSlice(70, 50, 1)
	seq := func(seed uint64, s *Sampler) []int32 {
		if s == nil {
			s = mustSampler(t, SamplerConfig{Temperature: 1, TopP: 0.95, TopK: 40, MinP: 0.01, Seed: seed})
		}
		out := make([]int32, 64)
		for i := range out {
			id, err := s.Sample(logits, out[:i])
			if err != nil {
				t.Fatal(err)
			}
			out[i] = id
		}
		return out
	}
	a, b, c := seq(1, nil), seq(1, nil), seq(2, nil)
	if !slices.Equal(a, b) {
		t.Fatal("same seed, different tokens")
	}
	if slices.Equal(a, c) {
		t.Fatal("seeds 1 and 2 drew the same 64 tokens")
	}
	s := mustSampler(t, SamplerConfig{Temperature: 1, TopP: 0.95, TopK: 40, MinP: 0.01, Seed: 2})
	seq(0, s)
	s.Reseed(1)
	if !slices.Equal(seq(0, s), a) {
		t.Fatal("Reseed(1) does not restart the seed-1 stream")
	}
}

func TestSamplerDistributions(t *testing.T) {
	const n = 40000 // frequencies within about 0.0025 (one sigma) of the truth
	p := logitsOf(0.1, 0.2, 0.3, 0.4)
	for _, tc := range []struct {
		name string
		cfg  SamplerConfig
		want []float64
	}{
		{"plain", SamplerConfig{Temperature: 1}, []float64{0.1, 0.2, 0.3, 0.4}},
		{"temperature 0.5 squares p", SamplerConfig{Temperature: 0.5}, []float64{1.0 / 30, 4.0 / 30, 9.0 / 30, 16.0 / 30}},
		{"top-k 2", SamplerConfig{Temperature: 1, TopK: 2}, []float64{0, 0, 3.0 / 7, 4.0 / 7}},
		{"top-p 0.41: mass above token 2 is 0.4", SamplerConfig{Temperature: 1, TopP: 0.41}, []float64{0, 0, 3.0 / 7, 4.0 / 7}},
		{"top-p 0.39", SamplerConfig{Temperature: 1, TopP: 0.39}, []float64{0, 0, 0, 1}},
		{"top-p 0.71", SamplerConfig{Temperature: 1, TopP: 0.71}, []float64{0, 2.0 / 9, 3.0 / 9, 4.0 / 9}},
		{"min-p 0.6: keeps p >= 0.24", SamplerConfig{Temperature: 1, MinP: 0.6}, []float64{0, 0, 3.0 / 7, 4.0 / 7}},
		{"min-p 0.76", SamplerConfig{Temperature: 1, MinP: 0.76}, []float64{0, 0, 0, 1}},
		{"top-k 3 then top-p 0.6 of the rest", SamplerConfig{Temperature: 1, TopK: 3, TopP: 0.6}, []float64{0, 0, 3.0 / 7, 4.0 / 7}},
	} {
		f := draws(t, mustSampler(t, tc.cfg), p, n)
		for i := range f {
			if math.Abs(f[i]-tc.want[i]) > 0.012 || (tc.want[i] == 0) != (f[i] == 0) {
				t.Errorf("%s: frequencies %v, want %v", tc.name, f, tc.want)
				break
			}
		}
	}
	// Ties at the top-k boundary stay, as in transformers.
	f := draws(t, mustSampler(t, SamplerConfig{Temperature: 1, TopK: 1}), []float32{1, 1, 1, 0}, 3000)
	if f[0] == 0 || f[1] == 0 || f[2] == 0 || f[3] != 0 {
		t.Errorf("top-k 1 with a three-way tie: frequencies %v", f)
	}
	// A tiny positive temperature is all but greedy: 1e-50 underflows float32
	// (and 1e-40 overflows the scaled logits), which once drew garbage.
	for _, temp := range []float64{1e-50, 1e-40, 1e-300} {
		f := draws(t, mustSampler(t, SamplerConfig{Temperature: temp}), []float32{0.5, 2, -3, 1.99}, 200)
		if f[1] != 1 {
			t.Errorf("temperature %g: frequencies %v, want only the best token", temp, f)
		}
	}
	// -Inf logits are never drawn.
	inf := float32(math.Inf(-1))
	f = draws(t, mustSampler(t, SamplerConfig{Temperature: 1}), []float32{0, inf, 0, inf}, 2000)
	if f[1] != 0 || f[3] != 0 {
		t.Errorf("-Inf logits drawn: %v", f)
	}
}

func TestSamplerErrors(t *testing.T) {
	for _, cfg := range []SamplerConfig{
		{Temperature: math.NaN()}, {TopK: -1}, {TopP: 1.5}, {TopP: -0.1}, {MinP: 2}, {RepetitionPenalty: -1},
		{RepetitionPenalty: math.Inf(1)}, {Temperature: math.Inf(1)}, {PresencePenalty: 2.5},
		{FrequencyPenalty: -3}, {PresencePenalty: math.NaN()}, {FrequencyPenalty: math.NaN()}, {PromptLen: -1},
		{LogitBias: map[int32]float64{0: 101}}, {LogitBias: map[int32]float64{0: math.NaN()}}, {LogitBias: map[int32]float64{-1: 1}},
	} {
		if _, err := NewSampler(cfg); err == nil {
			t.Errorf("%+v accepted", cfg)
		}
	}
	s := mustSampler(t, SamplerConfig{Temperature: 1, RepetitionPenalty: 1.1})
	if _, err := s.Sample(nil, nil); err == nil {
		t.Error("empty logits accepted")
	}
	if _, err := s.Sample([]float32{1, 2}, []int32{2}); err == nil {
		t.Error("history id outside the vocabulary accepted")
	}
	g := mustSampler(t, SamplerConfig{FrequencyPenalty: 1, PromptLen: 1})
	if _, err := g.Sample([]float32{1, 2}, []int32{0, 1, 2}); err == nil {
		t.Error("generated id outside the vocabulary accepted")
	}
	if sc := []float32{1, 2}; g.penaliseGenerated(sc, []int32{1, 1}) != nil || sc[1] != 1 {
		t.Errorf("after the error, one generated 1 penalised to %v, want [1 1]", sc)
	}
	if _, err := g.Sample([]float32{1, 2}, nil); err == nil {
		t.Error("history shorter than the prompt accepted")
	}
	if _, err := s.Sample([]float32{1, float32(math.NaN())}, nil); err == nil {
		t.Error("NaN logit accepted")
	}
	inf := float32(math.Inf(-1))
	if _, err := s.Sample([]float32{inf, inf}, nil); err == nil {
		t.Error("all -Inf accepted")
	}
}

func TestSamplerArgmax(t *testing.T) {
	for _, tc := range []struct {
		cfg  SamplerConfig
		want bool
	}{
		{SamplerConfig{}, true},
		{SamplerConfig{RepetitionPenalty: 1, TopK: 5, Seed: 3}, true},
		{SamplerConfig{Temperature: 0.5}, false},
		{SamplerConfig{RepetitionPenalty: 1.1}, false},
		{SamplerConfig{PresencePenalty: 0.5}, false},
		{SamplerConfig{FrequencyPenalty: -0.5}, false},
		{SamplerConfig{LogitBias: map[int32]float64{3: 1}}, false},
	} {
		if got := mustSampler(t, tc.cfg).Argmax(); got != tc.want {
			t.Errorf("%+v: Argmax %v, want %v", tc.cfg, got, tc.want)
		}
	}
}
