package cpu

import (
	"unsafe"

	"gonum.org/v1/gonum/blas/gonum"
)

// gonumBLAS gives the vector primitives under the matrix kernels and the
// attention: gonum's float32 assembly (SSE on amd64). Its dot product is
// about 3x the scalar Go loop at K=128 and 5x at 4096, and a block of rows
// through Sgemv saves a call and checks per row (BenchmarkRowDots).
var gonumBLAS gonum.Implementation

// alignedFloats returns n zeroed floats starting on a 64-byte boundary.
// gonum's dot peels elements until its second operand is 16-byte aligned,
// so the summation order of a dot against an aligned vector depends on
// the length alone.
func alignedFloats(n int) []float32 {
	if n == 0 {
		return nil
	}
	buf := make([]float32, n+16)
	off := int(uintptr(unsafe.Pointer(&buf[0])) % 64 / 4)
	if off != 0 {
		off = 16 - off
	}
	return buf[off : off+n : off+n]
}
