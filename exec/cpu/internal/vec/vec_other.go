//go:build !amd64

package vec

// Only amd64 has the assembly kernels.
const hasAVX2 = false

func best() kernels { return gonumKernels }

func unreachable() { panic("vec: no assembly kernels on this architecture") }

func dotsFMA(y, a []float32, lda int, x []float32)                 { unreachable() }
func dotsAVX512(y, a []float32, lda int, x []float32)              { unreachable() }
func dotsBF16(y []float32, a []uint16, lda int, x []float32)       { unreachable() }
func dotsBF16AVX512(y []float32, a []uint16, lda int, x []float32) { unreachable() }
func addScaledFMA(y, a []float32, lda int, x []float32)            { unreachable() }
func expShiftedAVX512(s []float32, m float32)                      { unreachable() }
func siluMulAVX512(y, g, u []float32)                              { unreachable() }
func divideAVX512(s []float32, d float64)                          { unreachable() }
