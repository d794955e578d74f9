package gpu

import (
	"fmt"
	"os"
	"strings"

	"lagc/cuda"
	"lagc/lower"
)

// Attention launchers: causal GQA attention over a KVLayer, float32 scores
// and online softmax (lower/kernels_attention.go chooses the kernels).
// Query head h uses kv head h/(nh/NKV); a sliding layer's query at
// position p sees keys j with p-Window < j <= p.

// prefillAttnMode is what a LAGC_PREFILL_ATTN value asks of the prefill
// attention: the FFMA kernel, the mma.sync one, or attn_prefill_wg's
// rows a CTA and stages of K and V at 128 rows (zero: lower's defaults).
type prefillAttnMode struct {
	ffma, tc     bool
	rows, stages int
}

// prefillAttnModes holds every value LAGC_PREFILL_ATTN takes ("" and
// wgmma: the default), in the order errors list them: PlanOptions refuses
// others, and the variables below take their defaults from the same table,
// so a value cannot be accepted by one and ignored by the other.
var prefillAttnModes = []struct {
	name string
	mode prefillAttnMode
}{{"wgmma", prefillAttnMode{}}, {"wg64", prefillAttnMode{rows: 64}}, {"wg128", prefillAttnMode{rows: 128}},
	{"wg128x2", prefillAttnMode{rows: 128, stages: 2}}, {"tc", prefillAttnMode{tc: true}}, {"ffma", prefillAttnMode{ffma: true}}}

// prefillAttnFromEnv is LAGC_PREFILL_ATTN's mode, or an error naming the
// values it takes.
func prefillAttnFromEnv() (prefillAttnMode, error) {
	v := os.Getenv("LAGC_PREFILL_ATTN")
	if v == "" {
		return prefillAttnMode{}, nil
	}
	names := make([]string, 0, len(prefillAttnModes))
	for _, m := range prefillAttnModes {
		if v == m.name {
			return m.mode, nil
		}
		names = append(names, m.name)
	}
	return prefillAttnMode{}, fmt.Errorf("LAGC_PREFILL_ATTN=%q: want %s (the default on Hopper), %s or %s", v, names[0],
		strings.Join(names[1:len(names)-1], ", "), names[len(names)-1])
}

// envPrefillAttn: the variables' defaults (an unknown value leaves them
// the default's; PlanOptions reports it).
var envPrefillAttn, _ = prefillAttnFromEnv()

// prefillTC turns the tensor-core prefill attention on (the default).
// LAGC_PREFILL_ATTN=ffma keeps every call on the FFMA kernel (A/B timing,
// or a way around a suspected kernel bug without a rebuild); tests flip it
// to time both kernels.
var prefillTC = !envPrefillAttn.ffma

// prefillWG runs the tensor-core prefill attention on warpgroup MMAs
// where that kernel applies (Hopper, head_dim 128: attn_prefill_wg, the
// default); LAGC_PREFILL_ATTN=tc keeps the mma.sync one
// (lower.Options.PrefillAttnTC). Tests flip it.
var prefillWG = !envPrefillAttn.tc

// prefillWGRows is attn_prefill_wg's rows a CTA (LAGC_PREFILL_ATTN=wg64,
// wg128 or wg128x2; lower.Options.PrefillAttnRows; 0: lower's default),
// prefillWGStages its stages of K and V at 128 rows (wg128x2: 2;
// lower.Options.PrefillAttnStages). Tests set them.
var (
	prefillWGRows   = envPrefillAttn.rows
	prefillWGStages = envPrefillAttn.stages
)

// prefillWGCTAs picks attn_prefill_wg's variant
// (lower.AttentionPrefillArgs.WgCTAs; 0: the default); tests set it to
// check and time each.
var prefillWGCTAs = 0

// PrefillFFMA reports whether LAGC_PREFILL_ATTN=ffma asks for the FFMA
// prefill attention (lower.Options.PrefillFFMA).
func PrefillFFMA() bool { return !prefillTC }

// DecodeSplits is the number of blocks per kv head AttentionDecode splits
// the keys over (lower.DecodeSplits).
func (k *Kernels) DecodeSplits(c KVLayer) int { return lower.DecodeSplits(c.Slots, c.NKV, k.SMs()) }

// DecodeWorkspaceBytes is the workspace AttentionDecode needs for nh query
// heads (0 when it does not split): the blocks' counters, then the
// splits' partial results. Zero it once before the first call; every call
// leaves the counters zero.
func (k *Kernels) DecodeWorkspaceBytes(c KVLayer, nh int) int64 {
	return decodeWorkspaceBytes(k.DecodeSplits(c), c, nh)
}

func decodeWorkspaceBytes(nsplit int, c KVLayer, nh int) int64 {
	if nsplit <= 1 {
		return 0
	}
	return decodeCountersBytes(c, nh) + lower.DecodeWorkspace(nsplit, nh, c.HeadDim)
}

