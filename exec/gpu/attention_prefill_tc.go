package gpu

import (
	"fmt"
	"os"

	"lagc/cuda"
)

// The tensor-core prefill attention (attention_prefill_tc.cu): the bf16
// fast path of AttentionPrefill, FlashAttention-2 style with mma.sync.
// Same semantics as attn_prefill; head_dim 64 and 128 only.

// Tile constants of attention_prefill_tc.cu.
const (
	tcRows    = 64  // FA_BQ: (token, head) rows per CTA
	tcKeys    = 64  // FA_BK: keys per tile
	tcThreads = 128 // FA_THREADS
)

// prefillTC turns the tensor-core path on (the default).
// LAGC_PREFILL_ATTN=ffma keeps every call on attn_prefill (A/B timing, or a
// way around a suspected kernel bug without a rebuild); tests flip it to
// time both kernels.
var prefillTC = os.Getenv("LAGC_PREFILL_ATTN") != "ffma"

// prefillTCSupports reports whether attn_prefill_tc is built for dtype dt
// and head_dim d.
func prefillTCSupports(dt cuda.DType, d int) bool {
	return dt == cuda.BF16 && (d == 64 || d == 128)
}

// prefillTCSmem mirrors FaCfg<D>::SMEM: Q and two stages of K and V, bf16
// rows padded to d+8 elements.
func prefillTCSmem(d int) int {
	return 2 * (d + 8) * (tcRows + 4*tcKeys)
}

// prefillTCVec reports whether the 16-byte (cp.async) variant may run:
// every pointer 16-byte aligned and the row strides (in bf16 elements)
// multiples of 8. Otherwise the element-wise variant runs.
func prefillTCVec(ldq, ldkv int, ptrs ...cuda.DevicePtr) bool {
	if ldq%8 != 0 || ldkv%8 != 0 {
		return false
	}
	for _, p := range ptrs {
		if uint64(p)%16 != 0 {
			return false
		}
	}
	return true
}

// attentionPrefillTC launches attn_prefill_tc. The arguments are those of
// AttentionPrefill after its checks, with ldq and ldkv resolved (elements);
// dt is bf16 and prefillTCSupports holds. out is [T, nh, d], contiguous.
func (k *Kernels) attentionPrefillTC(s Queue, c KVLayer, out, q, kx, vx cuda.DevicePtr, ldq, ldkv int, pos cuda.DevicePtr, T, nh int, scale float32) error {
	const op = "AttentionPrefill"
	d := c.HeadDim
	if !prefillTCSupports(cuda.BF16, d) {
		return fmt.Errorf("gpu.%s: the tensor-core kernel has no head_dim %d", op, d)
	}
	rows := int64(T) * int64(nh/c.NKV)
	blocks := (rows + tcRows - 1) / tcRows
	if blocks > 1<<31-1 || rows > 1<<31-1 {
		return fmt.Errorf("gpu.%s: %d tokens are too many for one launch", op, T)
	}
	vec := int64(0)
	if prefillTCVec(ldq, ldkv, out, q, kx, vx, c.K, c.V) {
		vec = 1
	}
	kn, err := k.op("attention_prefill_tc.cu", "attn_prefill_tc", []cuda.DType{cuda.BF16}, int64(d), vec)
	if err != nil {
		return fmt.Errorf("gpu.%s: %w", op, err)
	}
	shmem := prefillTCSmem(d)
	if err := k.allowShared(kn, shmem); err != nil {
		return fmt.Errorf("gpu.%s: %w", op, err)
	}
	if err := s.Launch(kn, cuda.Dim(uint32(blocks), uint32(c.NKV)), cuda.Dim(tcThreads), shmem,
		int32(T), int32(nh), int32(c.NKV), int32(c.Window), int32(c.Slots), scale, pos,
		q, int64(ldq), kx, vx, int64(ldkv), c.K, c.V, out, int64(nh*d)); err != nil {
		return fmt.Errorf("gpu.%s: %w", op, err)
	}
	return nil
}
