package lower

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"lagc/quant"
)

// Block-quantised weights on the GPU (cuda/kernels/quant.cu and the
// quantised wgmma GEMM of gemm_hopper.cu), in the device layouts of
// qlayout.go. Decode GEMVs read the blocks directly, with the activations
// quantised to int8 groups of 32 first (q8x_quantize) so that the products
// run on dp4a; prefill dequantises in registers before wgmma, or (large
// dense matmuls, quantMatMul) into a bf16 workspace for the bf16 GEMM.

// QuantType returns the block type a dtype name stands for when the GPU
// has kernels for it.
func QuantType(dtype string) (quant.Type, bool) {
	t, err := quant.ParseType(dtype)
	if err != nil || !HasQuantKernels(t) {
		return 0, false
	}
	return t, true
}

// IsQuantized reports whether dtype names a block-quantised type.
func IsQuantized(dtype string) bool {
	t, err := quant.ParseType(dtype)
	return err == nil && t.Quantized()
}

// Q8XBytes is the scratch the quantised copy of activations [rows, K]
// takes: the int8 values, then per group of 32 (d, sum of each half, 0)
// at a 256-byte boundary (q8xScales).
func Q8XBytes(rows, K int) int64 {
	return align256(int64(rows)*int64(K)) + 16*int64(rows)*int64(K/32)
}

func q8xScales(xq Ptr, rows, K int) Ptr { return xq.At(align256(int64(rows) * int64(K))) }

// Q8XQuantize quantises x [rows, K] (f32 or bf16, K a multiple of 32) into
// xq (Q8XBytes).
func Q8XQuantize(xType string, x, xq Ptr, rows, K int) (Launch, error) {
	if rows <= 0 || K <= 0 || K%32 != 0 {
		return Launch{}, fmt.Errorf("q8x_quantize: %d rows of %d: K must be a positive multiple of 32", rows, K)
	}
	if x.Null() || xq.Null() || !xq.Aligned(16) || (xType != "f32" && xType != "bf16") {
		return Launch{}, fmt.Errorf("q8x_quantize: %s x, or a null or unaligned pointer", xType)
	}
	groups := int64(rows) * int64(K/32)
	return kernel("quant.cu", "q8x_quantize", []string{xType}, nil, dims(int(min((groups+7)/8, 4096))), dims(256), 0,
		i64(groups), ptrArg(x), ptrArg(xq), ptrArg(q8xScales(xq, rows, K))), nil
}

// QGEMVMaxRows is the most activation rows one quantised GEMV serves.
const QGEMVMaxRows = 8

// QGEMVArgs is y = x w^T for T <= QGEMVMaxRows rows of activations already
// quantised into XQ, with w the rows [Row0, Row0+N) ([Row0, Row0+2N) with
// SwiGLU: gate rows then up rows) of a quantised matrix of WRows rows.
type QGEMVArgs struct {
	T, K, N    int
	XQ, W, Y   Ptr
	WType      quant.Type
	WRows      int
	Row0       int
	YType      string
	SwiGLU     bool
	Accumulate bool
	// RowsPerWarp (1, 2, 4) and Split (1, 2, 4, 8) force the kernel's
	// shape; zero chooses (QGEMVShape), aiming at Groups warp groups (0:
	// QGEMVGroupsDefault).
	RowsPerWarp, Split int
	Groups             int
}

// QGEMVGroupsDefault is QGEMVShape's warp-group target: 32 warps per SM
// of an H200.
const QGEMVGroupsDefault = 4096

// QGEMVShape chooses how qgemv covers an [N, K] matrix for T activation
// rows: nw weight rows per warp group (four keep enough loads in flight
// and share the activation loads through L1; more activation rows need
// the registers) and split warps per group, so that about
// QGEMVGroupsDefault warp groups stream the matrix: short rows give up
// rows per warp first, long ones split K.
func QGEMVShape(N, K, T int, swiglu bool) (nw, split int) {
	return QGEMVShapeFor(N, K, T, swiglu, QGEMVGroupsDefault)
}

// QGEMVShapeFor is QGEMVShape aiming at want warp groups. split is chosen
// as for one row whatever T is: it sets the order in which a row's sums
// are added (each warp every split-th run of K), so a row's bits do not
// depend on how many rows share the launch (a batched step's rows equal
// the decode schedule's); nw does not change that order.
func QGEMVShapeFor(N, K, T int, swiglu bool, want int) (nw, split int) {
	nw = qgemvRowsPerWarp(N, K, T, swiglu, want)
	nw1 := qgemvRowsPerWarp(N, K, 1, swiglu, want)
	units := K / 32
	split = 1
	for split < 8 && ceilDiv(N, nw1)*split < want && units >= 2*32*2*split {
		split *= 2
	}
	if split >= 4 && nw == 1 && !swiglu {
		// K split 4 ways or more leaves a warp a short run of K: two rows
		// a warp keep more loads in flight (o_proj of S-2.1's 72-head
		// layers at 5 to 8 rows: a step of bucket 8 2% faster on the H200).
		nw = 2
	}
	return nw, split
}

// qgemvRowsPerWarp is QGEMVShapeFor's nw: fewer rows a warp for more
// activation rows (registers) and where short rows leave too few groups.
func qgemvRowsPerWarp(N, K, T int, swiglu bool, want int) int {
	nw := 4
	switch {
	case T > 4:
		nw = 1
	case T > 2:
		nw = 2
	}
	if swiglu {
		nw = max(1, nw/2)
	}
	for nw > 1 && ceilDiv(N, nw) < want && K/32 < 4*32 {
		nw /= 2
	}
	return nw
}

func checkQuantMatrix(op string, t quant.Type, rows, K int) error {
	if !HasQuantKernels(t) {
		return fmt.Errorf("%s: no GPU kernels for %s weights", op, t)
	}
	if rows <= 0 || K <= 0 || K%t.BlockElems() != 0 {
		return fmt.Errorf("%s: %s matrix [%d, %d]: K must be a positive multiple of %d", op, t, rows, K, t.BlockElems())
	}
	return nil
}

// QGEMV is the launch of a. qgemv reads its first weights before its
// programmatic wait (cuda's TestKernelsWaitFirst exempts it), so its
// matrix must be bytes no launch writes: the uploaded weights, or a
// caller's own device buffer (kernel tests and benchmarks).
func QGEMV(a QGEMVArgs) (Launch, error) {
	nw, split, err := qgemvShape("qgemv", a)
	if err != nil {
		return Launch{}, err
	}
	if a.W.Base != BaseWeights && a.W.Base != BaseDevice {
		return Launch{}, fmt.Errorf("qgemv: the matrix at %v is not in the weights (the kernel reads it before its wait)", a.W)
	}
	if a.XQ.Null() || !a.XQ.Aligned(16) {
		return Launch{}, fmt.Errorf("qgemv: null or unaligned pointer")
	}
	groups := ceilDiv(a.N, nw)
	return kernel("quant.cu", "qgemv", []string{a.YType}, []int64{int64(a.WType), int64(a.T), int64(b2i(a.SwiGLU)), int64(nw), int64(split)},
		dims(ceilDiv(groups, 8/split)), dims(256), 0,
		i32(a.N), i32(a.K), i64(int64(a.WRows)), i64(int64(a.Row0)), ptrArg(a.W), ptrArg(a.XQ), ptrArg(q8xScales(a.XQ, a.T, a.K)),
		ptrArg(a.Y), i32(b2i(a.Accumulate))), nil
}

