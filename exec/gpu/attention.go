package gpu

import (
	"os"

	"lagc/cuda"
	"lagc/lower"
)

// Attention launchers: causal GQA attention over a KVLayer, float32 scores
// and online softmax (lower/kernels_attention.go chooses the kernels).
// Query head h uses kv head h/(nh/NKV); a sliding layer's query at
// position p sees keys j with p-Window < j <= p.

// prefillTC turns the tensor-core prefill attention on (the default).
// LAGC_PREFILL_ATTN=ffma keeps every call on the FFMA kernel (A/B timing,
// or a way around a suspected kernel bug without a rebuild); tests flip it
// to time both kernels.
var prefillTC = os.Getenv("LAGC_PREFILL_ATTN") != "ffma"

// PrefillFFMA reports whether LAGC_PREFILL_ATTN=ffma asks for the FFMA
// prefill attention (lower.Options.PrefillFFMA).
func PrefillFFMA() bool { return !prefillTC }

// DecodeSplits is the number of blocks per kv head AttentionDecode splits
// the keys over (lower.DecodeSplits).
func (k *Kernels) DecodeSplits(c KVLayer) int { return lower.DecodeSplits(c.Slots, c.NKV, k.SMs()) }

// DecodeWorkspaceBytes is the workspace AttentionDecode needs for nh query
// heads (0 when it does not split).
func (k *Kernels) DecodeWorkspaceBytes(c KVLayer, nh int) int64 {
	return lower.DecodeWorkspace(k.DecodeSplits(c), nh, c.HeadDim)
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
	if kx == 0 || vx == 0 {
		return errNull("AttentionDecodeAppend", "k and v rows")
	}
	return k.attentionDecode(s, dt, c, out, q, kx, vx, pos, nh, scale, ws, 0)
}

// attentionDecode runs with an explicit split count, or DecodeSplits(c)
// when nsplit is 0 (tests force both paths).
func (k *Kernels) attentionDecode(s Queue, dt cuda.DType, c KVLayer, out, q, kx, vx, pos cuda.DevicePtr, nh int, scale float32, ws cuda.DevicePtr, nsplit int) error {
	return k.on(s).all(lower.AttentionDecode(lower.AttentionDecodeArgs{DType: dt.String(), Cache: c.cache(),
		Out: ptr(out), Q: ptr(q), K: ptr(kx), V: ptr(vx), Pos: ptr(pos), NH: nh, Scale: scale, Workspace: ptr(ws),
		Splits: nsplit, SMs: k.SMs()}))
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
	return k.on(s).one(lower.AttentionPrefill(lower.AttentionPrefillArgs{DType: dt.String(), Cache: c.cache(),
		Out: ptr(out), Q: ptr(q), K: ptr(kx), V: ptr(vx), LDQ: ldq, LDKV: ldkv, Pos: ptr(pos), T: T, NH: nh, Scale: scale,
		FFMA: !prefillTC}))
}
