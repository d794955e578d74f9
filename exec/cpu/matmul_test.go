package cpu

import (
	"strings"
	"testing"
)

func naiveMatMul(x, w []float32, T, K, N int) []float64 {
	y := make([]float64, T*N)
	for t := 0; t < T; t++ {
		for n := 0; n < N; n++ {
			s := 0.0
			for k := 0; k < K; k++ {
				s += float64(x[t*K+k]) * float64(w[n*K+k])
			}
			y[t*N+n] = s
		}
	}
	return y
}

func TestMatMul(t *testing.T) {
	for _, tc := range []struct{ T, K, N int }{
		{1, 1, 1}, {1, 7, 5}, {3, 13, 9}, {2, 8, 8}, {5, 64, 33}, {1, 300, 257}, {37, 100, 70}, {65, 33, 130},
	} {
		x := randSlice(1, tc.T*tc.K, 1)
		w := randSlice(2, tc.N*tc.K, 1)
		y := make([]float32, tc.T*tc.N)
		if err := MatMul(y, x, w, tc.T, tc.K, tc.N); err != nil {
			t.Fatal(err)
		}
		// |error| of a float32 dot of K terms of size <= 1 is well below K*2^-23.
		if d := maxAbsDiff(y, naiveMatMul(x, w, tc.T, tc.K, tc.N)); d > float64(tc.K)*1.2e-7 {
			t.Errorf("%+v: max |diff| from float64 = %g", tc, d)
		}
		// Every row equals the T=1 result and the single-thread result, bitwise.
		var one []float32
		withThreads(1, func() {
			one = make([]float32, tc.T*tc.N)
			for r := 0; r < tc.T; r++ {
				if err := MatMul(one[r*tc.N:(r+1)*tc.N], x[r*tc.K:(r+1)*tc.K], w, 1, tc.K, tc.N); err != nil {
					t.Fatal(err)
				}
			}
		})
		requireBitwise(t, "row-by-row single-thread vs batched", one, y)
	}
}

func TestMatMulHandComputed(t *testing.T) {
	// [1 2; 3 4] times w^T with w = [1 0; 1 1; 0 -1].
	x := []float32{1, 2, 3, 4}
	w := []float32{1, 0, 1, 1, 0, -1}
	y := make([]float32, 6)
	if err := MatMul(y, x, w, 2, 2, 3); err != nil {
		t.Fatal(err)
	}
	want := []float32{1, 3, -2, 3, 7, -4}
	requireBitwise(t, "hand-computed", y, want)
}

func TestMatMulErrors(t *testing.T) {
	for _, tc := range []struct {
		name      string
		y, x, w   int
		T, K, N   int
		wantInErr string
	}{
		{"short x", 6, 3, 6, 2, 2, 3, "x has 3"},
		{"short w", 6, 4, 5, 2, 2, 3, "w has 5"},
		{"long y", 7, 4, 6, 2, 2, 3, "y has 7"},
		{"zero K", 0, 0, 0, 2, 0, 3, "K = 0"},
	} {
		err := MatMul(make([]float32, tc.y), make([]float32, tc.x), make([]float32, tc.w), tc.T, tc.K, tc.N)
		if err == nil || !strings.Contains(err.Error(), tc.wantInErr) {
			t.Errorf("%s: error %v, want one mentioning %q", tc.name, err, tc.wantInErr)
		}
	}
}

// TestMatMulIndependentOfAlignment: the products do not depend on where x
// and w start (the assembly kernels never align; the gonum fallback gets
// an aligned copy of x, since gonum's dot peels to align it).
func TestMatMulIndependentOfAlignment(t *testing.T) {
	const T, K, N = 3, 40, 5
	x, w := randSlice(3, T*K, 1), randSlice(4, N*K, 1)
	x2 := append(make([]float32, 1, T*K+1), x...)[1:]
	w2 := append(make([]float32, 3, N*K+3), w...)[3:]
	y, y2 := make([]float32, T*N), make([]float32, T*N)
	mustTB(t, MatMul(y, x, w, T, K, N))
	mustTB(t, MatMul(y2, x2, w2, T, K, N))
	requireBitwise(t, "misaligned x and w", y2, y)
}

func BenchmarkMatMul(b *testing.B) {
	for _, s := range []struct {
		name    string
		T, K, N int
	}{{"decode_1x2048x2048", 1, 2048, 2048}, {"prefill_64x2048x2048", 64, 2048, 2048}} {
		x := randSlice(1, s.T*s.K, 1)
		w := randSlice(2, s.N*s.K, 1)
		y := make([]float32, s.T*s.N)
		b.Run(s.name, func(b *testing.B) {
			for b.Loop() {
				_ = MatMul(y, x, w, s.T, s.K, s.N)
			}
			b.ReportMetric(2*float64(s.T*s.K*s.N)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}
