package gpu

import (
	"lagc/cuda"
	"lagc/lower"
)

// ArgMax writes the index of the largest element of each row of x [T, V]
// (dtype dt; the logits) to out int32 [T]: the first on ties, a NaN above
// every number, as exec/cpu.ArgMax. The decode step points out at the token
// its next step's Embedding reads, so sampling stays on the device.
func (k *Kernels) ArgMax(s Queue, dt cuda.DType, out, x cuda.DevicePtr, T, V int) error {
	return k.on(s).one(lower.ArgMax(dt.String(), ptr(out), ptr(x), T, V))
}
