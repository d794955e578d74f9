package lower

import "fmt"

// Attention kernels: causal GQA attention over a KV cache, float32 scores
// and online softmax (attention.cu, attention_prefill_tc.cu), and the
// cache stores (kvcache.cu). Query head h uses kv head h/(nh/NKV); a
// sliding layer's query at position p sees keys j with p-Window < j <= p.

// Cache is one layer's KV cache: K and V, each [Slots, NKV, HeadDim] of the
// activation dtype. A full layer (Window 0) is linear, position p in slot
// p; a sliding layer is a ring of Window slots, position p in slot
// p % Window.
type Cache struct {
	K, V         Ptr
	NKV, HeadDim int
	Window       int
	Slots        int
}

// Tile constants of attention.cu and attention_prefill_tc.cu.
const (
	decodeTile   = 32 // DEC_TILE: keys per tile of attn_decode
	decodeHeads  = 16 // DEC_HEADS: query heads (warps) per attn_decode block at most
	prefillRows  = 32 // ATT_BQ
	prefillKeys  = 32 // ATT_BK
	tcRows       = 64 // FA_BQ: (token, head) rows per CTA of attn_prefill_tc
	tcKeys       = 64 // FA_BK
	tcThreads    = 128
	MaxHeadDim   = 256
	minSplitKeys = 32 // a decode split covers at least this many slots
	MaxSplits    = 4096
)

func (c Cache) check(op string) error {
	if err := checkPos(op, "cache kv heads", c.NKV, "cache head_dim", c.HeadDim, "cache slots", c.Slots); err != nil {
		return err
	}
	if c.Window < 0 || (c.Window > 0 && c.Slots != c.Window) {
		return fmt.Errorf("%s: a ring cache has Slots == Window (got %d slots, window %d)", op, c.Slots, c.Window)
	}
	return checkPtrs(op, "cache K", c.K, "cache V", c.V)
}

func checkAttention(op, dt string, c Cache, nh int) error {
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
		return fmt.Errorf("%s: %d query heads are not a multiple of %d kv heads", op, nh, c.NKV)
	}
	if c.HeadDim > MaxHeadDim {
		return fmt.Errorf("%s: head_dim %d exceeds %d", op, c.HeadDim, MaxHeadDim)
	}
	return nil
}

// decodeShmem is attn_decode's shared memory for blocks of `heads` query
// heads of d4 channels (head_dim rounded up to 4) and `stages` tiles in
// flight (DecodeStages; 0: one tile, loaded synchronously): q as floats,
// then a tile of K (rows at dec_pitch, 4 mod 32 floats) and one of V, sized
// as floats (the kernel stores bf16 and f16 tiles as they are, in half of
// it: TestDecodeTilesFit); with stages, that many tiles of K (rows at
// dec_tpitch) and V of es-byte elements. fuseNormRoPEAttention adds kT's
// room.
func decodeShmem(heads, d4, stages, es int) int {
	if stages >= 2 {
		return 4*heads*d4 + stages*es*decodeTile*(decodeTPitch(d4, es)+d4)
	}
	return 4 * (heads*d4 + decodeTile*decodeTPitch(d4, 4) + decodeTile*d4)
}

// decodeSplitKeys is the keys a split of the decode attention holds at
// most over a cache of slots (a ring of window) in nsplit splits.
func decodeSplitKeys(slots, window, nsplit int) int {
	keys := slots
	if window > 0 {
		keys = min(window, slots)
	}
	return ceilDiv(keys, max(nsplit, 1))
}

// decodeTPitch is dec_tpitch: the K tile's row pitch in es-byte elements.
func decodeTPitch(d4, es int) int {
	if es == 4 {
		return d4 + (36-d4%32)%32
	}
	return d4 + (68-d4%64)%64
}

// DecodeMMAMinKeys is DEC_MMA_MIN_KEYS: the keys a split must hold for the
// tensor-core loop to run (the kernel decides by the position, lower by
// whether the cache's splits can ever hold them). H200, q4_k_m, 12 layers:
// at 32 keys a split the tensor cores were 1.8% slower a token, at 125
// 0.9% faster (docs/PERF.md).
const DecodeMMAMinKeys = 96

