//go:build !amd64

package gemv

// Only amd64 has the assembly kernels.
const hasAVX2 = false

func best() kernels { return gonumKernels }

func unreachable() { panic("gemv: no assembly kernels on this architecture") }

func dotsFMA(y, a []float32, lda int, x []float32)                 { unreachable() }
func dotsAVX512(y, a []float32, lda int, x []float32)              { unreachable() }
func dotsBF16(y []float32, a []uint16, lda int, x []float32)       { unreachable() }
func dotsBF16AVX512(y []float32, a []uint16, lda int, x []float32) { unreachable() }
func addScaledFMA(y, a []float32, lda int, x []float32)            { unreachable() }
