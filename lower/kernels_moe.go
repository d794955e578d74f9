package lower

import (
	"cmp"
	"fmt"
)

// MoEPath selects the kernels of the routed experts.
type MoEPath int

const (
	// MoEAuto takes the decode path for T <= GEMVMaxRows or where the
	// grouped path cannot run (f32, H or I not a multiple of 8), else the
	// grouped path.
	MoEAuto MoEPath = iota
	// MoEDecode: per-route GEMVs reading only the selected experts' rows
	// (any dtypes, any T; meant for decode).
	MoEDecode
	// MoEGrouped: routes grouped by expert on the device, grouped bf16
	// tensor-core GEMMs, a fixed-order combine (prefill).
	MoEGrouped
)

// ExpertOrder is the order the grouped path schedules experts in: their
// rows in the grouped buffers and the order GEMM tiles are started.
type ExpertOrder int32

const (
	ExpertsByID   ExpertOrder = 0 // ascending expert id
	ExpertsByLoad ExpertOrder = 1 // descending routes per expert, ties by id
)

// MaxExperts is the most experts the grouped path schedules (one block).
const MaxExperts = 1024

// MoEArgs is one moe_experts op:
// out[t] = sum_j weights[t,j] * down_e(silu(gate_e x_t) * up_e x_t), e = ids[t,j].
type MoEArgs struct {
	T, H, I, E, TopK int
	X                Ptr // [T,H] XType
	Weights          Ptr // f32 [T,TopK]
	IDs              Ptr // i32 [T,TopK]; ids outside [0,E) contribute nothing
	Gate, Up         Ptr // [E,I,H] WType
	Down             Ptr // [E,H,I] DownType
	Out              Ptr // [T,H] OutType
	// Element types: f32 or bf16; the grouped path needs bf16 x and weights.
	XType, WType, OutType string
	// DownType is the down stack's type where it differs from the gate and
	// up stacks' WType ("": WType). Both are then block types: files
	// quantised by llama.cpp's mixtures (Q4_K_M's downs in Q6_K where its
	// gate and up are Q4_K).
	DownType   string
	Accumulate bool // out += the routed sum
	// Workspace of at least MoEWorkspace(a) bytes, 16-byte aligned; it
	// needs no initialisation and holds nothing between calls.
	Workspace Ptr
	Path      MoEPath
	Order     ExpertOrder
	// Tile forces the grouped GEMMs' tensor-core tile (zero: automatic).
	Tile MMATile
	// Band is the grouped GEMMs' N-band in output columns: each tile
	// computes a band's columns back to back so weight and activation rows
	// are reused from L2. 0: no banding. It changes the CTA order only,
	// never a result.
	Band int
	// The target: multiprocessors and compute capability (90 and up runs
	// the grouped GEMMs on the wgmma core), or PrefillMMA to keep mma.sync.
	SMs, CC    int
	PrefillMMA bool
	// QGate, QUp and QDown locate quantised stacks (WType a block type) as
	// rows of their matrices in the device layout; Gate, Up and Down are
	// then unused.
	QGate, QUp, QDown QMatrix
	// QMoE forces the decode kernels' shape (QMoEArgs) and the prefill's
	// quantised grouped GEMMs' token tile; zero chooses.
	QMoE QMoEForce
	// HopperDown is the bf16 grouped down GEMM's consumer schedule on the
	// wgmma core: SchedPingPong runs it on 128-wide tiles, ping-pong;
	// SchedAuto and SchedCooperative on 256-wide tiles, cooperative
	// (BenchmarkMoEExperts T=2048 on the H200: 1.412 ms against ping-pong's
	// 1.406, not worth a default change).
	HopperDown HopperSched
	// hopperRows: the wgmma path's token tile rows when not 128 (set by
	// quantLayout for gemm_wgmma_q, which takes 64, 96, 112 or 128).
	hopperRows int
}

// downType is the down stack's type.
func (a MoEArgs) downType() string { return cmp.Or(a.DownType, a.WType) }