// decodeMMAKeys and decodeMMAPitch are DEC_MMA_KEYS and DEC_MMA_PITCH.
const (
	decodeMMAKeys  = 16
	decodeMMAPitch = 136
)

// DecodeMMA reports whether attn_decode is built with its key loop on
// tensor cores (TC): each warp a tile of 16 keys for every head of the
// group, through a private ring of two tiles (DEC_MMA_*, attention.cu),
// run by a block whose split holds DecodeMMAMinKeys keys at the step's
// position (the FFMA loop otherwise: at a tile or two a block the tensor
// cores' longer serial chain measured slower, as the `decmma` form did at
// 512 and 4096 slots, docs/PERF.md). It reads a tile once a block where
// the FFMA loop reads it once a head, so it pays where blocks walk many
// tiles (a long cache's full layers). bf16, head_dim 128, a group of at
// most 6 heads (one block, a warp a head, two blocks an SM under the
// kernel's launch bounds: Laguna's full layers), a window of at least a
// tile, and splits that can hold DecodeMMAMinKeys keys. force: 0 lower's
// choice, 1 off, 2 on where it can run (still only for splits holding
// DecodeMMAMinKeys keys).
func DecodeMMA(dt string, d, group, window, slots, nsplit, force int) bool {
	if dt != "bf16" || d != 128 || group > 6 || (window > 0 && window < decodeTile) || force == 1 {
		return false
	}
	return force == 2 || decodeSplitKeys(slots, window, nsplit) >= DecodeMMAMinKeys
}

// decodeMMAShmem is attn_decode's shared memory with the tensor-core loop:
// q as floats, then each warp's two stages of K and V (bf16), which the
// warps' partial outputs reuse. fuseNormRoPEAttention adds kT's room.
func decodeMMAShmem(heads, d4 int) int {
	return 4*heads*d4 + heads*2*(2*decodeMMAKeys*decodeMMAPitch)*2
}

// DecodeStagesDefault is the tile ring attn_decode keeps in flight where
// DecodeStages chooses one, and DecodeStagesFrom the tiles a block must
// walk for it to.
const (
	DecodeStagesDefault = 4
	DecodeStagesFrom    = 4
	MaxDecodeStages     = 8
	// decodeShmemMax is what a block may have on sm_80 to sm_90 (227
	// KiB): a forced ring that would not fit is shortened.
	decodeShmemMax = 227 << 10
	// decodeShmemTwo is what each of two blocks an SM may have there
	// (228 KiB an SM, 1 KiB of it reserved a block): lower's own ring is
	// shortened to it, as the FFMA loop runs two blocks an SM where its
	// registers allow (the ring of 4 measured faster was bf16's 68 KiB;
	// f32's 4 would be 133 KiB, one block an SM, not measured).
	decodeShmemTwo = 113 << 10
)

// DecodeStages is attn_decode's ST: the tiles of keys and values a block
// keeps in flight through cp.async (0: each tile loaded through registers
// and waited for before its scores). A ring pays where a block walks many
// tiles (a long cache's full layers), not where it holds one (a sliding
// ring of 512 keys over 16 splits); it needs rows of 16-byte chunks the
// block's threads load a fixed one of (d a multiple of the chunk's
// elements, 32*heads a multiple of d's chunks) and a window of at least a
// tile. force > 0 forces force stages (1: none) where the ring can run;
// a ring that would not fit a block's shared memory is shortened, and
// lower's own choice to what lets two blocks share an SM.
func DecodeStages(es, d, window, slots, nsplit, heads, force int) int {
	vn := 16 / es
	if d%vn != 0 || (32*heads)%(d/vn) != 0 || (window > 0 && window < decodeTile) {
		return 0
	}
	st := DecodeStagesDefault
	if force > 0 {
		st = force
	} else if ceilDiv(decodeSplitKeys(slots, window, nsplit), decodeTile) < DecodeStagesFrom {
		st = 0
	}
	d4 := (d + 3) &^ 3
	limit := decodeShmemMax
	if force == 0 {
		limit = decodeShmemTwo
	}
	for st >= 2 && decodeShmem(heads, d4, st, es)+4*d4 > limit {
		st-- // kT's room included
	}
	if st < 2 {
		return 0
	}
	return st
}

