package cpu

import (
	"fmt"
	"math"
	"strings"
	"testing"
)

// refExperts computes the routed experts token by token in float64.
func refExperts(x, weights []float32, ids []int32, gate, up, down []float32, T, H, I, k int) []float64 {
	out := make([]float64, T*H)
	for t := 0; t < T; t++ {
		for j := 0; j < k; j++ {
			e := int(ids[t*k+j])
			a := make([]float64, I)
			for i := 0; i < I; i++ {
				g, u := 0.0, 0.0
				for h := 0; h < H; h++ {
					g += float64(gate[(e*I+i)*H+h]) * float64(x[t*H+h])
					u += float64(up[(e*I+i)*H+h]) * float64(x[t*H+h])
				}
				a[i] = g / (1 + math.Exp(-g)) * u
			}
			for h := 0; h < H; h++ {
				y := 0.0
				for i := 0; i < I; i++ {
					y += float64(down[(e*H+h)*I+i]) * a[i]
				}
				out[t*H+h] += float64(weights[t*k+j]) * y
			}
		}
	}
	return out
}

func TestMoEExperts(t *testing.T) {
	for _, tc := range []struct{ T, H, E, I, k int }{
		{1, 8, 4, 6, 2}, {5, 13, 6, 9, 3}, {7, 32, 8, 40, 2}, {20, 64, 8, 96, 3}, {3, 5, 3, 7, 3},
	} {
		t.Run(fmt.Sprintf("%+v", tc), func(t *testing.T) {
			x := randSlice(61, tc.T*tc.H, 1)
			gate := randSlice(62, tc.E*tc.I*tc.H, 0.5)
			up := randSlice(63, tc.E*tc.I*tc.H, 0.5)
			down := randSlice(64, tc.E*tc.H*tc.I, 0.5)
			logits := randSlice(65, tc.T*tc.E, 3)
			w := make([]float32, tc.T*tc.k)
			ids := make([]int32, tc.T*tc.k)
			if err := RouterTopK(w, ids, logits, nil, tc.T, tc.E, tc.k, 0, 1.5); err != nil {
				t.Fatal(err)
			}
			out := make([]float32, tc.T*tc.H)
			for i := range out {
				out[i] = 99 // must be overwritten, not accumulated into
			}
			if err := MoEExperts(out, x, w, ids, gate, up, down, tc.T, tc.H, tc.E, tc.I, tc.k); err != nil {
				t.Fatal(err)
			}
			if d := maxAbsDiff(out, refExperts(x, w, ids, gate, up, down, tc.T, tc.H, tc.I, tc.k)); d > 1e-5 {
				t.Fatalf("max |diff| from float64 = %g", d)
			}
			// Each token alone, on one thread, gives the same bits.
			withThreads(1, func() {
				one := make([]float32, tc.T*tc.H)
				for r := 0; r < tc.T; r++ {
					if err := MoEExperts(one[r*tc.H:(r+1)*tc.H], x[r*tc.H:(r+1)*tc.H], w[r*tc.k:(r+1)*tc.k], ids[r*tc.k:(r+1)*tc.k],
						gate, up, down, 1, tc.H, tc.E, tc.I, tc.k); err != nil {
						t.Fatal(err)
					}
				}
				requireBitwise(t, "token by token", one, out)
			})
		})
	}
}

func TestMoEExpertsErrors(t *testing.T) {
	const T, H, E, I, k = 2, 4, 3, 5, 2
	x := make([]float32, T*H)
	w := make([]float32, T*k)
	g := make([]float32, E*I*H)
	out := make([]float32, T*H)
	err := MoEExperts(out, x, w, []int32{0, 1, 2, 3}, g, g, g, T, H, E, I, k)
	if err == nil || !strings.Contains(err.Error(), "expert id 3 (token 1)") {
		t.Errorf("id out of range: %v", err)
	}
	if err := MoEExperts(out, x, w, []int32{0, 1, 2, -1}, g, g, g, T, H, E, I, k); err == nil {
		t.Error("negative id accepted")
	}
	if err := MoEExperts(out, x, w, []int32{0, 1, 2, 0}, g[:len(g)-1], g, g, T, H, E, I, k); err == nil {
		t.Error("short gate accepted")
	}
}

// BenchmarkMoEExpertsDecode is one token through 8 routed experts of
// Laguna-XS.2's shape (hidden 2048, expert width 512).
func BenchmarkMoEExpertsDecode(b *testing.B) {
	const H, E, I, k = 2048, 8, 512, 8
	gate := randSlice(1, E*I*H, 0.05)
	down := randSlice(2, E*H*I, 0.05)
	x := randSlice(3, H, 1)
	w := []float32{0.2, 0.2, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1}
	ids := []int32{0, 1, 2, 3, 4, 5, 6, 7}
	out := make([]float32, H)
	for b.Loop() {
		if err := MoEExperts(out, x, w, ids, gate, gate, down, 1, H, E, I, k); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(3*k*I*H*4)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
}