// decodeCountersBytes is the counters' part of a decode workspace, 16-byte
// aligned.
func decodeCountersBytes(c KVLayer, nh int) int64 {
	return (lower.DecodeCounters(1, nh, c.NKV) + 15) &^ 15
}

// Gate is an attention output gate for the attention launchers: the output
// is multiplied by softplus of the gates at G, one row of Width per token,
// LD elements apart (0: Width); Width nh is a gate per head, nh*d one per
// channel. The zero Gate is no gate.
type Gate struct {
	G         cuda.DevicePtr
	Width, LD int
}

func (g Gate) lower() lower.OutputGate {
	return lower.OutputGate{Gate: ptr(g.G), G: g.Width, LDG: g.LD}
}

// AttentionDecode is the decode step's attention (one token): q [nh, d]
// (contiguous heads; the start of a fused QKV row will do) attends over the
// cache, which already holds this step's k and v at the position in pos
// (one int32, device memory; see KVAppend), writing out [nh, d]. ws is a
// workspace of DecodeWorkspaceBytes, zeroed before its first use (may be 0
// when that is 0). scale is usually 1/sqrt(d).
func (k *Kernels) AttentionDecode(s Queue, dt cuda.DType, c KVLayer, out, q, pos cuda.DevicePtr, nh int, scale float32, ws cuda.DevicePtr) error {
	return k.attentionDecode(s, dt, c, out, q, 0, 0, pos, nh, scale, Gate{}, ws, 0, 0, 0)
}

// AttentionDecodeAppend is KVAppend and AttentionDecode in one launch:
// kx and vx are this token's key and value rows [NKV, d] (contiguous),
// written into the cache at the position in pos by the attention kernel
// itself, which reads that key from them.
func (k *Kernels) AttentionDecodeAppend(s Queue, dt cuda.DType, c KVLayer, out, q, kx, vx, pos cuda.DevicePtr, nh int, scale float32, ws cuda.DevicePtr) error {
	return k.AttentionDecodeGate(s, dt, c, out, q, kx, vx, pos, nh, scale, Gate{}, ws)
}

// AttentionDecodeGate is AttentionDecodeAppend with the output gate g
// applied as the output is written (attention_gate at decode).
func (k *Kernels) AttentionDecodeGate(s Queue, dt cuda.DType, c KVLayer, out, q, kx, vx, pos cuda.DevicePtr, nh int, scale float32, g Gate, ws cuda.DevicePtr) error {
	if kx == 0 || vx == 0 {
		return errNull("AttentionDecodeAppend", "k and v rows")
	}
	return k.attentionDecode(s, dt, c, out, q, kx, vx, pos, nh, scale, g, ws, 0, 0, 0)
}

// attentionDecode runs with an explicit split count, or DecodeSplits(c)
// when nsplit is 0, stages tiles in flight (lower.DecodeStages' force: 0
// its choice, 1 none) and the key loop on tensor cores or not
// (lower.DecodeMMA's force: 0 its choice, 1 off, 2 on); tests force each
// path.
func (k *Kernels) attentionDecode(s Queue, dt cuda.DType, c KVLayer, out, q, kx, vx, pos cuda.DevicePtr, nh int, scale float32, g Gate, ws cuda.DevicePtr, nsplit, stages, mma int) error {
	a := lower.AttentionDecodeArgs{DType: dt.String(), Cache: c.cache(),
		Out: ptr(out), Q: ptr(q), K: ptr(kx), V: ptr(vx), Pos: ptr(pos), NH: nh, Scale: scale, Gate: g.lower(),
		Splits: nsplit, Stages: stages, MMA: mma, SMs: k.SMs()}
	if ws != 0 {
		a.Counters, a.Workspace = ptr(ws), ptr(ws.Add(decodeCountersBytes(c, nh)))
	}
	return k.on(s).all(lower.AttentionDecode(a))
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
	return k.AttentionPrefillGate(s, dt, c, out, q, kx, vx, ldq, ldkv, pos, T, nh, scale, Gate{})
}

// AttentionPrefillGate is AttentionPrefill with the output gate g applied
// as the output is written (attention_gate in a prefill chunk).
func (k *Kernels) AttentionPrefillGate(s Queue, dt cuda.DType, c KVLayer, out, q, kx, vx cuda.DevicePtr, ldq, ldkv int, pos cuda.DevicePtr, T, nh int, scale float32, g Gate) error {
	return k.on(s).one(lower.AttentionPrefill(lower.AttentionPrefillArgs{DType: dt.String(), Cache: c.cache(),
		Out: ptr(out), Q: ptr(q), K: ptr(kx), V: ptr(vx), LDQ: ldq, LDKV: ldkv, Pos: ptr(pos), T: T, NH: nh, Scale: scale,
		Gate: g.lower(), FFMA: !prefillTC, Wgmma: prefillWG, CC: k.CC(), WgCTAs: prefillWGCTAs, WgRows: prefillWGRows, WgStages: prefillWGStages}))
}