// DecodeSplits is the number of blocks per kv head the decode attention
// splits a cache of `slots` over (flash-decoding). It depends on the
// cache's capacity only, never on the position, so a captured graph stays
// valid: about two blocks per SM over all kv heads, and no split shorter
// than one 32-key tile (a 512-slot ring: 16 splits). 1 means no split (and
// no merge of partials).
func DecodeSplits(slots, nkv, sms int) int {
	byLen := ceilDiv(slots, minSplitKeys)
	byBlocks := max(1, 2*max(sms, 1)/max(nkv, 1))
	return max(1, min(byLen, byBlocks))
}

// DecodeWorkspace is the workspace of a decode attention of nsplit splits
// over nh query heads of d channels: float32 partial outputs, maxima and
// sums of every split (0 without a split).
func DecodeWorkspace(nsplit, nh, d int) int64 {
	if nsplit <= 1 {
		return 0
	}
	return 4 * int64(nsplit) * int64(nh) * int64(d+2)
}

// DecodeCounters is the counters region of a split decode attention of
// rows rows, nh query heads over nkv kv heads: one u32 per row, kv head
// and block of query heads (the group of blocks that merges its
// partials), in bytes.
func DecodeCounters(rows, nh, nkv int) int64 {
	return 4 * int64(max(rows, 1)) * int64(nkv) * int64(ceilDiv(nh/max(nkv, 1), decodeHeads))
}

// OutputGate is Laguna's attention output gate applied by the attention
// kernels as they write (attention_gate): out *= softplus(g) for the gate
// rows G at Gate, one per token, LDG elements apart (0: G); G == NH gates
// per head, G == NH*HeadDim per element. The zero OutputGate is no gate.
type OutputGate struct {
	Gate   Ptr
	G, LDG int
}

// args checks the gate against nh heads of d channels and returns its
// kernel arguments (pointer, row stride, width).
func (g OutputGate) args(op string, nh, d int) ([]Arg, error) {
	if g.Gate.Null() {
		return []Arg{ptrArg(Ptr{}), i64(0), i32(0)}, nil
	}
	if g.G != nh && g.G != nh*d {
		return nil, fmt.Errorf("%s: gate width %d is neither nh = %d (per-head) nor nh*d = %d (per-element)", op, g.G, nh, nh*d)
	}
	ldg := g.LDG
	if ldg == 0 {
		ldg = g.G
	}
	if ldg < g.G {
		return nil, fmt.Errorf("%s: gate row stride %d is below its width %d", op, ldg, g.G)
	}
	return []Arg{ptrArg(g.Gate), i64(int64(ldg)), i32(g.G)}, nil
}

// AttentionDecodeArgs is the decode step's attention (one token): q [nh, d]
// attends over the cache, which holds this step's k and v at the position
// in pos, or gets them from K and V rows [NKV, d] when those are given
// (the kernel appends them itself), writing out [nh, d], times the output
// gate when one is given.
type AttentionDecodeArgs struct {
	DType        string
	Cache        Cache
	Out, Q, K, V Ptr // K, V: null when the cache already holds this token
	Pos          Ptr // i32, the token's position
	NH           int
	Scale        float32
	Gate         OutputGate
	// Workspace: DecodeWorkspace bytes (times Rows); Counters:
	// DecodeCounters bytes, zero before the launch (it leaves them zero).
	// Both may be null without a split.
	Workspace, Counters Ptr
	Splits, SMs         int // Splits 0: DecodeSplits
	// Stages forces the tiles in flight (DecodeStages' force: 0 its
	// choice, 1 none, 2 to MaxDecodeStages that many; A/B timing).
	Stages int
	// MMA forces the key loop on tensor cores or not (DecodeMMA's
	// force: 0 its choice, 1 off, 2 on where it can run; A/B timing).
	MMA int
	// Rows > 1 is a batched decode step: row r's q, k, v, gate and out
	// follow row r-1's, at position Pos[r], in sequence slot Seq[r] (i32
	// [Rows]; -1 pads a bucket), whose caches lie Seq[r]*SeqStride
	// elements after Cache's. Seq null: every row in slot 0.
	Rows      int
	Seq       Ptr
	SeqStride int64
	// XQ, when set, also gets the output quantised as Q8XQuantize(DType,
	// Out, XQ, Rows, NH*d) writes it (Q8XBytes; head_dim a multiple of
	// 32): fuseAttnQ8X sets it.
	XQ Ptr
}

