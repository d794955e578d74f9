package gpu

import (
	"lagc/cuda"
	"lagc/lower"
)

// RMSNorm computes out = w * x / sqrt(mean(x^2) + eps) over each of rows
// rows of n values (x and out [rows, n] of dtype dt, contiguous), in float32
// as transformers' LagunaRMSNorm (no "+1" on w). The weight w is float32
// [n] whatever dt is: norm weights are tiny, and the loader widens them.
// out may alias x.
func (k *Kernels) RMSNorm(s Queue, dt cuda.DType, out, x, w cuda.DevicePtr, rows, n int, eps float32) error {
	return k.RMSNormCast(s, dt, dt, out, x, w, rows, n, eps)
}

// RMSNormCast is RMSNorm reading x as xdt and writing out as odt, e.g. an
// f32 residual stream normalised into a bf16 GEMM input.
func (k *Kernels) RMSNormCast(s Queue, xdt, odt cuda.DType, out, x, w cuda.DevicePtr, rows, n int, eps float32) error {
	return k.on(s).one(lower.RMSNorm(xdt.String(), odt.String(), ptr(out), ptr(x), ptr(w), rows, n, eps))
}

// RMSNormQ8X is RMSNormCast (odt F32 or BF16, n a multiple of 32) that also
// quantises out, as stored, into xq (lower.Q8XBytes(rows, n) bytes) bit for
// bit as Q8XQuantize of out then would.
func (k *Kernels) RMSNormQ8X(s Queue, xdt, odt cuda.DType, out, x, w, xq cuda.DevicePtr, rows, n int, eps float32) error {
	return k.on(s).one(lower.RMSNormQ8X(xdt.String(), odt.String(), ptr(out), ptr(x), ptr(w), ptr(xq), rows, n, eps))
}

// AddRMSNorm is Add(sum = a + b) then RMSNormCast(out, sum) in one launch,
// with their bits. sum may alias a or b; out lies apart from a, b and sum.
func (k *Kernels) AddRMSNorm(s Queue, xdt, odt cuda.DType, sum, out, a, b, w cuda.DevicePtr, rows, n int, eps float32) error {
	return k.on(s).one(lower.AddRMSNorm(xdt.String(), odt.String(), ptr(sum), ptr(out), ptr(a), ptr(b), ptr(w), rows, n, eps))
}

// AddRMSNormQ8X is AddRMSNorm that also quantises out as RMSNormQ8X does.
func (k *Kernels) AddRMSNormQ8X(s Queue, xdt, odt cuda.DType, sum, out, a, b, w, xq cuda.DevicePtr, rows, n int, eps float32) error {
	return k.on(s).one(lower.AddRMSNormQ8X(xdt.String(), odt.String(), ptr(sum), ptr(out), ptr(a), ptr(b), ptr(w), ptr(xq), rows, n, eps))
}
