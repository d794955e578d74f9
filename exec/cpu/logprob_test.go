package cpu

import (
	"math"
	"slices"
	"testing"
)

func TestTopLogprobs(t *testing.T) {
	inf := float32(math.Inf(-1))
	for _, tc := range []struct {
		name   string
		logits []float32
		n      int
		want   []int32
	}{
		{"order", []float32{1, 3, 2, 0}, 3, []int32{1, 2, 0}},
		{"ties: lower id first", []float32{2, 5, 2, 5, 2}, 4, []int32{1, 3, 0, 2}},
		{"n over the vocabulary", []float32{0, 1}, 5, []int32{1, 0}},
		{"n 0", []float32{0, 1}, 0, nil},
		{"-Inf kept last", []float32{inf, 0, inf}, 3, []int32{1, 0, 2}},
	} {
		got := TopLogprobs(tc.logits, tc.n, 0)
		ids := []int32(nil)
		for _, g := range got {
			ids = append(ids, g.ID)
			if g.Logprob != float64(tc.logits[g.ID]) {
				t.Errorf("%s: id %d logprob %g, want %g", tc.name, g.ID, g.Logprob, tc.logits[g.ID])
			}
		}
		if !slices.Equal(ids, tc.want) {
			t.Errorf("%s: top %v, want %v", tc.name, ids, tc.want)
		}
	}
}

func TestLogSumExp(t *testing.T) {
	inf := float32(math.Inf(1))
	if v, err := LogSumExp([]float32{0, 0, float32(math.Inf(-1))}); err != nil || math.Abs(v-math.Log(2)) > 1e-12 {
		t.Errorf("log(2): %g %v", v, err)
	}
	if v, err := LogSumExp([]float32{1000, 1000}); err != nil || math.Abs(v-1000-math.Log(2)) > 1e-9 {
		t.Errorf("large logits: %g %v", v, err)
	}
	for _, bad := range [][]float32{{0, float32(math.NaN())}, {0, inf}, {-inf, -inf}} {
		if _, err := LogSumExp(bad); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}

func TestLogprobsOf(t *testing.T) {
	l := []float32{0, float32(math.Log(3)), float32(math.Inf(-1))} // p = 1/4, 3/4, 0
	s, err := LogprobsOf(l, 0, 2)
	if err != nil || s.ID != 0 || math.Abs(s.Logprob-math.Log(0.25)) > 1e-7 || len(s.Top) != 2 || s.Top[0].ID != 1 || math.Abs(s.Top[0].Logprob-math.Log(0.75)) > 1e-7 {
		t.Errorf("LogprobsOf: %+v, %v", s, err)
	}
	for _, id := range []int32{-1, 3} {
		if _, err := LogprobsOf(l, id, 1); err == nil {
			t.Errorf("token %d outside the vocabulary accepted", id)
		}
	}
	if _, err := LogprobsOf([]float32{float32(math.NaN())}, 0, 1); err == nil {
		t.Error("NaN logits accepted")
	}
}

func TestLogprobSampler(t *testing.T) {
	greedy, err := NewSampler(SamplerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	l := &LogprobSampler{Inner: greedy, Top: 1}
	for _, logits := range [][]float32{{0, 1}, {2, 0}} {
		if _, err := l.Sample(logits, nil); err != nil {
			t.Fatal(err)
		}
	}
	if r := l.Records(); len(r) != 2 || r[0].ID != 1 || r[1].ID != 0 || len(r[0].Top) != 1 || r[0].Top[0].ID != 1 {
		t.Fatalf("records %+v", r)
	}
	if r, ok := l.Take(); !ok || r.ID != 1 {
		t.Errorf("first take: %+v %v", r, ok)
	}
	if r := l.Records(); len(r) != 1 || r[0].ID != 0 {
		t.Errorf("after a take: %+v", r)
	}
	l.Take()
	if _, ok := l.Take(); ok {
		t.Error("a take with none left succeeded")
	}
	if _, err := l.Sample([]float32{float32(math.NaN())}, nil); err == nil {
		t.Error("NaN logits recorded")
	}
}