// AttentionDecode returns attn_decode: one launch, whose blocks merge
// their splits of the keys themselves (the last of each group to finish).
func AttentionDecode(a AttentionDecodeArgs) ([]Launch, error) {
	const op = "AttentionDecode"
	c := a.Cache
	if err := checkAttention(op, a.DType, c, a.NH); err != nil {
		return nil, err
	}
	if err := checkPtrs(op, "out", a.Out, "q", a.Q, "pos", a.Pos); err != nil {
		return nil, err
	}
	if a.K.Null() != a.V.Null() {
		return nil, fmt.Errorf("%s: k and v rows must be given together", op)
	}
	nsplit := a.Splits
	if nsplit == 0 {
		nsplit = DecodeSplits(c.Slots, c.NKV, sms(a.SMs))
	}
	if nsplit < 1 || nsplit > MaxSplits {
		return nil, fmt.Errorf("%s: %d splits (1 to %d)", op, nsplit, MaxSplits)
	}
	d := c.HeadDim
	rows := max(a.Rows, 1)
	if nsplit > 1 && (a.Workspace.Null() || a.Counters.Null()) {
		return nil, fmt.Errorf("%s: %d splits need a workspace of %d bytes and %d bytes of counters", op, nsplit,
			int64(rows)*DecodeWorkspace(nsplit, a.NH, d), DecodeCounters(rows, a.NH, c.NKV))
	}
	if rows > 65535/ceilDiv(a.NH/c.NKV, decodeHeads) {
		return nil, fmt.Errorf("%s: %d rows are too many for one launch", op, rows)
	}
	if a.SeqStride < 0 || (!a.Seq.Null() && a.SeqStride == 0) {
		return nil, fmt.Errorf("%s: sequence slots %d elements apart", op, a.SeqStride)
	}
	gate, err := a.Gate.args(op, a.NH, d)
	if err != nil {
		return nil, err
	}
	group := a.NH / c.NKV
	heads := min(group, decodeHeads)
	d4 := (d + 3) &^ 3
	if a.Stages < 0 || a.Stages > MaxDecodeStages {
		return nil, fmt.Errorf("%s: %d stages (0 to %d)", op, a.Stages, MaxDecodeStages)
	}
	if a.MMA < 0 || a.MMA > 2 {
		return nil, fmt.Errorf("%s: tensor-core choice %d (0 lower's, 1 off, 2 on)", op, a.MMA)
	}
	// The key loop: tensor cores where DecodeMMA builds them (no ring
	// then), else the FFMA loop with DecodeStages' ring or none.
	stages, mma, shmem := 0, 1, decodeMMAShmem(heads, d4)
	if !DecodeMMA(a.DType, d, group, c.Window, c.Slots, nsplit, a.MMA) {
		es := dtypeSize(a.DType)
		stages, mma = DecodeStages(es, d, c.Window, c.Slots, nsplit, heads, a.Stages), 0
		shmem = decodeShmem(heads, d4, stages, es)
	}
	var partAcc, partML, counters Ptr
	if nsplit > 1 {
		partAcc = a.Workspace
		partML = a.Workspace.At(4 * int64(rows) * int64(nsplit) * int64(a.NH) * int64(d))
		counters = a.Counters
	}
	args := []Arg{i32(a.NH), i32(c.NKV), i32(d), i32(c.Window), i32(c.Slots), i32(nsplit), f32(a.Scale),
		ptrArg(a.Pos), ptrArg(a.Seq), i64(a.SeqStride), ptrArg(a.Q), ptrArg(a.K), ptrArg(a.V), ptrArg(c.K), ptrArg(c.V)}
	var xs Ptr
	if !a.XQ.Null() {
		if d%32 != 0 || !a.XQ.Aligned(16) {
			return nil, fmt.Errorf("%s: a quantised output needs head_dim a multiple of 32 (%d) and an aligned pointer", op, d)
		}
		xs = q8xScales(a.XQ, rows, a.NH*d)
	}
	args = append(append(args, gate...), ptrArg(a.Out), ptrArg(partAcc), ptrArg(partML), ptrArg(counters), ptrArg(a.XQ), ptrArg(xs))
	// No fused q/k norm and rope (NormRoPEAttention sets them).
	args = append(args, ptrArg(Ptr{}), ptrArg(Ptr{}), f32(0), ptrArg(Ptr{}), i32(0), f32(0))
	return []Launch{kernel("attention.cu", "attn_decode", []string{a.DType}, []int64{int64(ceilDiv(d4, 128)), 0, int64(stages), int64(mma)},
		dims(nsplit, c.NKV, rows*ceilDiv(group, heads)), dims(32*heads), shmem, args...)}, nil
}

