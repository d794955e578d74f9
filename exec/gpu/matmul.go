package gpu

import (
	"fmt"

	"lagc/cuda"
	"lagc/lower"
)

// MatMulArgs is one matmul op, y = x w^T, with weights in HF layout.
type MatMulArgs struct {
	T, K, N int // x [T,K], w [N,K] ([2N,K] with SwiGLU), y [T,N]
	X, W, Y cuda.DevicePtr
	// Element types: F32 or BF16 each, in any combination.
	XType, WType, YType cuda.DType
	// Accumulate adds into y (y += x w^T): the residual folded into the
	// epilogue.
	Accumulate bool
	// SwiGLU: w is [gate; up] ([2N,K], gate rows first) and
	// y = silu(x gate^T) * (x up^T).
	SwiGLU bool
	// Tile forces the tensor-core tile; zero fields choose automatically.
	Tile MMATile
	// CC is the target compute capability (major*10+minor): 90 and up
	// runs T > GEMVMaxRows on the TMA + wgmma GEMM where it applies; 0
	// keeps the mma.sync one.
	CC int
	// HopperBN forces the wgmma GEMM's tile width (128 or 256; 0 chooses).
	HopperBN int
	// HopperSched forces the wgmma GEMM's consumer schedule
	// (lower.SchedAuto chooses).
	HopperSched lower.HopperSched
	// CublasLt lets lower put the GEMM on cuBLASLt (lower.MatMulArgs;
	// needs Kernels.Lt).
	CublasLt bool
}

// MMATile is a tensor-core GEMM tile (lower.MMATile).
type MMATile = lower.MMATile

// GEMVMaxRows is the largest T the decode GEMV serves; larger T runs a GEMM.
const GEMVMaxRows = lower.GEMVMaxRows

// DefaultMMAK is the K step of the tensor-core tiles when MMATile.K is 0.
const DefaultMMAK = lower.DefaultMMAK

func (a MatMulArgs) lower(sms int) lower.MatMulArgs {
	return lower.MatMulArgs{T: a.T, K: a.K, N: a.N, X: ptr(a.X), W: ptr(a.W), Y: ptr(a.Y),
		XType: a.XType.String(), WType: a.WType.String(), YType: a.YType.String(),
		Accumulate: a.Accumulate, SwiGLU: a.SwiGLU, Tile: a.Tile, SMs: sms, CC: a.CC, HopperBN: a.HopperBN, HopperSched: a.HopperSched, CublasLt: a.CublasLt}
}

// MatMulLaunch returns the launch MatMul queues for a (lower.MatMul's
// choice of kernel), compiling the kernel if needed.
func (k *Kernels) MatMulLaunch(a MatMulArgs) (KernelLaunch, error) {
	l, err := lower.MatMul(a.lower(k.SMs()))
	if err != nil {
		return KernelLaunch{}, fmt.Errorf("gpu.%w", err)
	}
	return k.Bind(l, deviceBase)
}

// MatMul queues y = x w^T (see MatMulArgs) on s.
func (k *Kernels) MatMul(s Queue, a MatMulArgs) error {
	l, err := k.MatMulLaunch(a)
	if err != nil {
		return err
	}
	if err := l.Launch(s); err != nil {
		return fmt.Errorf("matmul T=%d K=%d N=%d: %w", a.T, a.K, a.N, err)
	}
	return nil
}
