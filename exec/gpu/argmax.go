package gpu

import (
	"fmt"

	"lagc/cuda"
)

// ArgMax writes the index of the largest element of each row of x [T, V]
// (dtype dt; the logits) to out int32 [T]: the first on ties, a NaN above
// every number, as exec/cpu.ArgMax. The decode step points out at the token
// its next step's Embedding reads, so sampling stays on the device.
func (k *Kernels) ArgMax(s Queue, dt cuda.DType, out, x cuda.DevicePtr, T, V int) error {
	const op = "ArgMax"
	if err := checkDT(op, dt); err != nil {
		return err
	}
	if err := checkPos(op, "T", T, "V", V); err != nil {
		return err
	}
	if err := checkPtrs(op, "out", out, "x", x); err != nil {
		return err
	}
	kn, err := k.op("argmax.cu", "argmax", []cuda.DType{dt})
	if err != nil {
		return fmt.Errorf("gpu.%s: %w", op, err)
	}
	threads := min(1024, 32*ceilDiv(V, 32))
	if err := s.Launch(kn, cuda.Dim(uint32(T)), cuda.Dim(uint32(threads)), 0, int32(T), int32(V), x, out); err != nil {
		return fmt.Errorf("gpu.%s: %w", op, err)
	}
	return nil
}