func (a MoEArgs) validate() error {
	if a.T <= 0 || a.H <= 0 || a.I <= 0 || a.E <= 0 || a.TopK <= 0 {
		return fmt.Errorf("moe_experts: T, H, I, E, k must be positive (got %d, %d, %d, %d, %d)", a.T, a.H, a.I, a.E, a.TopK)
	}
	if int64(a.T)*int64(a.TopK) > 1<<30 || int64(a.T)*int64(a.H) > 1<<40 || a.H > 1<<24 || a.I > 1<<24 {
		return fmt.Errorf("moe_experts: shape too large (T %d, H %d, I %d, k %d)", a.T, a.H, a.I, a.TopK)
	}
	for _, d := range []struct {
		name, dt string
		stack    bool // a weight stack: a block type too
	}{{"x", a.XType, false}, {"weights", a.WType, true}, {"down weights", a.downType(), true}, {"out", a.OutType, false}} {
		if d.dt != "f32" && d.dt != "bf16" && (!d.stack || !IsQuantized(d.dt)) {
			return fmt.Errorf("moe_experts: %s dtype %q (want f32 or bf16)", d.name, d.dt)
		}
	}
	if a.downType() != a.WType && !(IsQuantized(a.WType) && IsQuantized(a.downType())) {
		return fmt.Errorf("moe_experts: gate and up stacks of %s, down of %s: stacks of different types must all be block-quantised", a.WType, a.downType())
	}
	stacks := []Ptr{a.Gate, a.Up, a.Down}
	if IsQuantized(a.WType) {
		stacks = []Ptr{a.QGate.W, a.QUp.W, a.QDown.W}
	}
	for _, p := range append([]Ptr{a.X, a.Weights, a.IDs, a.Out, a.Workspace}, stacks...) {
		if p.Null() {
			return fmt.Errorf("moe_experts: null pointer")
		}
	}
	if !a.Workspace.Aligned(16) {
		return fmt.Errorf("moe_experts: workspace %s is not 16-byte aligned", a.Workspace)
	}
	if err := a.Tile.check(); err != nil {
		return fmt.Errorf("moe_experts: %w", err)
	}
	return nil
}

// groupedOK says whether the grouped tensor-core path can run a.
func (a MoEArgs) groupedOK() error {
	switch {
	case a.XType != "bf16" || a.WType != "bf16":
		return fmt.Errorf("the grouped path needs bf16 x and weights (have %s, %s)", a.XType, a.WType)
	case a.H%8 != 0 || a.I%8 != 0:
		return fmt.Errorf("the grouped path needs H and I multiples of 8 (have %d, %d)", a.H, a.I)
	case !a.X.Aligned(16) || !a.Gate.Aligned(16) || !a.Up.Aligned(16) || !a.Down.Aligned(16):
		return fmt.Errorf("the grouped path needs 16-byte aligned x and weights")
	case a.E > MaxExperts:
		return fmt.Errorf("the grouped path schedules at most %d experts (have %d)", MaxExperts, a.E)
	}
	return nil
}

func (a MoEArgs) grouped() (bool, error) {
	switch a.Path {
	case MoEDecode:
		return false, nil
	case MoEGrouped:
		if err := a.groupedOK(); err != nil {
			return false, fmt.Errorf("moe_experts: %w", err)
		}
		return true, nil
	case MoEAuto:
		return a.T > GEMVMaxRows && a.groupedOK() == nil, nil
	}
	return false, fmt.Errorf("moe_experts: unknown path %d", a.Path)
}

// Routes an expert (the call's routes over its experts, a merged shared
// expert counted) that choose gemm_wgmma_q and its tiles; figures in
// docs/PERF.md (S-2.1, 257 experts, 11 a token).
const (
	// QNarrowMaxAvgRows: gemm_wgmma_q's default token tile is 96 rows
	// up to this average, 112 past it, quantised and bf16 stacks alike
	// (112 measured faster at 2048 tokens, 88 an expert, for both). 48
	// takes S-2.1 chunks of up to 1228 tokens quantised, 1121 bf16.
	QNarrowMaxAvgRows = 48
	// BF16QWideMaxAvgRows: bf16 stacks' grouped GEMMs run on
	// gemm_wgmma_q up to this average, on gemm_wgmma's 128-token tiles
	// past it. Prefill against gemm_wgmma: 256-1024 tokens 7.5-14%
	// faster, 1536 and 2048 1.2-2.4% (H200 and H100), 4096 (175 an
	// expert) 1.4% slower. 96 takes S-2.1 chunks of up to 2242 tokens.
	BF16QWideMaxAvgRows = 96
)

// bf16Q says whether bf16 stacks' grouped GEMMs go to gemm_wgmma_q:
// forced (QMoEForce.BF16, NoBF16), else while the routes average at most
// BF16QWideMaxAvgRows tokens an expert.
func (a MoEArgs) bf16Q() bool {
	switch {
	case a.QMoE.BF16:
		return true
	case a.QMoE.NoBF16:
		return false
	}
	return a.routes() <= BF16QWideMaxAvgRows*int64(a.E)
}

