package gpu

import (
	"lagc/cuda"
	"lagc/lower"
)

// The element-wise launchers (silu, mul, add).

// SiLU computes out = x * sigmoid(x) over n elements of dtype dt (float32
// math). out may alias x.
func (k *Kernels) SiLU(s Queue, dt cuda.DType, out, x cuda.DevicePtr, n int) error {
	return k.on(s).one(lower.Elementwise("silu", dt.String(), n, ptr(x), ptr(out)))
}

// Mul computes out = a * b over n elements. out may alias a or b.
func (k *Kernels) Mul(s Queue, dt cuda.DType, out, a, b cuda.DevicePtr, n int) error {
	return k.on(s).one(lower.Elementwise("mul", dt.String(), n, ptr(a), ptr(b), ptr(out)))
}

// Add computes out = a + b over n elements (the residual adds). out may
// alias a or b.
func (k *Kernels) Add(s Queue, dt cuda.DType, out, a, b cuda.DevicePtr, n int) error {
	return k.on(s).one(lower.Elementwise("add", dt.String(), n, ptr(a), ptr(b), ptr(out)))
}
