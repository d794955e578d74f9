package gpu

import (
	"fmt"

	"lagc/cuda"
	"lagc/lower"
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

func (r Rope) table() lower.RoPETable {
	return lower.RoPETable{InvFreq: ptr(r.InvFreq), RotaryDim: r.RotaryDim, AttnFactor: r.AttnFactor}
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
	return k.NormRoPE(s, dt, out, x, 0, pos, T, n, d, 0, r)
}

// NormRoPE is norm_rope: each head of x [T,n,d] RMS-normalised with w
// (f32 [d]) and eps, then rotated as RoPE does, in one kernel that keeps
// the normalised head in float32; out may alias x. A zero w skips the norm.
func (k *Kernels) NormRoPE(s Queue, dt cuda.DType, out, x, w, pos cuda.DevicePtr, T, n, d int, eps float32, r Rope) error {
	return k.on(s).one(lower.NormRoPE(lower.NormRoPEArgs{DType: dt.String(), Out: ptr(out), X: ptr(x), LD: n * d,
		T: T, NQ: n, D: d, WQ: ptr(w), Eps: eps, Pos: ptr(pos), Table: r.table(), SMs: k.SMs()}))
}
