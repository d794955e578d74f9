package cpu

import (
	"math"
	"slices"
	"testing"
)

// refRouter is a float64 brute force: rank all experts by s + bias (lower
// index first on ties), take k, normalise their s.
func refRouter(logits, bias []float32, E, k int, softcap, scaling float64) ([]float64, []int32) {
	s := make([]float64, E)
	sel := make([]float64, E)
	order := make([]int32, E)
	for e := range s {
		l := float64(logits[e])
		if softcap > 0 {
			l = softcap * math.Tanh(l/softcap)
		}
		s[e] = 1 / (1 + math.Exp(-l))
		sel[e] = s[e]
		if bias != nil {
			sel[e] += float64(bias[e])
		}
		order[e] = int32(e)
	}
	slices.SortStableFunc(order, func(a, b int32) int {
		switch {
		case sel[a] > sel[b]:
			return -1
		case sel[a] < sel[b]:
			return 1
		}
		return 0
	})
	ids := order[:k]
	sum := 0.0
	for _, e := range ids {
		sum += s[e]
	}
	w := make([]float64, k)
	for j, e := range ids {
		w[j] = s[e] / sum * scaling
	}
	return w, ids
}

func TestRouterTopKHandComputed(t *testing.T) {
	// s = sigmoid([0, 1, 2, -1]) = [.5, .731, .881, .269]; the bias lifts
	// expert 3 to the top, but its weight uses s alone:
	// w = [.269, .881] / (.269 + .881) * 2.5.
	logits := []float32{0, 1, 2, -1}
	bias := []float32{0, 0, 0, 5}
	w := make([]float32, 2)
	ids := make([]int32, 2)
	if err := RouterTopK(w, ids, logits, bias, 1, 4, 2, 0, 2.5); err != nil {
		t.Fatal(err)
	}
	s3, s2 := 1/(1+math.Exp(1)), 1/(1+math.Exp(-2))
	if ids[0] != 3 || ids[1] != 2 {
		t.Fatalf("ids = %v, want [3 2]", ids)
	}
	want := []float64{s3 / (s3 + s2) * 2.5, s2 / (s3 + s2) * 2.5}
	if d := maxAbsDiff(w, want); d > 1e-6 {
		t.Fatalf("weights = %v, want %v", w, want)
	}
	// Ties go to the lower index.
	if err := RouterTopK(w, ids, []float32{3, 3, 3, 3}, nil, 1, 4, 2, 0, 1); err != nil {
		t.Fatal(err)
	}
	if ids[0] != 0 || ids[1] != 1 || w[0] != 0.5 || w[1] != 0.5 {
		t.Fatalf("ties: ids %v weights %v", ids, w)
	}
	// Bias 0.001 on expert 1. Uncapped, sigmoid(10) - sigmoid(3) = 0.047 keeps
	// expert 0 first; with softcap 1 the logits become tanh(10) and tanh(3),
	// whose sigmoids differ by only 0.00097, so the bias makes expert 1 first.
	bias2 := []float32{0, 0.001}
	if err := RouterTopK(w[:1], ids[:1], []float32{10, 3}, bias2, 1, 2, 1, 0, 1); err != nil || ids[0] != 0 {
		t.Fatalf("uncapped: id %d, %v", ids[0], err)
	}
	if err := RouterTopK(w[:1], ids[:1], []float32{10, 3}, bias2, 1, 2, 1, 1, 1); err != nil || ids[0] != 1 {
		t.Fatalf("capped: id %d, %v", ids[0], err)
	}
	if w[0] != 1 {
		t.Fatalf("top-1 weight %v, want 1", w[0])
	}
}

func TestRouterTopK(t *testing.T) {
	for _, tc := range []struct {
		T, E, k          int
		softcap, scaling float32
		bias             bool
	}{{1, 1, 1, 0, 1, false}, {3, 8, 2, 0, 1, true}, {5, 6, 3, 30, 2.5, true}, {4, 256, 8, 0, 1, true}, {2, 64, 10, 1.5, 0.7, false}} {
		logits := randSlice(51, tc.T*tc.E, 4)
		var bias []float32
		if tc.bias {
			bias = randSlice(52, tc.E, 0.5)
		}
		w := make([]float32, tc.T*tc.k)
		ids := make([]int32, tc.T*tc.k)
		if err := RouterTopK(w, ids, logits, bias, tc.T, tc.E, tc.k, tc.softcap, tc.scaling); err != nil {
			t.Fatal(err)
		}
		for tt := 0; tt < tc.T; tt++ {
			rw, rids := refRouter(logits[tt*tc.E:(tt+1)*tc.E], bias, tc.E, tc.k, float64(tc.softcap), float64(tc.scaling))
			if !slices.Equal(ids[tt*tc.k:(tt+1)*tc.k], rids) {
				t.Fatalf("%+v token %d: ids %v, want %v", tc, tt, ids[tt*tc.k:(tt+1)*tc.k], rids)
			}
			if d := maxAbsDiff(w[tt*tc.k:(tt+1)*tc.k], rw); d > 1e-6 {
				t.Fatalf("%+v token %d: weights off by %g", tc, tt, d)
			}
		}
	}
}

func TestRouterTopKErrors(t *testing.T) {
	w, ids := make([]float32, 3), make([]int32, 3)
	if err := RouterTopK(w, ids, make([]float32, 2), nil, 1, 2, 3, 0, 1); err == nil {
		t.Error("top_k > E accepted")
	}
	if err := RouterTopK(w[:2], ids[:2], make([]float32, 4), make([]float32, 3), 1, 4, 2, 0, 1); err == nil {
		t.Error("short bias accepted")
	}
	if err := RouterTopK(w[:2], ids[:1], make([]float32, 4), nil, 1, 4, 2, 0, 1); err == nil {
		t.Error("short ids accepted")
	}
}
