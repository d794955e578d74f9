//go:build !amd64

package gemv

var useFMA = false

// HasFMA reports whether this machine runs the AVX+FMA kernels: only
// amd64 has them.
func HasFMA() bool { return false }

func dotsFMA(y, a []float32, lda int, x []float32) {
	panic("gemv: no FMA kernels on this architecture")
}
func addScaledFMA(y, a []float32, lda int, x []float32) {
	panic("gemv: no FMA kernels on this architecture")
}
