package gpu

import (
	"fmt"

	"lagc/cuda"
)

// Embedding gathers rows of table [V,H] into out [T,H] for the T token ids
// in device memory at tokens (int32; the previous step's ArgMax writes
// there, so a captured decode graph serves every step). table and out are
// of dtype dt. A kernel cannot fail: an id outside [0, V) gives a NaN row
// (the host checks prompt ids before upload). T must be at most 65535 per
// launch.
func (k *Kernels) Embedding(s Queue, dt cuda.DType, out, tokens, table cuda.DevicePtr, T, V, H int) error {
	const op = "Embedding"
	if err := checkDT(op, dt); err != nil {
		return err
	}
	if err := checkPos(op, "T", T, "V", V, "H", H); err != nil {
		return err
	}
	if T > 65535 {
		return fmt.Errorf("gpu.%s: %d tokens exceed the 65535 of one launch", op, T)
	}
	if err := checkPtrs(op, "out", out, "tokens", tokens, "table", table); err != nil {
		return err
	}
	kn, err := k.op("embedding.cu", "embedding", []cuda.DType{dt})
	if err != nil {
		return fmt.Errorf("gpu.%s: %w", op, err)
	}
	const threads = 256
	bx := min(ceilDiv(H, threads), 64)
	if err := s.Launch(kn, cuda.Dim(uint32(bx), uint32(T)), cuda.Dim(threads), 0,
		int32(T), int32(H), int32(V), tokens, table, out); err != nil {
		return fmt.Errorf("gpu.%s: %w", op, err)
	}
	return nil
}