// routes is the call's routes, T * TopK.
func (a MoEArgs) routes() int64 { return int64(a.T) * int64(a.TopK) }

// qWide says whether gemm_wgmma_q's default token tile is 112 rows
// (hopperQShape's wide), quantised or bf16 stacks alike: where the routes
// average more than QNarrowMaxAvgRows tokens an expert, 96 at fewer.
func (a MoEArgs) qWide() bool { return a.routes() > QNarrowMaxAvgRows*int64(a.E) }

// qShape is gemm_wgmma_q's token tile, CTAs and warpgroups for this call
// (hopperQShape, wide by qWide): the layout and the launches ask here, so
// they agree.
func (a MoEArgs) qShape() (rows, ctas, wgs int, err error) {
	return hopperQShape(a.QMoE, a.qWide())
}

// MoELayout is the workspace of one call: byte offsets into it.
type MoELayout struct {
	Grouped         bool
	Quant           moeQuant // quantised stacks: which path
	Dequant         int64    // moeQuantDequant: the bf16 stacks; moeQuantHopperBF16Down: the down's
	Hopper          bool     // grouped on the wgmma core (moeHopper)
	BF16Q           bool     // Hopper with bf16 stacks on gemm_wgmma_q (MoEArgs.bf16Q)
	XG              int64    // Hopper: bf16 [R,H], the routes' x rows grouped
	Rows, BK        int      // the schedule's row tiles (mma.sync's: 32 * its MI), the mma.sync K step
	Chunk, Chunks   int      // routes per scheduling chunk, chunks
	MaxTiles        int
	Act             int64 // decode: f32 [R,I]; grouped: bf16 [R,I]
	Hist, Base      int64 // i32 [Chunks,E]
	Counts, Order   int64 // i32 [E]
	Offsets, NTiles int64 // i32 [E], i32
	Tiles           int64 // int4 [MaxTiles]
	Sorted, Pos, Ys int64 // i32 [R], i32 [R], bf16 [R,H]
	Total           int64
}

// Layout places a's workspace (its pointers are not looked at, except to
// decide the path).
func (a MoEArgs) Layout() (MoELayout, error) {
	if IsQuantized(a.WType) {
		return a.quantLayout()
	}
	g, err := a.grouped()
	if err != nil {
		return MoELayout{}, err
	}
	R := int64(a.T) * int64(a.TopK)
	l := MoELayout{Grouped: g}
	var off int64
	take := func(n int64) int64 {
		o := off
		off += (n + 255) &^ 255
		return o
	}
	if !g {
		l.Act = take(4 * R * int64(a.I))
		l.Total = off
		return l, nil
	}
	// 128-row tiles once experts average 64 rows: each expert's weights are
	// then mostly streamed once, not once per 64-row tile.
	l.Rows = 64
	if R >= 64*int64(a.E) {
		l.Rows = 128
	}
	if a.Tile.Rows != 0 {
		l.Rows = a.Tile.Rows
	}
	if a.Tile == (MMATile{}) && moeHopperOK(a) == nil {
		l.Hopper, l.Rows = true, 128 // the wgmma GEMM's 128-row tiles
		if a.hopperRows != 0 {
			l.Rows = a.hopperRows
		}
		// gemm_wgmma_q's token tiles for bf16 stacks (moeHopperQ); the
		// quantised path's stand-in (hopperRows set) has its own already.
		if a.hopperRows == 0 && a.bf16Q() {
			rows, _, _, err := a.qShape()
			if err != nil {
				return MoELayout{}, err
			}
			if _, err := hopperQStep(a.QMoE); err != nil {
				return MoELayout{}, err
			}
			l.Rows, l.BF16Q = rows, true
		}
	}
	l.BK = a.Tile.bk()
	// Chunks of at least 256 routes, at most 128 chunks to fold per expert.
	l.Chunk = max(256, (ceilDiv(int(R), 128)+31)&^31)
	l.Chunks = ceilDiv(int(R), l.Chunk)
	l.MaxTiles = ceilDiv(int(R), l.Rows) + min(a.E, int(R))
	E := int64(a.E)
	l.Hist = take(4 * int64(l.Chunks) * E)
	l.Base = take(4 * int64(l.Chunks) * E)
	l.Counts = take(4 * E)
	l.Order = take(4 * E)
	l.Offsets = take(4 * E)
	l.NTiles = take(4)
	l.Tiles = take(16 * int64(l.MaxTiles))
	l.Sorted = take(4 * R)
	l.Pos = take(4 * R)
	l.Act = take(2 * R * int64(a.I))
	l.Ys = take(2 * R * int64(a.H))
	if l.Hopper {
		l.XG = take(2 * R * int64(a.H))
	}
	l.Total = off
	return l, nil
}

