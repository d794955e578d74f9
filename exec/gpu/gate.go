package gpu

import (
	"lagc/cuda"
	"lagc/lower"
)

// SoftplusGate computes Laguna's attention output gate out = x *
// softplus(g) (torch's softplus, threshold 20, float32 math). x and out are
// [T, nh*d], contiguous (out may alias x); g is [T, G] with rows ldg
// elements apart (0: G), e.g. the gate columns of a fused QKVG output. G ==
// nh gates per head (broadcast over its d channels), G == nh*d per element.
func (k *Kernels) SoftplusGate(s Queue, dt cuda.DType, out, x, g cuda.DevicePtr, T, nh, d, G, ldg int) error {
	return k.on(s).one(lower.SoftplusGate(dt.String(), ptr(out), ptr(x), ptr(g), T, nh, d, G, ldg))
}
