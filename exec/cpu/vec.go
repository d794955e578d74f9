package cpu

import (
	"unsafe"

	"gonum.org/v1/gonum/blas/gonum"
)

// The vector primitives under every kernel: gonum's float32 assembly
// (SSE on amd64), about 3x the scalar Go loop at K=128 and 5x at 4096
// (BenchmarkDotOptions).
var gonumBLAS gonum.Implementation

// dot returns sum_i a[i]*b[i]. gonum's Sdot peels elements until b is
// 16-byte aligned, so its summation order depends on b's address; a b that
// is not aligned is copied to an aligned buffer first, which makes the
// order a function of len(a) alone: a row gives the same sum wherever it
// lives (a fused weight, a dequantised block, a cache ring). Weights, caches
// and activations are allocated aligned, so the copy is rare.
func dot(a, b []float32) float32 {
	b = b[:len(a)]
	if len(b) > 0 && uintptr(unsafe.Pointer(&b[0]))%16 != 0 {
		b = append(alignedFloats(len(b))[:0], b...)
	}
	return gonumBLAS.Sdot(len(a), a, 1, b, 1)
}

// axpy adds a*x to dst element by element (each element is one
// multiply-add, so the order does not matter).
func axpy(dst []float32, a float32, x []float32) {
	gonumBLAS.Saxpy(len(dst), a, x[:len(dst)], 1, dst, 1)
}

// alignedFloats returns n zeroed floats starting on a 64-byte boundary.
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
