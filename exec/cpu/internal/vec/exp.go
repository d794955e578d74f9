package vec

import "math"

// The exp-based functions of the executor, in float64 with Go's math.Exp.
// Where the AVX-512 kernels run, they apply math.Exp's own operations
// (those of its FMA branch, which math takes on such machines) to eight
// lanes at a time: the float32 results are bitwise those of the scalar
// loops below, NaN payloads aside, on every kernel set.

// SiLU is x * sigmoid(x), as v / (1 + e^-v) in float64.
func SiLU(x float32) float32 {
	v := float64(x)
	return float32(v / (1 + math.Exp(-v)))
}

// SiLUMul sets y[i] = SiLU(g[i]) * u[i]; g and u must hold len(y) values.
func SiLUMul(y, g, u []float32) {
	g, u = g[:len(y)], u[:len(y)]
	if use == avx512Kernels && len(y) > 0 {
		siluMulAVX512(y, g, u)
		return
	}
	for i := range y {
		y[i] = SiLU(g[i]) * u[i]
	}
}

// ExpShifted sets s[i] = e^(s[i]-m), the difference taken in float32 and
// the exponential in float64 (a softmax's numerators).
func ExpShifted(s []float32, m float32) {
	if use == avx512Kernels && len(s) > 0 {
		expShiftedAVX512(s, m)
		return
	}
	for i, x := range s {
		s[i] = float32(math.Exp(float64(x - m)))
	}
}

// Divide sets s[i] = s[i] / d, the quotient taken in float64.
func Divide(s []float32, d float64) {
	if use == avx512Kernels && len(s) > 0 {
		divideAVX512(s, d)
		return
	}
	for i, x := range s {
		s[i] = float32(float64(x) / d)
	}
}