// QGEMVSplit is QGEMV(a) with y's columns sent to outs in order (each its
// own [T, N_i] rows: qgemv_split), up to MaxSplit of them summing to a.N,
// neither SwiGLU nor accumulating (a.Y unused): one launch for a batched
// decode step's q, k, v and gate, each value qgemv's of a's shape.
func QGEMVSplit(a QGEMVArgs, outs []SplitOut) (Launch, error) {
	const op = "qgemv_split"
	if len(outs) < 1 || len(outs) > MaxSplit || a.SwiGLU || a.Accumulate {
		return Launch{}, fmt.Errorf("%s: %d outputs (1 to %d), SwiGLU %v, accumulate %v", op, len(outs), MaxSplit, a.SwiGLU, a.Accumulate)
	}
	a.Y = outs[0].Y
	nw, split, err := qgemvShape(op, a)
	if err != nil {
		return Launch{}, err
	}
	if a.XQ.Null() || !a.XQ.Aligned(16) {
		return Launch{}, fmt.Errorf("%s: null or unaligned pointer", op)
	}
	outArgs, err := splitOutArgs(op, outs, a.N)
	if err != nil {
		return Launch{}, err
	}
	groups := ceilDiv(a.N, nw)
	args := []Arg{i32(a.N), i32(a.K), i64(int64(a.WRows)), i64(int64(a.Row0)), ptrArg(a.W), ptrArg(a.XQ), ptrArg(q8xScales(a.XQ, a.T, a.K))}
	args = append(args, outArgs...)
	return kernel("quant.cu", "qgemv_split", []string{a.YType}, []int64{int64(a.WType), int64(a.T), int64(nw), int64(split)},
		dims(ceilDiv(groups, 8/split)), dims(256), 0, args...), nil
}

// qgemvShape checks a but for its activations and returns qgemv's rows per
// warp and split.
func qgemvShape(op string, a QGEMVArgs) (nw, split int, err error) {
	rows := a.N
	if a.SwiGLU {
		rows = 2 * a.N
	}
	if err := checkQuantMatrix(op, a.WType, a.WRows, a.K); err != nil {
		return 0, 0, err
	}
	switch {
	case a.T <= 0 || a.T > QGEMVMaxRows:
		return 0, 0, fmt.Errorf("%s: %d activation rows (1 to %d)", op, a.T, QGEMVMaxRows)
	case a.Row0 < 0 || a.Row0+rows > a.WRows:
		return 0, 0, fmt.Errorf("%s: rows [%d, %d) outside the matrix's %d", op, a.Row0, a.Row0+rows, a.WRows)
	case a.W.Null() || a.Y.Null() || !a.W.Aligned(16):
		return 0, 0, fmt.Errorf("%s: null or unaligned pointer", op)
	case a.YType != "f32" && a.YType != "bf16":
		return 0, 0, fmt.Errorf("%s: output dtype %q", op, a.YType)
	}
	groups := a.Groups
	if groups <= 0 {
		groups = QGEMVGroupsDefault
	}
	nw, split = QGEMVShapeFor(a.N, a.K, a.T, a.SwiGLU, groups)
	if a.RowsPerWarp != 0 {
		nw = a.RowsPerWarp
	}
	if a.Split != 0 {
		split = a.Split
	}
	if (nw != 1 && nw != 2 && nw != 4) || (split != 1 && split != 2 && split != 4 && split != 8) {
		return 0, 0, fmt.Errorf("%s: %d rows per warp, split %d (1, 2, 4; 1, 2, 4, 8)", op, nw, split)
	}
	return nw, split, nil
}

// QGEMVXInMax is the most activations (T*K) qgemv_xin quantises. Every
// block repeats the quantisation (about ten warp shuffles a group of 32,
// one a clock on an SM), so 2048 (64 groups) costs a block of 8 warps
// about 640 shuffles: with the 3 blocks an SM a 3072-row GEMV has, about
// a microsecond; the launch it saves costs 2 us. More would eat the gain.
const QGEMVXInMax = 2048

// QGEMVXIn is QGEMV(a) with the activations x [T, K] (xType f32 or bf16)
// quantised in the launch, as Q8XQuantize would (a.XQ is unused): the same
// bits in y, one launch fewer. T*K is at most QGEMVXInMax, and y must lie
// apart from x.
func QGEMVXIn(a QGEMVArgs, x Ptr, xType string) (Launch, error) {
	nw, split, err := qgemvShape("qgemv_xin", a)
	if err != nil {
		return Launch{}, err
	}
	n := int64(a.T) * int64(a.K)
	ysize := int64(a.T) * int64(a.N) * int64(dtypeSize(a.YType))
	switch {
	case n > QGEMVXInMax:
		return Launch{}, fmt.Errorf("qgemv_xin: %d rows of %d activations (at most %d in all)", a.T, a.K, QGEMVXInMax)
	case xType != "f32" && xType != "bf16":
		return Launch{}, fmt.Errorf("qgemv_xin: %s activations (f32 or bf16)", xType)
	case x.Null():
		return Launch{}, fmt.Errorf("qgemv_xin: null x")
	case overlaps(x, n*int64(dtypeSize(xType)), a.Y, ysize):
		return Launch{}, fmt.Errorf("qgemv_xin: y %s overlaps x %s", a.Y, x)
	}
	groups := ceilDiv(a.N, nw)
	return kernel("quant.cu", "qgemv_xin", []string{a.YType, xType},
		[]int64{int64(a.WType), int64(a.T), int64(b2i(a.SwiGLU)), int64(nw), int64(split)},
		dims(ceilDiv(groups, 8/split)), dims(256), int(n+16*(n/32)),
		i32(a.N), i32(a.K), i64(int64(a.WRows)), i64(int64(a.Row0)), ptrArg(a.W), ptrArg(x), ptrArg(a.Y),
		i32(b2i(a.Accumulate))), nil
}

// QGEMVFX is y [T, N] = x [T, K] w^T on qgemv_fx: the activations read
// as they are (xType bf16 or f32), w the first N rows of a q8_0 or q4_k
// matrix of wrows rows. Lower does not plan it: it is the float-activation
// variant the quantised-activation GEMV is measured against
// (BenchmarkQGEMVFloatX).
func QGEMVFX(t quant.Type, T, K, N, wrows int, x, w, y Ptr, xType, yType string) (Launch, error) {
	if err := checkQuantMatrix("qgemv_fx", t, wrows, K); err != nil {
		return Launch{}, err
	}
	switch {
	case t != quant.Q8_0 && t != quant.Q4_K:
		return Launch{}, fmt.Errorf("qgemv_fx: %s weights (q8_0 or q4_k)", t)
	case T <= 0 || T > QGEMVMaxRows || N <= 0 || N > wrows:
		return Launch{}, fmt.Errorf("qgemv_fx: %d rows of x, %d of w's %d", T, N, wrows)
	case (xType != "f32" && xType != "bf16") || (yType != "f32" && yType != "bf16"):
		return Launch{}, fmt.Errorf("qgemv_fx: dtypes %s, %s", xType, yType)
	case x.Null() || w.Null() || y.Null() || !x.Aligned(16) || !w.Aligned(16):
		return Launch{}, fmt.Errorf("qgemv_fx: null or unaligned pointer")
	}
	return kernel("quant.cu", "qgemv_fx", []string{yType, xType}, []int64{int64(t)}, dims(ceilDiv(N, 8)), dims(256), 0,
		i32(T), i32(N), i32(K), i64(int64(wrows)), ptrArg(w), ptrArg(x), ptrArg(y)), nil
}

// QMatrix is a stack of rows of a quantised matrix: Rows rows from Row0 of
// a matrix of Total rows at W.
type QMatrix struct {
	W           Ptr
	Total, Row0 int
}

