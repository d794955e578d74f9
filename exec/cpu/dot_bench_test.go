package cpu

import (
	"fmt"
	"testing"

	"gonum.org/v1/gonum/blas"
)

var sinkF float32

// goDot is the scalar loop the kernels used before gonum: eight partial
// sums, for BenchmarkRowDots.
func goDot(a, b []float32) float32 {
	b = b[:len(a)]
	var s0, s1, s2, s3, s4, s5, s6, s7 float32
	i := 0
	for ; i+8 <= len(a); i += 8 {
		s0 += a[i] * b[i]
		s1 += a[i+1] * b[i+1]
		s2 += a[i+2] * b[i+2]
		s3 += a[i+3] * b[i+3]
		s4 += a[i+4] * b[i+4]
		s5 += a[i+5] * b[i+5]
		s6 += a[i+6] * b[i+6]
		s7 += a[i+7] * b[i+7]
	}
	for ; i < len(a); i++ {
		s0 += a[i] * b[i]
	}
	return ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))
}

// BenchmarkRowDots: the dot products of one vector with 64 rows of K, as
// a matmul block computes them, by the scalar Go loop, gonum's Sdot per
// row, and gonum's Sgemv over the block.
func BenchmarkRowDots(b *testing.B) {
	const rows = 64
	for _, K := range []int{32, 128, 512, 4096} {
		x := alignedFloats(K)
		copy(x, randSlice(1, K, 1))
		w := alignedFloats(rows * K)
		copy(w, randSlice(2, rows*K, 1))
		y := make([]float32, rows)
		b.Run(fmt.Sprintf("go/K=%d", K), func(b *testing.B) {
			for b.Loop() {
				for r := range y {
					y[r] = goDot(x, w[r*K:(r+1)*K])
				}
			}
		})
		b.Run(fmt.Sprintf("sdot/K=%d", K), func(b *testing.B) {
			for b.Loop() {
				for r := range y {
					y[r] = gonumBLAS.Sdot(K, w[r*K:], 1, x, 1)
				}
			}
		})
		b.Run(fmt.Sprintf("sgemv/K=%d", K), func(b *testing.B) {
			for b.Loop() {
				gonumBLAS.Sgemv(blas.NoTrans, rows, K, 1, w, K, x, 1, 0, y, 1)
			}
		})
	}
}