// quantLayout places the workspace of quantised stacks: the decode
// GEMVs' scratch, the grouped wgmma path's, or the bf16 stacks and the
// bf16 grouped path's after them.
func (a MoEArgs) quantLayout() (MoELayout, error) {
	q, err := a.quantPath()
	if err != nil {
		return MoELayout{}, err
	}
	switch q {
	case moeQuantDecode:
		return MoELayout{Quant: q, Total: QMoEWorkspace(a.qmoe())}, nil
	case moeQuantHopper, moeQuantHopperBF16Down:
		rows, _, _, err := a.qShape()
		if err != nil {
			return MoELayout{}, err
		}
		if _, err := hopperQStep(a.QMoE); err != nil {
			return MoELayout{}, err
		}
		b := a
		b.hopperRows = rows
		b.WType, b.DownType, b.Gate, b.Up, b.Down = "bf16", "", Ptr{BaseDevice, 256}, Ptr{BaseDevice, 256 + 2*int64(a.E)*int64(a.I)*int64(a.H)}, Ptr{BaseDevice, 256}
		b.QGate, b.QUp, b.QDown = QMatrix{}, QMatrix{}, QMatrix{}
		l, err := b.Layout()
		if err != nil {
			return MoELayout{}, err
		}
		if !l.Hopper {
			return MoELayout{}, fmt.Errorf("moe_experts: the quantised grouped path needs the wgmma core's layout")
		}
		l.Quant = q
		if q == moeQuantHopperBF16Down { // the down stack's bf16 rows, after the rest
			l.Dequant = l.Total
			l.Total += align256(2 * int64(a.E) * int64(a.H) * int64(a.I))
		}
		return l, nil
	}
	// The workspace's address does not matter here (it may be unset).
	stacks := align256(3 * 2 * int64(a.E) * int64(a.I) * int64(a.H))
	a.Workspace = Ptr{BaseDevice, Alignment}
	b := a.dequantArgs(0)
	b.Workspace = a.Workspace.At(stacks)
	l, err := b.Layout()
	if err != nil {
		return MoELayout{}, err
	}
	l.Quant, l.Dequant, l.Total = q, 0, stacks+l.Total
	return l, nil
}

// MoEWorkspace is the workspace MoE's launches need for a.
func MoEWorkspace(a MoEArgs) (int64, error) {
	l, err := a.Layout()
	if err != nil {
		return 0, err
	}
	return l.Total, nil
}

// combineMaxBlocks caps moe_combine's grid-stride grid (32 blocks per SM
// of an H200).
const combineMaxBlocks = 132 * 32

// moeScatterThreads is moe_scatter's block (MOE_SCATTER_WARPS warps in
// cuda/kernels/moe.cu).
const moeScatterThreads = 256

// MoERouting groups a's routes by expert on the device: the histogram of
// expert ids, the tile schedule, and the scatter of routes into expert
// order, into the buffers of l. The grouped GEMMs of both tile paths read
// what it writes; tests build l to choose the chunk and the tile rows.
func MoERouting(a MoEArgs, l MoELayout) []Launch {
	ws := func(off int64) Arg { return ptrArg(a.Workspace.At(off)) }
	R := a.T * a.TopK
	return []Launch{
		kernel("moe.cu", "moe_hist", nil, nil, dims(l.Chunks), dims(256), 0,
			i32(R), i32(a.E), i32(l.Chunk), ptrArg(a.IDs), ws(l.Hist)),
		kernel("moe.cu", "moe_schedule", nil, nil, dims(1), dims(1024), 0,
			i32(a.E), i32(l.Chunks), i32(l.Rows), i32(int(a.Order)), ws(l.Hist),
			ws(l.Counts), ws(l.Order), ws(l.Offsets), ws(l.Base), ws(l.Tiles), ws(l.NTiles)),
		kernel("moe.cu", "moe_scatter", nil, nil, dims(l.Chunks), dims(moeScatterThreads), 0,
			i32(R), i32(a.E), i32(l.Chunk), ptrArg(a.IDs), ws(l.Base), ws(l.Sorted), ws(l.Pos)),
	}
}

