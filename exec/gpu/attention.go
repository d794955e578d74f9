package gpu

import (
	"fmt"

	"lagc/cuda"
)

// Attention launchers: causal GQA attention over a KVLayer, float32 scores
// and online softmax (attention.cu). Query head h uses kv head
// h/(nh/NKV); a sliding layer's query at position p sees keys j with
// p-Window < j <= p.

// Tile constants of attention.cu.
const (
	decodeTile   = 32 // DEC_TILE: keys per tile of attn_decode
	decodeHeads  = 16 // DEC_HEADS: query heads (warps) per attn_decode block at most
	prefillRows  = 32 // ATT_BQ
	prefillKeys  = 32 // ATT_BK
	maxHeadDim   = 256
	minSplitKeys = 32 // a decode split covers at least this many slots
	maxSplits    = 4096
)

// DecodeSplits is the number of blocks per kv head AttentionDecode splits
// the keys over (flash-decoding). It depends on the cache's capacity only,
// never on the position, so a captured graph stays valid: about two blocks
// per SM over all kv heads, and no split shorter than one 32-key tile (a
// 512-slot ring: 16 splits). 1 means no split (and no combine launch).
func (k *Kernels) DecodeSplits(c KVLayer) int {
	sms := max(k.props().SMs, 1)
	byLen := ceilDiv(c.Slots, minSplitKeys)
	byBlocks := max(1, 2*sms/max(c.NKV, 1))
	return max(1, min(byLen, byBlocks))
}

// DecodeWorkspaceBytes is the workspace AttentionDecode needs for nh query
// heads (0 when it does not split): float32 partial outputs, maxima and
// sums of every split.
func (k *Kernels) DecodeWorkspaceBytes(c KVLayer, nh int) int64 {
	return decodeWorkspace(k.DecodeSplits(c), nh, c.HeadDim)
}

func decodeWorkspace(nsplit, nh, d int) int64 {
	if nsplit <= 1 {
		return 0
	}
	return 4 * int64(nsplit) * int64(nh) * int64(d+2)
}

// AttentionDecode is the decode step's attention (one token): q [nh, d]
// (contiguous heads; the start of a fused QKV row will do) attends over the
// cache, which already holds this step's k and v at the position in pos
// (one int32, device memory; see KVAppend), writing out [nh, d]. ws is a
// workspace of DecodeWorkspaceBytes (may be 0 when that is 0). scale is
// usually 1/sqrt(d).
func (k *Kernels) AttentionDecode(s Queue, dt cuda.DType, c KVLayer, out, q, pos cuda.DevicePtr, nh int, scale float32, ws cuda.DevicePtr) error {
	return k.attentionDecode(s, dt, c, out, q, 0, 0, pos, nh, scale, ws, 0)
}

// AttentionDecodeAppend is KVAppend and AttentionDecode in one launch (and
// the combine): kx and vx are this token's key and value rows [NKV, d]
// (contiguous), written into the cache at the position in pos by the
// attention kernel itself, which reads that key from them.
func (k *Kernels) AttentionDecodeAppend(s Queue, dt cuda.DType, c KVLayer, out, q, kx, vx, pos cuda.DevicePtr, nh int, scale float32, ws cuda.DevicePtr) error {
	if err := checkPtrs("AttentionDecodeAppend", "k", kx, "v", vx); err != nil {
		return err
	}
	return k.attentionDecode(s, dt, c, out, q, kx, vx, pos, nh, scale, ws, 0)
}

// decodeGeometry is attn_decode's launch for nh query heads over c: heads
// (warps) per block, blocks per kv head along z, the NCH template argument
// (128-channel chunks per lane) and the dynamic shared memory in bytes.
func decodeGeometry(c KVLayer, nh int) (heads, zblocks, nch, shmem int) {
	group := nh / c.NKV
	heads = min(group, decodeHeads)
	zblocks = ceilDiv(group, heads)
	d4 := (c.HeadDim + 3) &^ 3
	kp := d4 + (36-d4%32)%32 // DEC pitch: 4 mod 32 floats
	nch = ceilDiv(d4, 128)
	shmem = 4 * (heads*d4 + decodeTile*kp + decodeTile*d4)
	return heads, zblocks, nch, shmem
}

