package cpu

import (
	"math"
	"math/rand/v2"
	"os"
	"testing"
)

// randSlice returns n values uniform in [-scale, scale), deterministic per seed.
func randSlice(seed uint64, n int, scale float32) []float32 {
	r := rand.New(rand.NewPCG(seed, 7))
	s := make([]float32, n)
	for i := range s {
		s[i] = (2*r.Float32() - 1) * scale
	}
	return s
}

// maxAbsDiff returns max |a-b| over float32 values against float64 references.
func maxAbsDiff(a []float32, b []float64) float64 {
	m := 0.0
	for i := range a {
		m = math.Max(m, math.Abs(float64(a[i])-b[i]))
	}
	return m
}

// maxAbs is the largest magnitude in v.
func maxAbs(v []float64) float64 {
	m := 0.0
	for _, x := range v {
		m = math.Max(m, math.Abs(x))
	}
	return m
}

func requireBitwise(t *testing.T, what string, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: lengths %d and %d", what, len(got), len(want))
	}
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s: element %d differs: %v vs %v", what, i, got[i], want[i])
		}
	}
}

// withThreads runs f with the kernel thread bound set to n.
func withThreads(n int, f func()) {
	SetMaxThreads(n)
	defer SetMaxThreads(0)
	f()
}

func to64(s []float32) []float64 {
	d := make([]float64, len(s))
	for i, v := range s {
		d[i] = float64(v)
	}
	return d
}

// TestMain makes every kernel of the tests split its work however small,
// so comparisons of one thread with several exercise the parallel paths.
func TestMain(m *testing.M) {
	minParallelWork = 1
	os.Exit(m.Run())
}