// MoE returns the launches of the routed experts of a, in order.
func MoE(a MoEArgs) ([]Launch, error) {
	if err := a.validate(); err != nil {
		return nil, err
	}
	l, err := a.Layout()
	if err != nil {
		return nil, err
	}
	if IsQuantized(a.WType) {
		switch l.Quant {
		case moeQuantDecode:
			return QMoE(a.qmoe())
		case moeQuantHopper:
			return moeHopperQ(a, l), nil
		case moeQuantHopperBF16Down:
			return moeHopperBF16Down(a, l)
		}
		stacks := align256(3 * 2 * int64(a.E) * int64(a.I) * int64(a.H))
		dq, b, err := a.dequantStacks(0)
		if err != nil {
			return nil, err
		}
		b.Workspace = a.Workspace.At(stacks)
		ms, err := MoE(b)
		if err != nil {
			return nil, err
		}
		return append(dq, ms...), nil
	}
	ws := func(off int64) Arg { return ptrArg(a.Workspace.At(off)) }
	R := a.T * a.TopK
	acc := i32(b2i(a.Accumulate))
	if !l.Grouped {
		p := 16 / dtypeSize(a.WType)
		vec := int64(b2i(a.H%p == 0 && a.I%p == 0 && a.X.Aligned(16) && a.Gate.Aligned(16) && a.Up.Aligned(16) && a.Down.Aligned(16)))
		return []Launch{
			kernel("moe.cu", "moe_gateup_gemv", []string{a.XType, a.WType}, []int64{vec},
				dims(int((int64(R)*int64(a.I)+7)/8)), dims(256), 0,
				i32(R), i32(a.TopK), i32(a.H), i32(a.I), i32(a.E), ptrArg(a.X), ptrArg(a.IDs), ptrArg(a.Gate), ptrArg(a.Up), ws(l.Act)),
			kernel("moe.cu", "moe_down_gemv", []string{a.WType, a.OutType}, []int64{vec},
				dims(int((int64(a.T)*int64(a.H)+7)/8)), dims(256), 0,
				i32(a.T), i32(a.TopK), i32(a.H), i32(a.I), i32(a.E), ws(l.Act), ptrArg(a.Weights), ptrArg(a.IDs), ptrArg(a.Down), ptrArg(a.Out), acc),
		}, nil
	}
	if l.Hopper {
		if l.BF16Q {
			return moeHopperQ(a, l), nil
		}
		return moeHopper(a, l), nil
	}
	mi := l.Rows / 32 // mma.sync's tile: 32-row blocks
	smem := MMASmem(mi, l.BK)
	tile := []int64{int64(mi), int64(l.BK)}
	return append(MoERouting(a, l),
		kernel("moe.cu", "moe_gateup_mma", nil, tile, dims(l.MaxTiles, ceilDiv(a.I, 64)), dims(256), smem,
			i32(a.TopK), i32(a.H), i32(a.I), ptrArg(a.X), ws(l.Sorted), ws(l.Tiles), ws(l.NTiles),
			ptrArg(a.Gate), ptrArg(a.Up), ws(l.Act), i32(a.Band/64)),
		kernel("moe.cu", "moe_down_mma", nil, tile, dims(l.MaxTiles, ceilDiv(a.H, mmaBN)), dims(256), smem,
			i32(a.H), i32(a.I), ws(l.Act), ws(l.Tiles), ws(l.NTiles), ptrArg(a.Down), ws(l.Ys), i32(a.Band*a.H/max(a.I, 1)/mmaBN)),
		MoECombine(a.OutType, a.T, a.TopK, a.H, a.Weights, a.Workspace.At(l.Pos), a.Workspace.At(l.Ys), a.Out, a.Accumulate),
	), nil
}

// MoECombine adds each of T tokens' k expert results (rows of H bf16 in
// ys, route j of token t at row pos[t*k+j], none where negative) weighted
// by weights (f32 [T, k]) in slot order into out ([T, H] of outType; onto
// it with accumulate), as the grouped experts end.
func MoECombine(outType string, T, k, H int, weights, pos, ys, out Ptr, accumulate bool) Launch {
	v := 1
	if H%8 == 0 {
		v = 8 // ys rows and the workspace are 16-byte aligned
	}
	return kernel("moe.cu", "moe_combine", []string{outType}, []int64{int64(v)},
		dims(min(ceilDiv(T*(H/v), 256), combineMaxBlocks)), dims(256), 0,
		i32(T), i32(k), i32(H), ptrArg(weights), ptrArg(pos), ptrArg(ys), ptrArg(out), i32(b2i(accumulate)))
}