// attentionDecode runs with an explicit split count, or DecodeSplits(c)
// when nsplit is 0 (tests force both paths); kx, vx zero: the cache holds
// this step's k, v already.
func (k *Kernels) attentionDecode(s Queue, dt cuda.DType, c KVLayer, out, q, kx, vx, pos cuda.DevicePtr, nh int, scale float32, ws cuda.DevicePtr, nsplit int) error {
	const op = "AttentionDecode"
	if err := k.checkAttention(op, dt, c, nh); err != nil {
		return err
	}
	if err := checkPtrs(op, "out", out, "q", q, "pos", pos); err != nil {
		return err
	}
	if (kx == 0) != (vx == 0) {
		return fmt.Errorf("gpu.%s: k and v rows must be given together", op)
	}
	if nsplit == 0 {
		nsplit = k.DecodeSplits(c)
	}
	if nsplit < 1 || nsplit > maxSplits {
		return fmt.Errorf("gpu.%s: %d splits (1 to %d)", op, nsplit, maxSplits)
	}
	if nsplit > 1 && ws == 0 {
		return fmt.Errorf("gpu.%s: %d splits need a workspace of %d bytes", op, nsplit, decodeWorkspace(nsplit, nh, c.HeadDim))
	}
	d := c.HeadDim
	heads, zb, nch, shmem := decodeGeometry(c, nh)
	kn, err := k.op("attention.cu", "attn_decode", []cuda.DType{dt}, int64(nch))
	if err != nil {
		return fmt.Errorf("gpu.%s: %w", op, err)
	}
	if err := k.allowShared(kn, shmem); err != nil {
		return fmt.Errorf("gpu.%s: %w", op, err)
	}
	var partAcc, partML cuda.DevicePtr
	if nsplit > 1 {
		partAcc = ws
		partML = ws.Add(4 * int64(nsplit) * int64(nh) * int64(d))
	}
	if err := s.Launch(kn, cuda.Dim(uint32(nsplit), uint32(c.NKV), uint32(zb)), cuda.Dim(uint32(32*heads)), shmem,
		int32(nh), int32(c.NKV), int32(d), int32(c.Window), int32(c.Slots), int32(nsplit), scale,
		pos, q, kx, vx, c.K, c.V, out, partAcc, partML); err != nil {
		return fmt.Errorf("gpu.%s: %w", op, err)
	}
	if nsplit == 1 {
		return nil
	}
	comb, err := k.op("attention.cu", "attn_decode_combine", []cuda.DType{dt})
	if err != nil {
		return fmt.Errorf("gpu.%s: %w", op, err)
	}
	if err := s.Launch(comb, cuda.Dim(uint32(nh)), cuda.Dim(uint32(min(128, 32*ceilDiv(d, 32)))), 4*(nsplit+1),
		int32(nh), int32(d), int32(nsplit), partAcc, partML, out); err != nil {
		return fmt.Errorf("gpu.%s: %w", op, err)
	}
	return nil
}

// AttentionPrefill is a prefill chunk's attention: T queries q [T, nh, d]
// (rows ldq elements apart; 0: nh*d) at consecutive positions pos[0],
// pos[0]+1, ... (int32 [T], device memory) attend over the cache's keys
// before pos[0] and the chunk's own keys kx, vx [T, NKV, d] (rows ldkv
// apart; 0: NKV*d), read directly, so a chunk longer than a sliding window
// never reads a ring slot it overwrites. out is [T, nh, d], contiguous.
// Key tiles wholly outside a query tile's window are skipped. Afterwards
// store the chunk: KVAppend (linear) or KVCompactRing (ring).
func (k *Kernels) AttentionPrefill(s Queue, dt cuda.DType, c KVLayer, out, q, kx, vx cuda.DevicePtr, ldq, ldkv int, pos cuda.DevicePtr, T, nh int, scale float32) error {
	const op = "AttentionPrefill"
	if err := k.checkAttention(op, dt, c, nh); err != nil {
		return err
	}
	if err := checkPos(op, "T", T); err != nil {
		return err
	}
	d := c.HeadDim
	if ldq == 0 {
		ldq = nh * d
	}
	if ldkv == 0 {
		ldkv = c.NKV * d
	}
	if ldq < nh*d || ldkv < c.NKV*d {
		return fmt.Errorf("gpu.%s: row strides %d (q), %d (k, v) are below the rows %d, %d", op, ldq, ldkv, nh*d, c.NKV*d)
	}
	if err := checkPtrs(op, "out", out, "q", q, "k", kx, "v", vx, "pos", pos); err != nil {
		return err
	}
	if prefillTC && prefillTCSupports(dt, d) { // tensor cores (attention_prefill_tc.go)
		return k.attentionPrefillTC(s, c, out, q, kx, vx, ldq, ldkv, pos, T, nh, scale)
	}
	rows := int64(T) * int64(nh/c.NKV)
	blocks := (rows + prefillRows - 1) / prefillRows
	if blocks > 1<<31-1 {
		return fmt.Errorf("gpu.%s: %d tokens are too many for one launch", op, T)
	}
	dch := ceilDiv(d, 32)
	kn, err := k.op("attention.cu", "attn_prefill", []cuda.DType{dt}, int64(dch))
	if err != nil {
		return fmt.Errorf("gpu.%s: %w", op, err)
	}
	dp := 32 * dch
	shmem := 4 * (prefillRows*(dp+1) + prefillKeys*(dp+1) + prefillKeys*dp + prefillRows*(prefillKeys+1) + 4*prefillRows)
	if err := k.allowShared(kn, shmem); err != nil {
		return fmt.Errorf("gpu.%s: %w", op, err)
	}
	if err := s.Launch(kn, cuda.Dim(uint32(blocks), uint32(c.NKV)), cuda.Dim(128), shmem,
		int32(T), int32(nh), int32(c.NKV), int32(d), int32(c.Window), int32(c.Slots), scale, pos,
		q, int64(ldq), kx, vx, int64(ldkv), c.K, c.V, out, int64(nh*d)); err != nil {
		return fmt.Errorf("gpu.%s: %w", op, err)
	}
	return nil
}

func (k *Kernels) checkAttention(op string, dt cuda.DType, c KVLayer, nh int) error {
	if err := checkDT(op, dt); err != nil {
		return err
	}
	if err := c.check(op); err != nil {
		return err
	}
	if err := checkPos(op, "nh", nh); err != nil {
		return err
	}
	if nh%c.NKV != 0 {
		return fmt.Errorf("gpu.%s: %d query heads are not a multiple of %d kv heads", op, nh, c.NKV)
	}
	if c.HeadDim > maxHeadDim {
		return fmt.Errorf("gpu.%s: head_dim %d exceeds %d", op, c.HeadDim, maxHeadDim)
	}
	return nil
}