// AttentionPrefillArgs is a prefill chunk's attention: T queries q [T, nh,
// d] (rows LDQ elements apart; 0: nh*d) at consecutive positions pos[0],
// pos[0]+1, ... attend over the cache's keys before pos[0] and the chunk's
// own keys K, V [T, NKV, d] (rows LDKV apart; 0: NKV*d), read directly, so
// a chunk longer than a sliding window never reads a ring slot it
// overwrites. out is [T, nh, d], contiguous. Afterwards the chunk is
// stored with KVAppend (linear) or KVCompactRing (ring).
type AttentionPrefillArgs struct {
	DType        string
	Cache        Cache
	Out, Q, K, V Ptr
	LDQ, LDKV    int
	Pos          Ptr // i32 [T]
	T, NH        int
	Scale        float32
	// Gate, when given, multiplies the output as it is written.
	Gate OutputGate
	// FFMA keeps the FFMA kernel where the tensor-core one would run
	// (bf16, head_dim 64 or 128).
	FFMA bool
	// Wgmma runs the wgmma kernel where the target is Hopper (CC 90 and
	// up: sm_90a), PrefillWG holds and the tensor-core one would run with
	// 16-byte operands.
	Wgmma bool
	CC    int // the target's compute capability, major*10+minor
	// WgCTAs picks its variant by CTAs a multiprocessor (0: PrefillWGCTAs):
	// 2 double-buffers K and V (80 KiB), 3 and 4 keep one tile of each,
	// loaded in halves (48 KiB; 4 at 128 registers). A/B timing.
	WgCTAs int
	// WgRows is its rows a CTA (0: PrefillWGRows, or 64 where WgCTAs is
	// 3 or 4): 64, one warpgroup; or 128, two sharing each K and V tile
	// (one tile of each, two CTAs a multiprocessor; WgCTAs 0 or 2). With
	// 64 rows, WgCTAs 0 is PrefillWGCTAs.
	WgRows int
	// WgStages is the 128-row variant's stages of K and V (0: 1): 1 loads
	// the next K behind the scores and the next V behind P V; 2
	// double-buffers both (loaded a tile ahead, 97 KiB, still two CTAs a
	// multiprocessor: registers hold it there). A/B timing.
	WgStages int
}

// PrefillWG reports whether the wgmma prefill attention is built for
// dtype dt and head_dim d.
func PrefillWG(dt string, d int) bool { return dt == "bf16" && d == 128 }