// MoECombineNorm is MoECombine(ydt, T, k, H, weights, pos, ys, out,
// accumulate) then RMSNorm(ydt, odt, nout, out, w, T, H, eps) in one launch
// with their bits (fuseCombineNorm): a block a token row, of the norm's
// block size, a thread 8 values. H is a multiple of 8 from 1024 (the norm's
// block kernel) to 8192 (a chunk a thread); out, w and nout are 16-byte
// aligned (the norm's 16-byte path, the one the kernel reproduces); nout
// lies apart from weights, pos, ys (rows up to T*k) and out, and w from out.
func MoECombineNorm(ydt, odt string, T, k, H int, weights, pos, ys, out Ptr, accumulate bool, w, nout Ptr, eps float32) (Launch, error) {
	const op = "MoECombineNorm"
	n, err := RMSNorm(ydt, odt, nout, out, w, T, H, eps)
	if err != nil {
		return Launch{}, fmt.Errorf("%s: %w", op, err)
	}
	if n.Kernel != "rms_norm_block" || H%8 != 0 || H > 8192 || k <= 0 {
		return Launch{}, fmt.Errorf("%s: rows of %d (k %d): want a multiple of 8 from 1024 to 8192 and k > 0", op, H, k)
	}
	if !out.Aligned(16) || !w.Aligned(16) || !nout.Aligned(16) {
		return Launch{}, fmt.Errorf("%s: out %s, w %s and nout %s must be 16-byte aligned", op, out, w, nout)
	}
	if err := checkPtrs(op, "weights", weights, "pos", pos, "ys", ys); err != nil {
		return Launch{}, err
	}
	routes := int64(T) * int64(k)
	outs := int64(T) * int64(H)
	nb := outs * int64(dtypeSize(odt))
	for _, in := range []span{{weights, 4 * routes}, {pos, 4 * routes}, {ys, 2 * routes * int64(H)}, {out, outs * int64(dtypeSize(ydt))}} {
		if overlaps(nout, nb, in.at, in.n) {
			return Launch{}, fmt.Errorf("%s: the norm's output %s overlaps the combine's inputs or output", op, nout)
		}
	}
	if overlaps(w, 4*int64(H), out, outs*int64(dtypeSize(ydt))) {
		return Launch{}, fmt.Errorf("%s: the norm weight %s overlaps the combine's output %s", op, w, out)
	}
	return kernel("moe.cu", "moe_combine_norm", []string{ydt, odt}, nil, dims(T), n.Block, 0,
		i32(T), i32(k), i32(H), ptrArg(weights), ptrArg(pos), ptrArg(ys), ptrArg(out), i32(b2i(accumulate)),
		f32(eps), ptrArg(w), ptrArg(nout)), nil
}

// L2BandBytes is the weight bytes one N-band of one expert may take: a
// band of rows of an expert's matrix is read from memory once and reused
// from L2 by every token tile of that expert. 1 MiB leaves the H200's 50
// MiB L2 room for the bands of the experts in flight on its 132 SMs.
const L2BandBytes = 1 << 20

// MoEBand is the N-band width of an expert matrix of n rows of rowBytes
// bytes each: the most output columns, a multiple of 64 (a CTA tile),
// whose rows fit in L2BandBytes; at least 64 (or n if smaller), at most n.
func MoEBand(n int, rowBytes int64) int {
	if n <= 0 || rowBytes <= 0 {
		return 0
	}
	b := int(L2BandBytes/rowBytes) / 64 * 64
	return min(max(64, b), n)
}

// MoEAddShared extends every token's k routes with the shared experts
// first..first+shared-1 (weight 1) into w2 and ids2, [T, k+shared] each.
func MoEAddShared(T, k, shared, first int, weights, ids, w2, ids2 Ptr) Launch {
	g, b := grid1D(int64(T) * int64(k+shared))
	return kernel("moe.cu", "moe_add_shared", nil, nil, g, b, 0,
		i32(T), i32(k), i32(shared), i32(first), ptrArg(weights), ptrArg(ids), ptrArg(w2), ptrArg(ids2))
}
