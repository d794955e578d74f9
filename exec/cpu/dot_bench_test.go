package cpu

import (
	"fmt"
	"testing"

	"gonum.org/v1/gonum/blas/blas32"
	"gonum.org/v1/gonum/blas/gonum"
)

var sinkF float32

func BenchmarkDotOptions(b *testing.B) {
	impl := gonum.Implementation{}
	for _, n := range []int{32, 64, 128, 512, 4096} {
		x := make([]float32, n)
		y := make([]float32, n)
		for i := range x {
			x[i], y[i] = float32(i%7)*0.1, float32(i%5)*0.2
		}
		b.Run(fmt.Sprintf("go8/%d", n), func(b *testing.B) {
			for b.Loop() {
				sinkF += dot(x, y)
			}
		})
		b.Run(fmt.Sprintf("blas32/%d", n), func(b *testing.B) {
			vx, vy := blas32.Vector{N: n, Inc: 1, Data: x}, blas32.Vector{N: n, Inc: 1, Data: y}
			for b.Loop() {
				sinkF += blas32.Dot(vx, vy)
			}
		})
		b.Run(fmt.Sprintf("sdot/%d", n), func(b *testing.B) {
			for b.Loop() {
				sinkF += impl.Sdot(n, x, 1, y, 1)
			}
		})
	}
}
