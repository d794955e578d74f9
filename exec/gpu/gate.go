package gpu

import (
	"fmt"

	"lagc/cuda"
)

// SoftplusGate computes Laguna's attention output gate out = x *
// softplus(g) (torch's softplus, threshold 20, float32 math). x and out are
// [T, nh*d], contiguous (out may alias x); g is [T, G] with rows ldg
// elements apart (0: G), e.g. the gate columns of a fused QKVG output. G ==
// nh gates per head (broadcast over its d channels), G == nh*d per element.
func (k *Kernels) SoftplusGate(s Queue, dt cuda.DType, out, x, g cuda.DevicePtr, T, nh, d, G, ldg int) error {
	const op = "SoftplusGate"
	if err := checkDT(op, dt); err != nil {
		return err
	}
	if err := checkPos(op, "T", T, "nh", nh, "d", d, "G", G); err != nil {
		return err
	}
	if G != nh && G != nh*d {
		return fmt.Errorf("gpu.%s: gate width %d is neither nh = %d (per-head) nor nh*d = %d (per-element)", op, G, nh, nh*d)
	}
	if ldg == 0 {
		ldg = G
	}
	if ldg < G {
		return fmt.Errorf("gpu.%s: gate row stride %d is below its width %d", op, ldg, G)
	}
	if err := checkPtrs(op, "out", out, "x", x, "g", g); err != nil {
		return err
	}
	kn, err := k.op("gate.cu", "softplus_gate", []cuda.DType{dt})
	if err != nil {
		return fmt.Errorf("gpu.%s: %w", op, err)
	}
	gr, bl := grid1D(int64(T) * int64(nh) * int64(d))
	if err := s.Launch(kn, gr, bl, 0, int32(T), int32(nh), int32(d), int32(G), x, g, int64(ldg), out); err != nil {
		return fmt.Errorf("gpu.%s: %w", op, err)
	}
	return nil
}