// PrefillWGCTAs is the 64-row attn_prefill_wg's default CTAs a
// multiprocessor (WgCTAs; 128 rows run 2). H200, S-2.1
// T=2048 (TestAttentionPrefillTCTimingGPU), ms for 2 / 3 / 4 CTAs: sliding
// 72 heads 0.230 / 0.199 / 0.184, full 48 heads 0.235 / 0.219 / 0.207, 72
// heads without a window 0.337 / 0.306 / 0.290 (attn_prefill_tc: 0.278,
// 0.332, 0.477).
const PrefillWGCTAs = 4

// PrefillWGRows is attn_prefill_wg's default rows a CTA (WgRows): two
// warpgroups sharing each K and V tile halve the tiles' reads from L2.
// H200, S-2.1 T=2048 (TestAttentionPrefillTCTimingGPU), ms at 64 rows (4
// CTAs a multiprocessor) and 128: sliding 72 heads 0.193 / 0.172, full 48
// heads 0.217 / 0.219, 72 heads without a window 0.314 / 0.293; q4_k_m, 48
// layers, prefill 2048 (ab-bench, two calls of 3 rounds): 0.6% and 0.1%
// faster, the last row only 1.1% and 0.7%; bf16 24 layers level
// (docs/PERF.md).
const PrefillWGRows = 128

// PrefillWGSmem is WaCfg<SPLIT, NW>::SMEM of the variant of ctas CTAs a
// multiprocessor, rows rows a CTA and stages stages of K and V (128 rows;
// 0 or 1: one): a Q tile a warpgroup and two stages of K and V (64 rows
// at 2 CTAs, or 128 rows at 2 stages) or one, 64 x 128 bf16 each, and 1
// KiB to align them for the 128-byte swizzle.
func PrefillWGSmem(ctas, rows, stages int) int {
	tiles := 3
	if (ctas == 2 && rows == 64) || (rows == 128 && stages == 2) {
		tiles = 5
	}
	return (tiles+rows/64-1)*tcKeys*128*2 + 1024
}

// PrefillTC reports whether the tensor-core prefill attention is built for
// dtype dt and head_dim d.
func PrefillTC(dt string, d int) bool { return dt == "bf16" && (d == 64 || d == 128) }

// PrefillTCSmem is FaCfg<D>::SMEM: Q and two stages of K and V, bf16 rows
// padded to d+8 elements.
func PrefillTCSmem(d int) int { return 2 * (d + 8) * (tcRows + 4*tcKeys) }