// QMoEArgs is the routed experts of T <= QGEMVMaxRows decode tokens with
// quantised stacks: gate and up [E*I rows of H], down [E*H rows of I].
type QMoEArgs struct {
	T, H, I, E, TopK int
	X                Ptr // [T, H] XType
	XType            string
	Weights, IDs     Ptr // f32 and i32 [T, TopK]
	Gate, Up, Down   QMatrix
	WType            quant.Type // gate and up
	DownType         quant.Type // down; zero (f32, never a stack's block type): WType
	Out              Ptr        // [T, H] OutType
	OutType          string
	Accumulate       bool
	Workspace        Ptr // QMoEWorkspace bytes
	// QMoEForce forces the kernels' shape (TileRows, the prefill GEMMs',
	// is unused here); zero chooses.
	QMoEForce
}

// QMoEForce is a forced shape of the decode routed-expert kernels; zero
// values choose and every choice gives the same bits. GateUpRows (2, 4,
// 8, 16: rows in flight per lane in the gate+up kernel), DownRows (1, 2,
// 4: rows per warp in the down kernel) and DownUnits (2, 4, 8, 10: units per
// row in flight per lane there) force the kernels' rounds (QMoEShape).
// GateUpWarps and DownWarps (4 or 8) force the warps of a block; zero:
// the type's gate+up warps (QMoEShape) where GateUpRows is not forced, 4
// where it is, and 4 for down. GateUpStages (1 to 4) forces how gate+up
// loads its units: into a second set of registers before the round before
// is summed (1), or into shared memory stages-1 rounds ahead;
// GateUpStagesZero forces 0, into registers once the round before is
// summed; neither: the type's (QMoEShape) where neither GateUpRows nor
// GateUpWarps is forced, else 0. DownAll copies each lane's down
// units into shared memory at once (DownUnits unused). TileRows is the
// prefill's quantised grouped GEMMs' token tile (64, 96, 112 or 128), CTAs
// their CTAs a multiprocessor (1, or 2 with tiles of up to 96 rows), WGs
// their consumer warpgroups a CTA (2, or 4 on one CTA with tiles of up to
// 112 rows): hopperQShape; Pipe and NoPipe
// force their pipelined loop (a stage dequantised while the last one's
// MMAs run; one CTA) or the plain one: hopperQPipe; TokenStep and
// WholeTile their MMAs' widths: hopperQStep.
type QMoEForce struct {
	GateUpRows, GateUpWarps, GateUpStages int  `json:",omitempty"`
	GateUpStagesZero                      bool `json:",omitempty"`
	DownRows, DownUnits, DownWarps        int  `json:",omitempty"`
	DownAll                               bool `json:",omitempty"`
	TileRows                              int  `json:",omitempty"`
	CTAs                                  int  `json:",omitempty"`
	WGs                                   int  `json:",omitempty"`
	TokenStep                             int  `json:",omitempty"`
	WholeTile                             bool `json:",omitempty"`
	Pipe                                  bool `json:",omitempty"`
	NoPipe                                bool `json:",omitempty"`
	// BF16 runs the bf16 grouped experts' GEMMs on gemm_wgmma_q too
	// (QT_BF16: the weights as the MMA's A from swizzled shared memory,
	// the MMAs as wide as each tile's tokens), with its shape (rows, wgs,
	// vn, ...), instead of gemm_wgmma's 128-token tiles.
	BF16 bool `json:",omitempty"`
	// NoBF16 keeps them on gemm_wgmma whatever the chunk (BF16QWideMaxAvgRows).
	NoBF16 bool `json:",omitempty"`
	// BF16Ops keeps the quantised grouped GEMMs on bf16 operands (weights
	// dequantised in float, then rounded) rather than f16 (hopperQF16).
	BF16Ops bool `json:",omitempty"`
	// NoQ6K and NoQ5K dequantise q6_k and q5_k expert stacks into the
	// workspace for the bf16 grouped GEMMs, as before 2026-12-05, where
	// gemm_wgmma_q reads them (QA<QT_Q6_K_H>, QA<QT_Q5_K_H> and their f16
	// forms; hopperQMoEOK): H200, 12 S-2.1 layers, prefill 2048 0.60x the
	// time with q6_k downs under q4_k, 0.41x with q5_k over q6_k downs
	// (docs/PERF.md).
	NoQ6K bool `json:",omitempty"`
	NoQ5K bool `json:",omitempty"`
}

