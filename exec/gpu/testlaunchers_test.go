package gpu

import (
	"context"
	"fmt"

	"lagc/cuda"
	"lagc/cuda/cudatest"
	"lagc/lower"
)

// Launchers only the tests use: kernels the plan does not run (its
// matmul_swiglu fuses swiglu into the GEMM epilogue; its q/k norms are
// rms_norm steps before rope).

// SwiGLU computes out[r, c] = silu(a[r, c]) * b[r, c] for out [rows, n]
// (contiguous); rows of a and b are ld elements apart (0: n).
func (k *Kernels) SwiGLU(s Queue, dt cuda.DType, out, a, b cuda.DevicePtr, rows, n, ld int) error {
	if ld == 0 {
		ld = n
	}
	switch {
	case dt != cuda.F32 && dt != cuda.BF16 && dt != cuda.F16:
		return fmt.Errorf("SwiGLU: dtype %v", dt)
	case rows <= 0 || n <= 0 || ld < n:
		return fmt.Errorf("SwiGLU: rows %d, n %d, ld %d", rows, n, ld)
	case out == 0 || a == 0 || b == 0:
		return fmt.Errorf("SwiGLU: null pointer")
	}
	spec, err := cudatest.Spec("test_elementwise.cu", "swiglu", dt)
	if err != nil {
		return err
	}
	kn, err := k.Dev.Compile(context.Background(), spec)
	if err != nil {
		return err
	}
	blocks := max(1, min((int64(rows)*int64(n)+255)/256, 8192))
	return s.Launch(kn, cuda.Dim(uint32(blocks)), cuda.Dim(256), 0, int32(rows), int32(n), a, b, int64(ld), out)
}

// QKNormRope is the fused per-head q/k RMS norm and rope, in place: token
// t's row at x + t*ld elements holds nq query heads then nk key heads of d
// channels (ld 0 means (nq+nk)*d), normalised with wq and wk (f32 [d]; a
// zero pointer skips that norm), then rotated at positions pos [T].
func (k *Kernels) QKNormRope(s Queue, dt cuda.DType, x cuda.DevicePtr, ld, T, nq, nk, d int, wq, wk cuda.DevicePtr, eps float32, pos cuda.DevicePtr, r Rope) error {
	if ld == 0 {
		ld = (nq + nk) * d
	}
	return k.on(s).one(lower.NormRoPE(lower.NormRoPEArgs{DType: dt.String(), Out: ptr(x), X: ptr(x), LD: ld, T: T, NQ: nq, NK: nk, D: d,
		WQ: ptr(wq), WK: ptr(wk), Eps: eps, Pos: ptr(pos), Table: r.table(), SMs: k.SMs()}))
}
