package gpu

import (
	"fmt"

	"lagc/cuda"
	"lagc/prep"
)

// Rope is one layer type's rotary embedding on the device: the inverse
// frequencies of its RotaryDim/2 channel pairs (float32, computed on the
// host by prep.NewRopeTable exactly as transformers does, default or YaRN)
// and the factor cos and sin are multiplied by (YaRN's attention factor).
type Rope struct {
	InvFreq    cuda.DevicePtr // RotaryDim/2 float32
	RotaryDim  int
	AttnFactor float32
}

// RopeTableBytes is the device memory UploadRope writes for tab.
func RopeTableBytes(tab *prep.RopeTable) int64 { return int64(4 * len(tab.InvFreq)) }

// UploadRope copies tab's inverse frequencies to dst (RopeTableBytes(tab)
// bytes, owned by the caller) and returns the launchers' view of it.
func UploadRope(s Queue, dst cuda.DevicePtr, tab *prep.RopeTable) (Rope, error) {
	if tab == nil || tab.RotaryDim <= 0 || tab.RotaryDim%2 != 0 || len(tab.InvFreq) != tab.RotaryDim/2 {
		return Rope{}, fmt.Errorf("gpu.UploadRope: malformed rope table")
	}
	if dst == 0 {
		return Rope{}, fmt.Errorf("gpu.UploadRope: null destination")
	}
	if err := cuda.Upload(s, dst, tab.InvFreq); err != nil {
		return Rope{}, fmt.Errorf("gpu.UploadRope: %w", err)
	}
	return Rope{InvFreq: dst, RotaryDim: tab.RotaryDim, AttnFactor: tab.AttnFactor}, nil
}

// RoPE applies rotary position embedding (NeoX rotate-half on the first
// r.RotaryDim channels of each head; the rest pass through) to x [T,n,d]
// at the positions pos [T] (int32 in device memory: one graph serves every
// decode step), writing out [T,n,d]; out may alias x.
func (k *Kernels) RoPE(s Queue, dt cuda.DType, out, x, pos cuda.DevicePtr, T, n, d int, r Rope) error {
	if err := checkPtrs("RoPE", "out", out, "x", x); err != nil {
		return err
	}
	return k.normRope("RoPE", s, dt, out, x, n*d, T, n, 0, d, 0, 0, 0, pos, r)
}

// QKNormRope is the fused per-head q/k RMS norm and rope of Laguna's
// attention, in place: token t's row at x + t*ld elements holds nq query
// heads then nk key heads of d channels (the q and k columns of a fused
// QKV output; ld 0 means (nq+nk)*d). Query heads are normalised with wq,
// key heads with wk (float32 [d]; a zero pointer skips that norm), then
// rotated at positions pos [T]. For separate q and k buffers call it once
// for each, with nk = 0.
func (k *Kernels) QKNormRope(s Queue, dt cuda.DType, x cuda.DevicePtr, ld, T, nq, nk, d int, wq, wk cuda.DevicePtr, eps float32, pos cuda.DevicePtr, r Rope) error {
	if ld == 0 {
		ld = (nq + nk) * d
	}
	if err := checkPtrs("QKNormRope", "x", x); err != nil {
		return err
	}
	return k.normRope("QKNormRope", s, dt, x, x, ld, T, nq, nk, d, wq, wk, eps, pos, r)
}

func (k *Kernels) normRope(op string, s Queue, dt cuda.DType, out, x cuda.DevicePtr, ld, T, nh1, nh2, d int, w1, w2 cuda.DevicePtr, eps float32, pos cuda.DevicePtr, r Rope) error {
	if err := checkDT(op, dt); err != nil {
		return err
	}
	if err := checkPos(op, "T", T, "heads", nh1+nh2, "d", d); err != nil {
		return err
	}
	if nh1 < 0 || nh2 < 0 {
		return fmt.Errorf("gpu.%s: negative head count", op)
	}
	if ld < (nh1+nh2)*d {
		return fmt.Errorf("gpu.%s: row stride %d is below %d heads x %d channels", op, ld, nh1+nh2, d)
	}
	if r.RotaryDim <= 0 || r.RotaryDim%2 != 0 || r.RotaryDim > d {
		return fmt.Errorf("gpu.%s: rotary width %d must be even and in [2, head_dim %d]", op, r.RotaryDim, d)
	}
	if err := checkPtrs(op, "pos", pos, "rope table", r.InvFreq); err != nil {
		return err
	}
	if !(eps >= 0) {
		return fmt.Errorf("gpu.%s: eps = %g must not be negative", op, eps)
	}
	kn, err := k.op("rope.cu", "qk_norm_rope", []cuda.DType{dt})
	if err != nil {
		return fmt.Errorf("gpu.%s: %w", op, err)
	}
	const warps = 4 // one warp per (token, head)
	items := T * (nh1 + nh2)
	shmem := warps * d * 4
	if err := k.allowShared(kn, shmem); err != nil {
		return fmt.Errorf("gpu.%s: %w", op, err)
	}
	if err := s.Launch(kn, cuda.Dim(uint32(ceilDiv(items, warps))), cuda.Dim(32*warps), shmem,
		int32(T), int32(nh1), int32(nh2), int32(d), int64(ld), int64(ld), x, out, w1, w2, eps,
		pos, r.InvFreq, int32(r.RotaryDim), r.AttnFactor); err != nil {
		return fmt.Errorf("gpu.%s: %w", op, err)
	}
	return nil
}