// AttentionPrefill returns the chunk's attention launch: tensor cores
// where PrefillTC holds (the 16-byte-load variant when every pointer and
// row stride allows it), else the FFMA kernel.
func AttentionPrefill(a AttentionPrefillArgs) (Launch, error) {
	const op = "AttentionPrefill"
	c := a.Cache
	if err := checkAttention(op, a.DType, c, a.NH); err != nil {
		return Launch{}, err
	}
	if err := checkPos(op, "T", a.T); err != nil {
		return Launch{}, err
	}
	d := c.HeadDim
	ldq, ldkv := a.LDQ, a.LDKV
	if ldq == 0 {
		ldq = a.NH * d
	}
	if ldkv == 0 {
		ldkv = c.NKV * d
	}
	if ldq < a.NH*d || ldkv < c.NKV*d {
		return Launch{}, fmt.Errorf("%s: row strides %d (q), %d (k, v) are below the rows %d, %d", op, ldq, ldkv, a.NH*d, c.NKV*d)
	}
	if err := checkPtrs(op, "out", a.Out, "q", a.Q, "k", a.K, "v", a.V, "pos", a.Pos); err != nil {
		return Launch{}, err
	}
	gate, err := a.Gate.args(op, a.NH, d)
	if err != nil {
		return Launch{}, err
	}
	rows := int64(a.T) * int64(a.NH/c.NKV)
	// The operands after the positions, the same in both kernels.
	tail := append([]Arg{ptrArg(a.Q), i64(int64(ldq)), ptrArg(a.K), ptrArg(a.V), i64(int64(ldkv)), ptrArg(c.K), ptrArg(c.V),
		ptrArg(a.Out), i64(int64(a.NH * d))}, gate...)
	if !a.FFMA && PrefillTC(a.DType, d) {
		// The CTAs of a kv head run along the grid's y (at most 65535):
		// every kv head's latest rows start first (fa_rows).
		blocks := (rows + tcRows - 1) / tcRows
		if blocks > 65535 || rows > 1<<31-1 {
			return Launch{}, fmt.Errorf("%s: %d tokens are too many for one launch (%d CTAs a kv head, at most 65535)", op, a.T, blocks)
		}
		vec := true
		for _, p := range []Ptr{a.Out, a.Q, a.K, a.V, c.K, c.V} {
			vec = vec && p.Aligned(16)
		}
		vec = vec && ldq%8 == 0 && ldkv%8 == 0
		if a.Wgmma && a.CC >= 90 && vec && PrefillWG(a.DType, d) {
			ctas, wrows := a.WgCTAs, a.WgRows
			if wrows == 0 {
				wrows = PrefillWGRows
				if ctas > 2 {
					wrows = 64 // 3 or 4 CTAs a multiprocessor: one warpgroup each
				}
			}
			split, nw := ctas-2, wrows/64
			switch {
			case wrows != 64 && wrows != 128:
				return Launch{}, fmt.Errorf("%s: attn_prefill_wg takes 64 or 128 rows a CTA, not %d", op, wrows)
			case wrows == 128 && ctas != 0 && ctas != 2:
				return Launch{}, fmt.Errorf("%s: attn_prefill_wg of 128 rows a CTA runs 2 CTAs a multiprocessor, not %d", op, ctas)
			case a.WgStages != 0 && (wrows != 128 || a.WgStages > 2 || a.WgStages < 0):
				return Launch{}, fmt.Errorf("%s: attn_prefill_wg takes 1 or 2 stages of K and V with 128 rows a CTA, not %d stages at %d rows (64 rows: by CTAs)",
					op, a.WgStages, wrows)
			case wrows == 128 && a.WgStages == 2:
				ctas, split = 2, 0
			case wrows == 128:
				ctas, split = 2, 1
			case ctas == 0:
				ctas, split = PrefillWGCTAs, PrefillWGCTAs-2
			case ctas < 2 || ctas > 4:
				return Launch{}, fmt.Errorf("%s: attn_prefill_wg runs 2, 3 or 4 CTAs a multiprocessor, not %d", op, ctas)
			}
			threads, smem := tcThreads*nw, PrefillWGSmem(ctas, wrows, a.WgStages)
			blocks = (rows + int64(wrows) - 1) / int64(wrows)
			grid := dims(c.NKV, int(blocks))
			// NR 0: q as given; PrefillNormRoPEAttention sets NR and
			// the norm and rotation's arguments after the tail.
			args := append([]Arg{i32(a.T), i32(a.NH), i32(c.NKV), i32(c.Window), i32(c.Slots), f32(a.Scale), ptrArg(a.Pos)}, tail...)
			args = append(args, ptrArg(Ptr{}), f32(0), ptrArg(Ptr{}), i32(0), f32(0))
			return kernel("attention_prefill_wg.cu", "attn_prefill_wg", nil, []int64{int64(d), int64(split), int64(nw), 0},
				grid, dims(threads), smem, args...), nil
		}
		return kernel("attention_prefill_tc.cu", "attn_prefill_tc", []string{"bf16"}, []int64{int64(d), int64(b2i(vec))},
			dims(c.NKV, int(blocks)), dims(tcThreads), PrefillTCSmem(d),
			append([]Arg{i32(a.T), i32(a.NH), i32(c.NKV), i32(c.Window), i32(c.Slots), f32(a.Scale), ptrArg(a.Pos)}, tail...)...), nil
	}
	blocks := (rows + prefillRows - 1) / prefillRows
	if blocks > 1<<31-1 {
		return Launch{}, fmt.Errorf("%s: %d tokens are too many for one launch", op, a.T)
	}
	dch := ceilDiv(d, 32)
	dp := 32 * dch
	shmem := 4 * (prefillRows*(dp+1) + prefillKeys*(dp+1) + prefillKeys*dp + prefillRows*(prefillKeys+1) + 4*prefillRows)
	return kernel("attention.cu", "attn_prefill", []string{a.DType}, []int64{int64(dch)},
		dims(int(blocks), c.NKV), dims(128), shmem,
		append([]Arg{i32(a.T), i32(a.NH), i32(c.NKV), i32(d), i32(c.Window), i32(c.Slots), f32(a.Scale), ptrArg(a.Pos)}, tail...)...), nil
}

