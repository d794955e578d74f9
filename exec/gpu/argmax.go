package gpu

import (
	"lagc/cuda"
	"lagc/lower"
)

// ArgMax writes the index of the largest element of each row of x [T, V]
// (dtype dt; the logits) to out int32 [T]: the first on ties, a NaN above
// every number, as exec/cpu.ArgMax. The decode step points out at the token
// its next step's Embedding reads, so sampling stays on the device. Rows
// are split over several blocks whose candidates meet in ws, a workspace
// of ArgMaxWorkspace(T, V) bytes (0 may be passed when that is 0).
func (k *Kernels) ArgMax(s Queue, dt cuda.DType, out, x, ws cuda.DevicePtr, T, V int) error {
	return k.on(s).all(lower.ArgMax(dt.String(), ptr(out), ptr(x), ptr(ws), T, V, k.SMs()))
}

// ArgMaxWorkspace is the workspace ArgMax needs for T rows of V.
func (k *Kernels) ArgMaxWorkspace(T, V int) int64 { return lower.ArgMaxWorkspace(T, V, k.SMs()) }
