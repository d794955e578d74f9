package gpu

import (
	"fmt"

	"lagc/cuda"
)

// RMSNorm computes out = w * x / sqrt(mean(x^2) + eps) over each of rows
// rows of n values (x and out [rows, n] of dtype dt, contiguous), in float32
// as transformers' LagunaRMSNorm (no "+1" on w). The weight w is float32
// [n] whatever dt is: norm weights are tiny, and the loader widens them.
// out may alias x.
func (k *Kernels) RMSNorm(s Queue, dt cuda.DType, out, x, w cuda.DevicePtr, rows, n int, eps float32) error {
	return k.rmsNorm("RMSNorm", s, dt, dt, out, x, w, rows, n, eps)
}

// RMSNormCast is RMSNorm reading x as xdt and writing out as odt, e.g. an
// f32 residual stream normalised into a bf16 GEMM input.
func (k *Kernels) RMSNormCast(s Queue, xdt, odt cuda.DType, out, x, w cuda.DevicePtr, rows, n int, eps float32) error {
	return k.rmsNorm("RMSNormCast", s, xdt, odt, out, x, w, rows, n, eps)
}

func (k *Kernels) rmsNorm(op string, s Queue, xdt, odt cuda.DType, out, x, w cuda.DevicePtr, rows, n int, eps float32) error {
	if err := checkDT(op, xdt); err != nil {
		return err
	}
	if err := checkDT(op, odt); err != nil {
		return err
	}
	if err := checkPos(op, "rows", rows, "n", n); err != nil {
		return err
	}
	if !(eps >= 0) {
		return fmt.Errorf("gpu.%s: eps = %g must not be negative", op, eps)
	}
	if err := checkPtrs(op, "out", out, "x", x, "w", w); err != nil {
		return err
	}
	dts := []cuda.DType{xdt, odt}
	// Short rows (per-head norms, small models): a warp per row, 8 per block.
	// Long rows (the hidden state): a block per row, 8 values per thread
	// (one 16-byte load of bf16; norm.cu keeps them in registers).
	if n < 1024 {
		kn, err := k.op("norm.cu", "rms_norm_warp", dts)
		if err != nil {
			return fmt.Errorf("gpu.%s: %w", op, err)
		}
		const rowsPerBlock = 8
		if err := s.Launch(kn, cuda.Dim(uint32(ceilDiv(rows, rowsPerBlock))), cuda.Dim(32*rowsPerBlock), 0,
			int32(rows), int32(n), eps, x, w, out); err != nil {
			return fmt.Errorf("gpu.%s: %w", op, err)
		}
		return nil
	}
	kn, err := k.op("norm.cu", "rms_norm_block", dts)
	if err != nil {
		return fmt.Errorf("gpu.%s: %w", op, err)
	}
	threads := min(1024, 32*ceilDiv(ceilDiv(n, 8), 32))
	if err := s.Launch(kn, cuda.Dim(uint32(rows)), cuda.Dim(uint32(threads)), 0,
		int32(rows), int32(n), eps, x, w, out); err != nil {
		return fmt.Errorf("gpu.%s: %w", op, err)
	}
	return nil
}