// KVStoreArgs writes T tokens' keys and values into a cache at positions
// pos [T]: token t's k row at K + t*LD elements (v likewise), NKV*HeadDim
// values; LD 0 means NKV*HeadDim.
type KVStoreArgs struct {
	DType string
	Cache Cache
	K, V  Ptr
	LD    int
	Pos   Ptr
	T     int
}

// KVAppend stores every token. A ring takes at most Window tokens per call
// (more would race for slots: use KVCompactRing after a prefill chunk).
func KVAppend(a KVStoreArgs) (Launch, error) {
	const op = "KVAppend"
	if a.Cache.Window > 0 && a.T > a.Cache.Window {
		return Launch{}, fmt.Errorf("%s: %d tokens into a ring of %d slots; use KVCompactRing", op, a.T, a.Cache.Window)
	}
	return kvStore(op, "kv_append", a)
}

// KVCompactRing moves the last min(T, Window) tokens of a prefill chunk
// into a sliding layer's ring, after the chunk's attention, which still
// reads the older keys of the ring.
func KVCompactRing(a KVStoreArgs) (Launch, error) {
	const op = "KVCompactRing"
	if a.Cache.Window <= 0 {
		return Launch{}, fmt.Errorf("%s: the cache is linear (window 0); use KVAppend", op)
	}
	return kvStore(op, "kv_compact_ring", a)
}

func kvStore(op, name string, a KVStoreArgs) (Launch, error) {
	c := a.Cache
	if err := checkDT(op, a.DType); err != nil {
		return Launch{}, err
	}
	if err := c.check(op); err != nil {
		return Launch{}, err
	}
	if err := checkPos(op, "T", a.T); err != nil {
		return Launch{}, err
	}
	row := c.NKV * c.HeadDim
	ld := a.LD
	if ld == 0 {
		ld = row
	}
	if ld < row {
		return Launch{}, fmt.Errorf("%s: row stride %d is below %d kv heads x %d channels", op, ld, c.NKV, c.HeadDim)
	}
	if err := checkPtrs(op, "k", a.K, "v", a.V, "pos", a.Pos); err != nil {
		return Launch{}, err
	}
	const threads = 256
	bx := ceilDiv(row, threads)
	if name == "kv_append" {
		if a.T > 65535 {
			return Launch{}, fmt.Errorf("%s: %d tokens exceed the 65535 of one launch", op, a.T)
		}
		return kernel("kvcache.cu", name, []string{a.DType}, nil, dims(bx, a.T), dims(threads), 0,
			i32(a.T), i32(c.NKV), i32(c.HeadDim), i32(c.Window), i32(c.Slots), ptrArg(a.Pos),
			ptrArg(a.K), ptrArg(a.V), i64(int64(ld)), i64(int64(ld)), ptrArg(c.K), ptrArg(c.V)), nil
	}
	keep := min(a.T, c.Window)
	if keep > 65535 {
		return Launch{}, fmt.Errorf("%s: a window of %d exceeds the 65535 tokens of one launch", op, keep)
	}
	return kernel("kvcache.cu", name, []string{a.DType}, nil, dims(bx, keep), dims(threads), 0,
		i32(a.T), i32(c.NKV), i32(c.HeadDim), i32(c.Window), ptrArg(a.Pos),
		ptrArg(a.K), ptrArg(a.V), i64(int64(ld)), i64(int64(ld)), ptrArg(c.K), ptrArg(c.V)), nil
}