// ParseQMoEForce reads a shape as "g=8,gw=4,s=3,nh=2,sd=8,dw=4,all,rows=96,ctas=2,wgs=4,vn=16,whole,pipe"
// (any subset, comma-separated; "" is the zero shape): gate+up rows a
// round, warps, stages (s=0 sets GateUpStagesZero); down rows a warp,
// units a round, warps, all units at once; the prefill grouped GEMMs'
// token tile, CTAs a multiprocessor, consumer warpgroups, the step its
// MMAs' width follows a tile's rows in, or MMAs always as wide as the
// tile, and their pipelined loop (pipe) or the plain one (nopipe); bf16:
// the bf16 grouped experts on the same kernel whatever the chunk, nobf16:
// never (neither: by tokens an expert, BF16QWideMaxAvgRows); bf16ops: the
// quantised grouped GEMMs on bf16 operands rather than f16 (hopperQF16).
// QMoE and hopperQShape check the values.
func ParseQMoEForce(s string) (QMoEForce, error) {
	var f QMoEForce
	for _, kv := range strings.Split(s, ",") {
		kv = strings.TrimSpace(kv)
		if kv == "" {
			continue
		}
		if flag, ok := map[string]*bool{"all": &f.DownAll, "whole": &f.WholeTile, "pipe": &f.Pipe, "nopipe": &f.NoPipe, "bf16": &f.BF16, "nobf16": &f.NoBF16, "bf16ops": &f.BF16Ops, "noq6k": &f.NoQ6K, "noq5k": &f.NoQ5K}[kv]; ok {
			*flag = true
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		n, err := strconv.Atoi(v)
		if !ok || err != nil || n < 0 {
			return QMoEForce{}, fmt.Errorf("qmoe shape %q: %q is not KEY=N (N >= 0) or a flag (all, whole, pipe, nopipe, bf16, nobf16, bf16ops, noq6k, noq5k)", s, kv)
		}
		if k == "s" && n == 0 {
			f.GateUpStagesZero = true // the zero value chooses, so s=0 is a flag
		}
		field, ok := map[string]*int{"g": &f.GateUpRows, "gw": &f.GateUpWarps, "s": &f.GateUpStages,
			"nh": &f.DownRows, "sd": &f.DownUnits, "dw": &f.DownWarps, "rows": &f.TileRows, "ctas": &f.CTAs, "wgs": &f.WGs, "vn": &f.TokenStep}[k]
		if !ok {
			return QMoEForce{}, fmt.Errorf("qmoe shape %q: unknown key %q (g, gw, s, nh, sd, dw, all, rows, ctas, wgs, vn, whole, pipe, nopipe, bf16, nobf16, bf16ops, noq6k, noq5k)", s, k)
		}
		*field = n
	}
	return f, nil
}

// QMoEMaxTopK is the most routes per token the decode kernels take
// (QMOE_MAX_K in quant.cu).
const QMoEMaxTopK = 64

// qmoeMaxShared bounds the kernels' dynamic shared memory (every sm_80 or
// later GPU lets a block have 96 KiB).
const qmoeMaxShared = 96 << 10

// qmoeType is, per weight type, the rounds of the routed-expert kernels
// (QMoEShape) and how they stage the bytes a block's units share (QW's
// BE, SA and HEAD in quant.cu: per block of be elements of a row, sa bytes
// of its body and head bytes of its head; QB: qb bytes of quants a unit).
type qmoeType struct{ gateUpRows, gateUpWarps, gateUpStages, downRows, downUnits, be, sa, head, qb int }

// The 4-bit, 5-bit and 6-bit types' gate+up on 8 warps of 4 rows: 320
// blocks of S-2.1's decode fit three an SM either way, and twice the warps
// hide more of each round's latency (H200, 12 layers, MoE layer against
// 4 warps of 16 or 8 rows: q4_k -1.6%, iq4_xs -2.9%, q5_k -4.7%, q6_k
// -5.9%; q8_0 +0.4%, so it keeps its 4 warps). q4_k's down loads all ten
// units of a lane (S-2.1's top-10 x 32) before its wait, where 8 leave a
// second DRAM round trip after it (H200, q4_k_m graph decode, full depth
// 265.8 -> 269.0 tok/s, 12 layers 1.2% faster, 162 registers, no spill);
// iq4_xs measured 1.7% slower so, and q6_k spills. iq4_xs's gate+up loads
// its second round into a second set of registers before the first is
// summed (stages 1: full depth 263.1 -> 266.3 tok/s, 12 layers 1.6%
// faster; q4_k level, so not chosen).
var qmoeTypes = map[quant.Type]qmoeType{
	quant.Q8_0:   {8, 4, 0, 2, 4, 32, 0, 2, 32},
	quant.Q4_K:   {4, 8, 0, 2, 10, 256, 16, 4, 16},
	quant.Q5_K:   {4, 8, 0, 2, 8, 256, 48, 4, 16},
	quant.Q6_K:   {4, 8, 0, 2, 8, 256, 16, 2, 24},
	quant.IQ4_XS: {4, 8, 1, 2, 8, 256, 0, 8, 16},
}

// QMoEShape chooses the rounds of the quantised routed-expert kernels for
// weights of type t: gate+up's rows in flight per lane, warps a block and
// stages (QMoEForce.GateUpStages), down's rows per warp and units in
// flight per lane (8: about 128 bytes of quants; 10 for q4_k), as the
// registers of three blocks per SM hold without spilling. It depends on
// the type alone, never on T.
func QMoEShape(t quant.Type) (gateUpRows, gateUpWarps, gateUpStages, downRows, downUnits int) {
	q := qmoeTypes[t]
	return q.gateUpRows, q.gateUpWarps, q.gateUpStages, q.downRows, q.downUnits
}

// qmoeLayout is QMoE's workspace: x quantised first (at offset 0, where
// a quantised GEMV of the same x puts it, so that reuseQ8X drops the
// repeat and fuseNormQ8X moves it into the norm), then the routes'
// activations, quantised.
type qmoeLayout struct{ xq, aq, total int64 }

func (a QMoEArgs) layout() qmoeLayout {
	x := Q8XBytes(a.T, a.H)
	return qmoeLayout{xq: 0, aq: x, total: x + Q8XBytes(a.T*a.TopK, a.I)}
}

// downType is the down stack's type.
func (a QMoEArgs) downType() quant.Type {
	if a.DownType == 0 {
		return a.WType
	}
	return a.DownType
}

// QMoEWorkspace is the scratch QMoE needs: x and the routes' activations,
// quantised.
func QMoEWorkspace(a QMoEArgs) int64 { return a.layout().total }

// qmoeShared is the kernels' dynamic shared memory: for gate+up a token's
// quantised x (scales and int8 values) and the staged bytes of a block's
// 64 weight rows (32 activations); for down the token's k quantised
// activation rows (scales, int8 values) and the staged bytes of the
// block's downRows*downWarps rows of each slot's expert. With stages (2
// or more), gate+up adds its warps' rings of units from a 256-byte
// boundary, and down with all its units (downAll) their copies likewise.
func qmoeShared(t, dt quant.Type, H, I, k, gateUpRows, gateUpWarps, stages, downRows, downWarps int, downAll bool) (gateUp, down int) {
	q := qmoeTypes[t]
	gateUp = 16*(H/32) + H + 64*(H/q.be)*(q.sa+q.head)
	if stages >= 2 {
		gateUp = int(align256(int64(gateUp))) + gateUpWarps*stages*gateUpRows*32*q.qb
	}
	d := qmoeTypes[dt]
	down = k * (16*(I/32) + I + downWarps*downRows*(I/d.be)*(d.sa+d.head))
	if downAll {
		down = int(align256(int64(down))) + downWarps*ceilDiv(k*I/32, 32)*downRows*32*d.qb
	}
	return gateUp, down
}

// QMoE returns the launches of the quantised routed experts: x quantised
// (q8x_quantize), the gate+up GEMVs with SwiGLU per route (the
// activations quantised on the way out), then the down GEMVs summed per
// token with the routing weights.
func QMoE(a QMoEArgs) ([]Launch, error) {
	for _, m := range []struct {
		what string
		q    QMatrix
		n, k int
		t    quant.Type
	}{{"gate", a.Gate, a.E * a.I, a.H, a.WType}, {"up", a.Up, a.E * a.I, a.H, a.WType}, {"down", a.Down, a.E * a.H, a.I, a.downType()}} {
		if err := checkQuantMatrix("moe", m.t, m.q.Total, m.k); err != nil {
			return nil, err
		}
		if m.q.Row0 < 0 || m.q.Row0+m.n > m.q.Total || m.q.W.Null() || !m.q.W.Aligned(16) {
			return nil, fmt.Errorf("moe: %s stack of %d rows from %d outside its matrix of %d, or unaligned", m.what, m.n, m.q.Row0, m.q.Total)
		}
	}
	if a.T <= 0 || a.T > QGEMVMaxRows || a.TopK <= 0 || a.TopK > QMoEMaxTopK || a.E <= 0 {
		return nil, fmt.Errorf("moe: T %d (1 to %d), k %d (1 to %d), E %d", a.T, QGEMVMaxRows, a.TopK, QMoEMaxTopK, a.E)
	}
	if a.XType != "f32" && a.XType != "bf16" {
		return nil, fmt.Errorf("moe: %s activations (f32 or bf16)", a.XType)
	}
	if a.OutType != "f32" && a.OutType != "bf16" {
		return nil, fmt.Errorf("moe: output dtype %q (f32 or bf16)", a.OutType)
	}
	for _, p := range []Ptr{a.X, a.Weights, a.IDs, a.Out, a.Workspace} {
		if p.Null() {
			return nil, fmt.Errorf("moe: null pointer")
		}
	}
	if !a.X.Aligned(16) || !a.Workspace.Aligned(16) {
		return nil, fmt.Errorf("moe: x and the workspace must be 16-byte aligned")
	}
	g, gw, ns, _, _ := QMoEShape(a.WType)
	_, _, _, nh, sd := QMoEShape(a.downType())
	if a.GateUpRows != 0 {
		g, gw = a.GateUpRows, 4 // forced rows keep their 4 warps unless those are forced too
	}
	if a.GateUpWarps != 0 {
		gw = a.GateUpWarps
	}
	if a.DownRows != 0 {
		nh = a.DownRows
	}
	if a.DownUnits != 0 {
		sd = a.DownUnits
	}
	dw := max(a.DownWarps, 4)
	if (g != 2 && g != 4 && g != 8 && g != 16) || (nh != 1 && nh != 2 && nh != 4) || (sd != 2 && sd != 4 && sd != 8 && sd != 10) {
		return nil, fmt.Errorf("moe: rounds of %d gate+up rows, %d down rows x %d units (2, 4, 8, 16; 1, 2, 4; 2, 4, 8, 10)", g, nh, sd)
	}
	if (gw != 4 && gw != 8) || (dw != 4 && dw != 8) || g > 64/gw {
		return nil, fmt.Errorf("moe: %d gate+up warps of %d rows, %d down warps (4 or 8 warps, at most 64/warps rows)", gw, g, dw)
	}
	switch {
	case a.GateUpStages != 0 || a.GateUpStagesZero:
		ns = a.GateUpStages
	case a.GateUpRows != 0 || a.GateUpWarps != 0:
		ns = 0 // a forced gate+up shape loads plainly unless its stages are forced too
	}
	if ns < 0 || ns > 4 {
		return nil, fmt.Errorf("moe: %d gate+up stages (0 to 4)", ns)
	}
	smem, dsmem := qmoeShared(a.WType, a.downType(), a.H, a.I, a.TopK, g, gw, ns, nh, dw, a.DownAll)
	if smem > qmoeMaxShared || dsmem > qmoeMaxShared {
		return nil, fmt.Errorf("moe: H = %d, I = %d and k = %d need %d and %d bytes of shared memory (at most %d)",
			a.H, a.I, a.TopK, smem, dsmem, qmoeMaxShared)
	}
	R, lay := a.T*a.TopK, a.layout()
	xq, aq := a.Workspace.At(lay.xq), a.Workspace.At(lay.aq)
	as := q8xScales(aq, R, a.I)
	qx, err := Q8XQuantize(a.XType, a.X, xq, a.T, a.H)
	if err != nil {
		return nil, err
	}
	return []Launch{
		qx,
		kernel("quant.cu", "moe_gateup_qgemv", nil, []int64{int64(a.WType), int64(g), int64(gw), int64(ns)}, dims(R*(a.I/32)), dims(32*gw), smem,
			i32(a.TopK), i32(a.H), i32(a.I), i32(a.E), ptrArg(xq), ptrArg(q8xScales(xq, a.T, a.H)), ptrArg(a.IDs),
			ptrArg(a.Gate.W), i64(int64(a.Gate.Total)), i64(int64(a.Gate.Row0)),
			ptrArg(a.Up.W), i64(int64(a.Up.Total)), i64(int64(a.Up.Row0)), ptrArg(aq), ptrArg(as)),
		kernel("quant.cu", "moe_down_qgemv", []string{a.OutType}, []int64{int64(a.downType()), int64(nh), int64(sd), int64(dw), int64(b2i(a.DownAll))},
			dims(a.T*ceilDiv(a.H, dw*nh)), dims(32*dw), dsmem, i32(a.TopK), i32(a.H), i32(a.I), i32(a.E),
			i64(int64(a.Down.Total)), i64(int64(a.Down.Row0)), ptrArg(aq), ptrArg(as),
			ptrArg(a.Weights), ptrArg(a.IDs), ptrArg(a.Down.W), ptrArg(a.Out), i32(b2i(a.Accumulate))),
	}, nil
}

// QDequant writes rows [row0, row0+n) of the quantised matrix w (rows x K)
// to out as outType (f32 or bf16): the prefill path for types and shapes
// without a quantised GEMM.
func QDequant(t quant.Type, w Ptr, rows, K, row0, n int, out Ptr, outType string) (Launch, error) {
	if err := checkQuantMatrix("qdequant", t, rows, K); err != nil {
		return Launch{}, err
	}
	if row0 < 0 || n <= 0 || row0+n > rows || w.Null() || out.Null() {
		return Launch{}, fmt.Errorf("qdequant: rows [%d, %d) outside [0, %d), or a null pointer", row0, row0+n, rows)
	}
	if !out.Aligned(16) {
		return Launch{}, fmt.Errorf("qdequant: output %v not 16-byte aligned (the kernel stores 16 bytes at once)", out)
	}
	groups := int64(n) * int64(K/32)
	return kernel("quant.cu", "qdequant", []string{outType}, []int64{int64(t)}, dims(int(min((groups+255)/256, strideBlocks))), dims(256), 0,
		i64(int64(rows)), i32(K), i64(int64(row0)), i64(int64(n)), ptrArg(w), ptrArg(out)), nil
}

// QEmbedding is Embedding with the table [V, H] block-quantised (type t,
// the device layout): each token's row dequantised into out as dt.
func QEmbedding(t quant.Type, dt string, out, tokens, table Ptr, T, V, H int) (Launch, error) {
	const op = "QEmbedding"
	if err := checkEmbedding(op, dt, out, tokens, table, T, V, H); err != nil {
		return Launch{}, err
	}
	if err := checkQuantMatrix(op, t, V, H); err != nil { // rows of whole blocks: of 32 at least
		return Launch{}, err
	}
	if !out.Aligned(16) || !table.Aligned(16) {
		return Launch{}, fmt.Errorf("%s: out %v and the table %v must be 16-byte aligned", op, out, table)
	}
	return kernel("quant.cu", "qembedding", []string{dt}, []int64{int64(t)}, dims(min(ceilDiv(H/32, 256), 64), T), dims(256), 0,
		i32(T), i32(H), i32(V), ptrArg(tokens), ptrArg(table), ptrArg(out)), nil
}

// QSynth fills the quantised matrix (rows x K) at w with random quants and
// small scales in the device layout: synthetic weights for benchmarks.
func QSynth(t quant.Type, w Ptr, rows, K int, seed uint32) (Launch, error) {
	if err := checkQuantMatrix("qsynth", t, rows, K); err != nil {
		return Launch{}, err
	}
	nb := int64(rows) * int64(K/t.BlockElems())
	return kernel("quant.cu", "qsynth", nil, []int64{int64(t)}, dims(int(min((nb+255)/256, strideBlocks))), dims(256), 0,
		i64(int64(rows)), i32(K), ptrArg(w), u32(seed)), nil
}

// HopperQTypes are the weight types the quantised wgmma GEMM reads in
// dense matmuls; HopperQMoETypes those its grouped MoE GEMMs read.
var (
	HopperQTypes    = []quant.Type{quant.Q8_0, quant.Q4_K, quant.IQ4_XS}
	HopperQMoETypes = []quant.Type{quant.Q8_0, quant.Q4_K, quant.IQ4_XS, quant.Q5_K, quant.Q6_K}
)

// hopperQMoEOK is hopperQOK for an MoE layer's grouped GEMMs: the types of
// HopperQMoETypes, q6_k and q5_k unless QMoEForce.NoQ6K or NoQ5K.
func (a MoEArgs) hopperQMoEOK(t quant.Type, K int) error {
	if t == quant.Q6_K && a.QMoE.NoQ6K || t == quant.Q5_K && a.QMoE.NoQ5K {
		return fmt.Errorf("the %s grouped GEMM turned off (LAGC_QMOE_SHAPE's noq6k, noq5k)", t)
	}
	return hopperQTypeOK(a.CC, a.PrefillMMA, t, HopperQMoETypes, a.XType, K)
}

// hopperQBytes is the quant bytes of a row per 64-element stage (q6_k:
// ql's 64 and qh's 32, in three boxes of hopperQBox; q5_k: qs's 32 and
// qh's 32, in two).
func hopperQBytes(t quant.Type) int {
	switch t {
	case quant.Q4_K, quant.IQ4_XS:
		return 32
	case quant.Q6_K:
		return 96
	case quant.Q5_K:
		return 64
	case quant.BF16:
		return 128 // 64 bf16 weights (QA<QT_BF16_H>)
	}
	return 64
}

// hopperQSmem is gemm_wgmma_q's dynamic shared memory: stages of a token
// tile, 64 x wgs rows of quant bytes and their scales as the producer
// stages them, the epilogue's staging (hopperQEpiStage), and 1 KiB of
// alignment slack. With two CTAs a multiprocessor the staging comes out
// of the stages' budget (both CTAs must fit), with one on top of it.
func hopperQSmem(t quant.Type, bn, ctas, wgs, epi int, yType string) int {
	stage := bn*128 + 64*wgs*(hopperQBytes(t)+hopperQScaleBytes(t))
	es := hopperQEpiStage(epi, yType, wgs)
	budget := hopperQBudget(ctas)
	if ctas == 2 {
		budget -= es
	}
	st := min(budget/stage, 8)
	return st*stage + es + 1024
}

// hopperQEpiStage is gemm_wgmma_q's epilogue staging (XSTORE in
// gemm_hopper.cu): 512 bytes a consumer warp for plain bf16 stores.
func hopperQEpiStage(epi int, yType string, wgs int) int {
	if epi != EpiStore || yType != "bf16" {
		return 0
	}
	return 512 * 4 * wgs
}

// hopperQScaleBytes is the bytes of a row's scales a stage of
// gemm_wgmma_q holds (QA<QT>::SC in gemm_hopper.cu): q4_k's six factors
// and offsets (padded to 8 floats), q8_0's two scales and their 2^-8
// multiples (iq4_xs: its two sub-blocks' d * (ls - 32) so).
func hopperQScaleBytes(t quant.Type) int {
	switch t {
	case quant.Q4_K, quant.Q5_K, quant.Q6_K: // q6_k: its four k16 steps' d * sc and their 2^-8 multiples
		return 32
	case quant.BF16:
		return 0
	}
	return 16
}

// hopperQBox is the byte width of the weights' TMA boxes (64 rows each):
// a stage's quant bytes of a row, or q6_k's three boxes of 32 and q5_k's
// two.
func hopperQBox(t quant.Type) int {
	if t == quant.Q6_K || t == quant.Q5_K {
		return 32
	}
	return hopperQBytes(t)
}

// hopperQBudget is gemm_wgmma_q's shared-memory budget with ctas CTAs a
// multiprocessor: QCfg<CTAS>::SMEM in gemm_hopper.cu (TestSmemAgrees).
func hopperQBudget(ctas int) int {
	if ctas == 2 {
		return 110 * 1024
	}
	return 200 * 1024
}

// hopperQOK says why gemm_wgmma_q cannot run a GEMM of K with t weights and
// xType activations, or nil.
func hopperQOK(cc int, mma bool, t quant.Type, xType string, K int) error {
	return hopperQTypeOK(cc, mma, t, HopperQTypes, xType, K)
}

// hopperQTypeOK is hopperQOK with the weight types the GEMM reads given.
func hopperQTypeOK(cc int, mma bool, t quant.Type, types []quant.Type, xType string, K int) error {
	switch {
	case cc < 90 || mma:
		return fmt.Errorf("not a Hopper target, or prefill GEMMs kept on mma.sync")
	case !slices.Contains(types, t):
		return fmt.Errorf("no wgmma kernel for %s weights", t)
	case xType != "bf16":
		return fmt.Errorf("%s activations (the wgmma kernel reads bf16)", xType)
	case K%64 != 0 || K%t.BlockElems() != 0:
		return fmt.Errorf("the inner dimension K = %d must be a multiple of 64 and of %s's block", K, t)
	}
	return nil
}

// hopperQMaps are the tensor maps of gemm_wgmma_q: the tokens (xelem, bf16
// or f16, [T, K], boxes of bn x 64) and the weights' quant bytes (boxes of
// 64 rows).
func hopperQMaps(x Ptr, xelem string, T, K int, w Ptr, t quant.Type, wrows, bn int) (Arg, Arg) {
	cols := int64(K) // q8_0: the int8 plane
	switch t {
	case quant.BF16: // rows of 64 weights a stage, 128-byte swizzled as x's
		return tmapArg(x, TMap{Elem: xelem, Rows: int64(T), Cols: int64(K), LD: int64(K), BoxRows: bn, BoxCols: 64}),
			tmapArg(w, TMap{Elem: "bf16", Rows: int64(wrows), Cols: int64(K), LD: int64(K), BoxRows: 64, BoxCols: 64})
	case quant.Q4_K:
		cols = int64(K/256) * 144
	case quant.Q6_K:
		cols = int64(K/256) * 208
	case quant.Q5_K:
		cols = int64(K/256) * 176
	case quant.IQ4_XS:
		cols = int64(K / 2) // the qs plane
	}
	return tmapArg(x, TMap{Elem: xelem, Rows: int64(T), Cols: int64(K), LD: int64(K), BoxRows: bn, BoxCols: 64}),
		tmapArg(w, TMap{Elem: "u8", Rows: int64(wrows), Cols: cols, LD: cols, BoxRows: 64, BoxCols: hopperQBox(t)})
}

// hopperQBN is gemm_wgmma_q's token tile of dense GEMMs.
const hopperQBN = 128

// hopperQTiles is the number of tiles of a dense gemm_wgmma_q: token tiles
// of hopperQBN by feature tiles of 128 (64 gate+up pairs with SwiGLU).
func hopperQTiles(T, N int, swiglu bool) int {
	fw := 128
	if swiglu {
		fw = 64
	}
	return ceilDiv(T, hopperQBN) * ceilDiv(N, fw)
}

// HopperQGEMM is y [T, N] = x [T, K] w^T on gemm_wgmma_q for w the rows
// [row0, row0+N) (SwiGLU: gate rows there, up rows from upRow) of a
// quantised matrix of wrows rows; epi is EpiStore, EpiAccumulate or
// EpiSwiGLU.
func HopperQGEMM(T, N, K int, x Ptr, w Ptr, t quant.Type, wrows, row0 int, y Ptr, yType string, epi, upRow, sms int) Launch {
	const bn = hopperQBN
	tx, tq := hopperQMaps(x, "bf16", T, K, w, t, wrows, bn)
	tiles := hopperQTiles(T, N, epi == EpiSwiGLU)
	return kernel("gemm_hopper.cu", "gemm_wgmma_q", []string{yType}, []int64{int64(t), bn, int64(epi), 0, 1, 2, 0, 0},
		dims(max(1, min(tiles, sms))), dims(384), hopperQSmem(t, bn, 1, 2, epi, yType),
		tx, tq, ptrArg(w), i64(int64(wrows)), i32(row0), i32(T), i32(N), i32(K), ptrArg(y), i32(upRow),
		ptrArg(Ptr{}), ptrArg(Ptr{}), i32(0))
}

// moeQuant is how MoE runs quantised stacks (MoEArgs.QGate etc.): the
// decode GEMVs, the grouped wgmma GEMMs that dequantise in registers, or
// (types and shapes without those) the stacks dequantised into the
// workspace for the bf16 grouped path.
type moeQuant int

const (
	moeQuantDecode moeQuant = iota
	moeQuantHopper
	moeQuantDequant
	// moeQuantHopperBF16Down: gate and up on the quantised wgmma GEMM,
	// the down stack (a type without one: q6_k, q5_k) dequantised into the
	// workspace and run as bf16 rows on the same GEMM (QT_BF16_H), both on
	// bf16 operands.
	moeQuantHopperBF16Down
)

func (a MoEArgs) quantPath() (moeQuant, error) {
	t, dt, err := a.quantTypes()
	if err != nil {
		return 0, err
	}
	if a.T <= QGEMVMaxRows {
		return moeQuantDecode, nil
	}
	fused := a.QUp.W == a.QGate.W && a.QUp.Total == a.QGate.Total && a.QUp.Row0 == a.QGate.Row0+a.E*a.I
	if a.hopperQMoEOK(t, a.H) != nil || a.H%64 != 0 || a.I%64 != 0 || !fused || a.E > MaxExperts {
		return moeQuantDequant, nil
	}
	if a.hopperQMoEOK(dt, a.I) == nil {
		return moeQuantHopper, nil
	}
	return moeQuantHopperBF16Down, nil
}

// quantTypes are the gate and up stacks' type and the down stack's, each
// one with GPU kernels.
func (a MoEArgs) quantTypes() (gateUp, down quant.Type, err error) {
	t, ok := QuantType(a.WType)
	if !ok {
		return 0, 0, fmt.Errorf("moe_experts: no GPU kernels for %s stacks", a.WType)
	}
	dt, ok := QuantType(a.downType())
	if !ok {
		return 0, 0, fmt.Errorf("moe_experts: no GPU kernels for %s down stacks", a.downType())
	}
	return t, dt, nil
}

// qmoe is the decode path's arguments.
func (a MoEArgs) qmoe() QMoEArgs {
	t, dt, _ := a.quantTypes()
	return QMoEArgs{T: a.T, H: a.H, I: a.I, E: a.E, TopK: a.TopK, X: a.X, XType: a.XType, Weights: a.Weights, IDs: a.IDs,
		Gate: a.QGate, Up: a.QUp, Down: a.QDown, WType: t, DownType: dt, Out: a.Out, OutType: a.OutType, Accumulate: a.Accumulate,
		Workspace: a.Workspace, QMoEForce: a.QMoE}
}

// dequantArgs is a with bf16 stacks in the workspace at off, where
// dequantStacks writes them.
func (a MoEArgs) dequantArgs(off int64) MoEArgs {
	b := a
	b.WType, b.DownType = "bf16", ""
	EIH := int64(a.E) * int64(a.I) * int64(a.H)
	b.Gate = a.Workspace.At(off)
	b.Up = b.Gate.At(2 * EIH)
	b.Down = b.Up.At(2 * EIH)
	b.QGate, b.QUp, b.QDown = QMatrix{}, QMatrix{}, QMatrix{}
	return b
}

// dequantStacks are the launches writing the quantised stacks as bf16
// gate, up and down stacks into the workspace at off, and a with its
// stacks pointing there.
func (a MoEArgs) dequantStacks(off int64) ([]Launch, MoEArgs, error) {
	t, dt, err := a.quantTypes()
	if err != nil {
		return nil, a, err
	}
	b := a.dequantArgs(off)
	var ls []Launch
	for _, m := range []struct {
		q    QMatrix
		n, k int
		out  Ptr
		t    quant.Type
	}{{a.QGate, a.E * a.I, a.H, b.Gate, t}, {a.QUp, a.E * a.I, a.H, b.Up, t}, {a.QDown, a.E * a.H, a.I, b.Down, dt}} {
		l, err := QDequant(m.t, m.q.W, m.q.Total, m.k, m.q.Row0, m.n, m.out, "bf16")
		if err != nil {
			return nil, b, err
		}
		ls = append(ls, l)
	}
	return ls, b, nil
}

// hopperQShape is the quantised grouped GEMMs' token tile, CTAs a
// multiprocessor and consumer warpgroups a CTA: as forced (QMoEForce's
// TileRows, CTAs, WGs), the rest chosen. Chosen: one CTA of four consumer
// warpgroups (640 threads: 96 registers at launch, 104 a consumer after
// setmaxnreg), which share each stage's token tile among 256 weight rows,
// on tiles of 112 rows where wide (past QNarrowMaxAvgRows tokens an
// expert: MoEArgs.qWide; an expert of up to 112 routes in one tile, where
// 96 runs a second tile and a second pass over its weights for about 5%
// of a 2048-token chunk's tiles with uniform routes, 11% with a random
// router's) and 96 rows otherwise. Four warpgroups take tiles of up to
// 112 rows (the plain loop at 112: its accumulators leave no room for the
// pipelined one's second register set); two CTAs of two warpgroups (the
// choice before four, 80 registers at launch) up to 96; 128-row tiles run
// one CTA of two. The measurements behind each choice are in
// docs/PERF.md (four warpgroups: q4_k_m 48 layers prefill 2048 111.0 ->
// 107.1 ms on the H200).
func hopperQShape(f QMoEForce, wide bool) (rows, ctas, wgs int, err error) {
	switch rows = f.TileRows; rows {
	case 0:
		// 112 where wide: measured faster than 96 at 2048 tokens for the
		// quantised stacks (docs/PERF.md, 2026-12-05 from 20:54 UTC) and
		// the bf16 ones (2026-12-06); 96 where a forced shape wants it (two
		// CTAs, the pipelined loop).
		rows = 96
		if wide && f.CTAs != 2 && !f.Pipe {
			rows = 112
		}
	case 64, 96, 112, 128:
	default:
		return 0, 0, 0, fmt.Errorf("moe_experts: a token tile of %d rows (the quantised grouped GEMMs take 64, 96, 112 or 128)", rows)
	}
	switch {
	case f.CTAs < 0 || f.CTAs > 2:
		return 0, 0, 0, fmt.Errorf("moe_experts: %d CTAs a multiprocessor (the quantised grouped GEMMs take 1 or 2)", f.CTAs)
	case f.CTAs == 2 && rows > 96:
		return 0, 0, 0, fmt.Errorf("moe_experts: 2 CTAs a multiprocessor need token tiles of 96 rows or fewer (rows=96), not %d", rows)
	case f.WGs != 0 && f.WGs != 2 && f.WGs != 4:
		return 0, 0, 0, fmt.Errorf("moe_experts: %d consumer warpgroups (the quantised grouped GEMMs take 2 or 4)", f.WGs)
	case f.WGs == 4 && (f.CTAs == 2 || rows > 112):
		return 0, 0, 0, fmt.Errorf("moe_experts: 4 consumer warpgroups need one CTA a multiprocessor (ctas=1) and token tiles of 112 rows or fewer, not %d and %d",
			f.CTAs, rows)
	case f.Pipe && f.NoPipe:
		return 0, 0, 0, fmt.Errorf("moe_experts: pipe and nopipe both set (one or the other)")
	case f.BF16 && f.NoBF16:
		return 0, 0, 0, fmt.Errorf("moe_experts: bf16 and nobf16 both set (one or the other)")
	case f.TokenStep > 0 && rows%f.TokenStep != 0:
		return 0, 0, 0, fmt.Errorf("moe_experts: MMA widths in steps of %d rows do not divide a token tile of %d", f.TokenStep, rows)
	case f.Pipe && f.CTAs == 2:
		// Two CTAs' 104 registers a consumer do not hold two register sets
		// beside the accumulators: ptxas spills and serialises the MMAs.
		return 0, 0, 0, fmt.Errorf("moe_experts: the pipelined quantised grouped GEMM (pipe) runs one CTA a multiprocessor (ctas=1), not 2")
	}
	wgs = f.WGs
	if wgs == 0 {
		wgs = 2
		if f.CTAs != 2 && rows <= 112 {
			wgs = 4
		}
	}
	if f.Pipe && wgs == 4 && rows > 96 {
		// A second register set beside 112 tokens' accumulators: ptxas
		// spills and serialises the MMAs (NVRTC 12.4).
		return 0, 0, 0, fmt.Errorf("moe_experts: the pipelined quantised grouped GEMM (pipe) on 4 consumer warpgroups takes token tiles of 96 rows or fewer, not %d", rows)
	}
	ctas = f.CTAs
	if ctas == 0 {
		ctas = 1
		if wgs == 2 && rows <= 96 && !f.Pipe {
			ctas = 2
		}
	}
	return rows, ctas, wgs, nil
}

// hopperQPipe is gemm_wgmma_q's PIPE for the grouped GEMMs of type t on
// wgs consumer warpgroups (hopperQShape's): the pipelined loop, stage kb +
// 1 dequantised while stage kb's MMAs run, where forced (pipe) or by
// default for q4_k on the four warpgroups' CTA, where it was measured
// faster (H200: 48 layers q4_k_m, prefill 2048, three rounds, 102.02 ms
// against 102.87 plain, faster in each round; BenchmarkMoEQuant T=2048
// q4_k 1.194 against 1.220 ms), not for iq4_xs (1.523 against 1.481);
// docs/PERF.md. nopipe forces the plain loop. Two CTAs a multiprocessor
// cannot hold its second register set (hopperQShape refuses pipe there).
func hopperQPipe(f QMoEForce, t quant.Type, wgs, rows int) bool {
	switch {
	case f.Pipe:
		return true
	case f.NoPipe:
		return false
	}
	return wgs == 4 && rows <= 96 && t == quant.Q4_K
}

// hopperQStep is gemm_wgmma_q's VN for the grouped GEMMs: its MMAs as
// wide as a tile's rows rounded up to VN rows (an expert of a 2048-token
// chunk has about 80 tokens for 96-row tiles, and an MMA's time grows with
// its width), or 0 (WholeTile): always the whole tile. Chosen: 16 (H200,
// 48 layers q4_k_m, prefill 2048: 106.34 ms whole, 104.82 in steps of 8,
// 103.70 of 16, 103.89 of 32; docs/PERF.md).
func hopperQStep(f QMoEForce) (int, error) {
	switch {
	case f.WholeTile && f.TokenStep != 0:
		return 0, fmt.Errorf("moe_experts: vn=%d and whole both set (one or the other)", f.TokenStep)
	case f.WholeTile:
		return 0, nil
	case f.TokenStep == 0:
		return 16, nil
	case f.TokenStep == 8 || f.TokenStep == 16 || f.TokenStep == 32:
		return f.TokenStep, nil
	}
	return 0, fmt.Errorf("moe_experts: MMA widths in steps of %d rows (the quantised grouped GEMMs take 8, 16 or 32)", f.TokenStep)
}

// moeHopperQ returns the grouped experts' launches with quantised stacks
// on the wgmma core: as moeHopper, with gemm_wgmma_q dequantising the gate
// and up rows (one matrix, up after gate) and the down rows in registers;
// moe_gather_rows copies the routes' x rows first (the producer stages
// the rows' scales).
func moeHopperQ(a MoEArgs, l MoELayout) []Launch {
	t, dt, _ := a.quantTypes()
	if !IsQuantized(a.WType) { // bf16 stacks (MoELayout.BF16Q): gate then up in one matrix (moeHopperOK checked), as the quantised ones
		t, dt = quant.BF16, quant.BF16
		a.QGate = QMatrix{W: a.Gate, Total: 2 * a.E * a.I}
		a.QDown = QMatrix{W: a.Down, Total: a.E * a.H}
	}
	return moeHopperQTypes(a, l, t, dt)
}

// moeHopperBF16Down is moeQuantHopperBF16Down's launches: the down stack
// dequantised to bf16 rows at l.Dequant, then moeHopperQ's with those.
func moeHopperBF16Down(a MoEArgs, l MoELayout) ([]Launch, error) {
	t, dt, err := a.quantTypes()
	if err != nil {
		return nil, err
	}
	down := a.Workspace.At(l.Dequant)
	dq, err := QDequant(dt, a.QDown.W, a.QDown.Total, a.I, a.QDown.Row0, a.E*a.H, down, "bf16")
	if err != nil {
		return nil, err
	}
	a.QDown = QMatrix{W: down, Total: a.E * a.H}
	return append([]Launch{dq}, moeHopperQTypes(a, l, t, quant.BF16)...), nil
}

// moeHopperQTypes is moeHopperQ with gate and up of type t and the down
// of dt (quant.BF16: bf16 rows).
func moeHopperQTypes(a MoEArgs, l MoELayout, t, dt quant.Type) []Launch {
	ws := func(off int64) Arg { return ptrArg(a.Workspace.At(off)) }
	R := a.T * a.TopK
	sm := sms(a.SMs)
	_, ctas, wgs, _ := a.qShape() // checked by Layout
	vn, _ := hopperQStep(a.QMoE)  // likewise
	bn := l.Rows                  // the schedule's token tile (qShape)
	// f16 operands: the gathered rows and the gate+up output (the down's
	// input) in f16, and each type's f16 id for the template (hopperQF16);
	// both GEMMs so or neither, as the down reads the gate+up's output.
	_, f16 := hopperQF16(a.QMoE, t)
	if _, ok := hopperQF16(a.QMoE, dt); !ok {
		f16 = false
	}
	xe := "bf16"
	if f16 {
		xe = "f16"
	}
	p := moeHopperParts(a, l, f16)
	grouped := func(t quant.Type, x Ptr, K int, m QMatrix, N, epi, upRow, expertRows int, y Ptr, yt string) Launch {
		qt := int64(t)
		if f16 {
			qt, _ = hopperQF16(a.QMoE, t)
		}
		pipe := hopperQPipe(a.QMoE, t, wgs, bn)
		tx, tq := hopperQMaps(x, xe, R, K, m.W, t, m.Total, bn)
		return kernel("gemm_hopper.cu", "gemm_wgmma_q", []string{yt}, []int64{qt, int64(bn), int64(epi), 1, int64(ctas), int64(wgs), int64(vn), int64(b2i(pipe))},
			dims(ctas*sm), dims(128*(wgs+1)), hopperQSmem(t, bn, ctas, wgs, epi, yt),
			tx, tq, ptrArg(m.W), i64(int64(m.Total)), i32(m.Row0), i32(R), i32(N), i32(K), ptrArg(y), i32(upRow),
			ws(l.Tiles), ws(l.NTiles), i32(expertRows))
	}
	p.gateUp = grouped(t, a.Workspace.At(l.XG), a.H, a.QGate, a.I, EpiSwiGLU, a.E*a.I, a.I, a.Workspace.At(l.Act), xe)
	p.down = grouped(dt, a.Workspace.At(l.Act), a.I, a.QDown, a.H, EpiStore, 0, a.H, a.Workspace.At(l.Ys), "bf16")
	return p.launches()
}

// hopperQF16IDs are gemm_wgmma_q's type ids for weights with f16
// operands (QA<QT_Q4_K_F16_H>, QA<QT_Q8_0_F16_H>, QA<QT_IQ4_XS_F16_H>,
// QA<QT_Q6_K_F16_H>, QA<QT_Q5_K_F16_H> in
// gemm_hopper.cu; not ggml type numbers).
var hopperQF16IDs = map[quant.Type]int64{quant.Q4_K: 112, quant.Q8_0: 108, quant.IQ4_XS: 123, quant.Q6_K: 114, quant.Q5_K: 113}

// hopperQF16 gives the type id of the grouped GEMMs of weights t on f16
// operands, and whether they run so (unless f.BF16Ops). The
// dequantisation is then within f16's rounding (iq4_xs: two of them) and
// three instructions a pair of weights where the float one takes seven or
// eight (H200, S-2.1 prefill 2048: q4_k_m 7-8% faster, iq4_xs 13%,
// docs/PERF.md); the tokens' rows are converted to f16, saturating past
// its range.
func hopperQF16(f QMoEForce, t quant.Type) (int64, bool) {
	id, ok := hopperQF16IDs[t]
	return id, ok && !f.BF16Ops
}
