package lower

import "fmt"

// The kernels of the small ops: one launch each, no selection beyond the
// row length of rms_norm.

// Embedding gathers rows of table [V,H] into out [T,H] for the T token ids
// at tokens (i32; the previous step's argmax writes there, so a captured
// decode graph serves every step). An id outside [0, V) gives a NaN row.
func Embedding(dt string, out, tokens, table Ptr, T, V, H int) (Launch, error) {
	if err := checkEmbedding("Embedding", dt, out, tokens, table, T, V, H); err != nil {
		return Launch{}, err
	}
	return kernel("embedding.cu", "embedding", []string{dt}, nil, dims(min(ceilDiv(H, 256), 64), T), dims(256), 0,
		i32(T), i32(H), i32(V), ptrArg(tokens), ptrArg(table), ptrArg(out)), nil
}

// checkEmbedding is the argument check of Embedding and QEmbedding.
func checkEmbedding(op, dt string, out, tokens, table Ptr, T, V, H int) error {
	if err := checkDT(op, dt); err != nil {
		return err
	}
	if err := checkPos(op, "T", T, "V", V, "H", H); err != nil {
		return err
	}
	if T > 65535 {
		return fmt.Errorf("%s: %d tokens exceed the 65535 of one launch", op, T)
	}
	return checkPtrs(op, "out", out, "tokens", tokens, "table", table)
}

// RMSNorm computes out = w * x / sqrt(mean(x^2) + eps) over each of rows
// rows of n values, x read as xdt and out written as odt; w is f32 [n].
// Short rows (per-head norms, small models) take a warp each, 8 per block;
// long rows (the hidden state) a block each, 8 values per thread.
func RMSNorm(xdt, odt string, out, x, w Ptr, rows, n int, eps float32) (Launch, error) {
	const op = "RMSNorm"
	if err := checkDT(op, xdt, odt); err != nil {
		return Launch{}, err
	}
	if err := checkPos(op, "rows", rows, "n", n); err != nil {
		return Launch{}, err
	}
	if !(eps >= 0) {
		return Launch{}, fmt.Errorf("%s: eps = %g must not be negative", op, eps)
	}
	if err := checkPtrs(op, "out", out, "x", x, "w", w); err != nil {
		return Launch{}, err
	}
	args := []Arg{i32(rows), i32(n), f32(eps), ptrArg(x), ptrArg(w), ptrArg(out)}
	if n < 1024 {
		const rowsPerBlock = 8
		return kernel("norm.cu", "rms_norm_warp", []string{xdt, odt}, nil, dims(ceilDiv(rows, rowsPerBlock)), dims(32*rowsPerBlock), 0, args...), nil
	}
	return kernel("norm.cu", "rms_norm_block", []string{xdt, odt}, nil, dims(rows), dims(min(1024, 32*ceilDiv(ceilDiv(n, 8), 32))), 0, args...), nil
}

// RMSNormQ8X is RMSNorm that also quantises out, as stored, into xq
// (Q8XBytes(rows, n)) bit for bit as Q8XQuantize(odt, out, xq, rows, n)
// then would: a quantised GEMV can read out's int8 groups without a
// quantisation launch of its own. odt is f32 or bf16 and n a multiple of
// 32; xq lies apart from x and out.
func RMSNormQ8X(xdt, odt string, out, x, w, xq Ptr, rows, n int, eps float32) (Launch, error) {
	const op = "RMSNormQ8X"
	l, err := RMSNorm(xdt, odt, out, x, w, rows, n, eps)
	if err != nil {
		return Launch{}, err
	}
	if n%32 != 0 || (odt != "f32" && odt != "bf16") {
		return Launch{}, fmt.Errorf("%s: %s rows of %d: want f32 or bf16 rows of a multiple of 32", op, odt, n)
	}
	if xq.Null() || !xq.Aligned(16) {
		return Launch{}, fmt.Errorf("%s: xq %s is null or not 16-byte aligned", op, xq)
	}
	elems, q := int64(rows)*int64(n), Q8XBytes(rows, n)
	if overlaps(xq, q, x, elems*int64(dtypeSize(xdt))) || overlaps(xq, q, out, elems*int64(dtypeSize(odt))) {
		return Launch{}, fmt.Errorf("%s: the quantised copy at %s overlaps x or out", op, xq)
	}
	l.Kernel += "_q8x"
	l.Args = append(l.Args, ptrArg(xq), ptrArg(q8xScales(xq, rows, n)))
	return l, nil
}

// AddRMSNorm is Elementwise("add", xdt, rows*n, a, b, sum) then
// RMSNorm(xdt, odt, out, sum, w, rows, n, eps) in one launch, with their
// bits: sum = a + b as the add stores it, out its norm. sum may be a or b
// or lie apart from them; out and w lie apart from a, b and sum (the
// kernel's rows would race otherwise). The geometry is RMSNorm's.
func AddRMSNorm(xdt, odt string, sum, out, a, b, w Ptr, rows, n int, eps float32) (Launch, error) {
	const op = "AddRMSNorm"
	l, err := RMSNorm(xdt, odt, out, sum, w, rows, n, eps)
	if err != nil {
		return Launch{}, err
	}
	if err := checkPtrs(op, "a", a, "b", b); err != nil {
		return Launch{}, err
	}
	elems := int64(rows) * int64(n)
	xn, on, wn := elems*int64(dtypeSize(xdt)), elems*int64(dtypeSize(odt)), 4*int64(n)
	switch {
	case a != sum && overlaps(a, xn, sum, xn), b != sum && overlaps(b, xn, sum, xn):
		return Launch{}, fmt.Errorf("%s: sum %s overlaps a %s or b %s in part", op, sum, a, b)
	case overlaps(out, on, a, xn), overlaps(out, on, b, xn), overlaps(out, on, sum, xn), overlaps(out, on, w, wn):
		return Launch{}, fmt.Errorf("%s: out %s overlaps a, b, sum or w", op, out)
	case overlaps(sum, xn, w, wn):
		return Launch{}, fmt.Errorf("%s: sum %s overlaps w %s", op, sum, w)
	}
	l.Kernel = "add_" + l.Kernel
	l.Args = []Arg{l.Args[0], l.Args[1], l.Args[2], ptrArg(a), ptrArg(b), ptrArg(sum), ptrArg(w), ptrArg(out)}
	return l, nil
}

// AddRMSNormQ8X is AddRMSNorm that also quantises out as RMSNormQ8X does;
// xq lies apart from a, b, sum and out.
func AddRMSNormQ8X(xdt, odt string, sum, out, a, b, w, xq Ptr, rows, n int, eps float32) (Launch, error) {
	const op = "AddRMSNormQ8X"
	q, err := RMSNormQ8X(xdt, odt, out, sum, w, xq, rows, n, eps)
	if err != nil {
		return Launch{}, err
	}
	l, err := AddRMSNorm(xdt, odt, sum, out, a, b, w, rows, n, eps)
	if err != nil {
		return Launch{}, err
	}
	xn := int64(rows) * int64(n) * int64(dtypeSize(xdt))
	if qn := Q8XBytes(rows, n); overlaps(xq, qn, a, xn) || overlaps(xq, qn, b, xn) {
		return Launch{}, fmt.Errorf("%s: the quantised copy at %s overlaps a or b", op, xq)
	}
	l.Kernel += "_q8x"
	l.Args = append(l.Args, q.Args[6:]...)
	return l, nil
}

// RoPETable is a rotary embedding's frequency table on the device: the
// inverse frequencies (f32 [RotaryDim/2]) and the factor cos and sin are
// multiplied by (YaRN's attention factor).
type RoPETable struct {
	InvFreq    Ptr
	RotaryDim  int
	AttnFactor float32
}

// NormRoPEArgs is rotary position embedding (NeoX rotate-half on the first
// RotaryDim channels of each head; the rest pass through), optionally after
// a per-head RMS norm: token t's row at X + t*LD elements holds NQ heads
// normalised with WQ, then NK heads normalised with WK (f32 [d]; null
// skips the norm), rotated at positions pos [T] and written to Out (same
// layout; may be X).
type NormRoPEArgs struct {
	DType     string
	Out, X    Ptr
	LD        int
	T, NQ, NK int
	D         int
	WQ, WK    Ptr
	Eps       float32
	Pos       Ptr
	Table     RoPETable
	SMs       int // multiprocessors of the target (0: an H200's), for the grid
}

// qk_norm_rope's block is normRoPEWarps warps; its fast path
// (normRoPEFast) gives a (token, head) 16 threads and each 16 threads up
// to normRoPEItems items (NR_ITEMS in rope.cu), sized for one wave of
// normRoPEBlocksPerSM blocks an SM (its launch bounds).
const (
	normRoPEWarps       = 8
	normRoPEItems       = 8
	normRoPEBlocksPerSM = 4
)

// NormRoPE returns the launch of qk_norm_rope: its (token, head) items in
// blocks of per consecutive ones (token-major; a block may span tokens,
// with a rope table in shared memory for each). The fast path fills one
// wave with up to normRoPEItems items a 16-thread slot, at least one; the
// one-warp path keeps a token's heads in groups of up to two a warp where
// that leaves two blocks an SM, else one.
func NormRoPE(a NormRoPEArgs) (Launch, error) {
	const op = "RoPE"
	if err := checkDT(op, a.DType); err != nil {
		return Launch{}, err
	}
	if err := checkPos(op, "T", a.T, "heads", a.NQ+a.NK, "d", a.D); err != nil {
		return Launch{}, err
	}
	if a.NQ < 0 || a.NK < 0 {
		return Launch{}, fmt.Errorf("%s: negative head count", op)
	}
	if a.LD < (a.NQ+a.NK)*a.D {
		return Launch{}, fmt.Errorf("%s: row stride %d is below %d heads x %d channels", op, a.LD, a.NQ+a.NK, a.D)
	}
	r := a.Table.RotaryDim
	if r <= 0 || r%2 != 0 || r > a.D {
		return Launch{}, fmt.Errorf("%s: rotary width %d must be even and in [2, head_dim %d]", op, r, a.D)
	}
	if err := checkPtrs(op, "out", a.Out, "x", a.X, "pos", a.Pos, "rope table", a.Table.InvFreq); err != nil {
		return Launch{}, err
	}
	if !(a.Eps >= 0) {
		return Launch{}, fmt.Errorf("%s: eps = %g must not be negative", op, a.Eps)
	}
	nh, warps := a.NQ+a.NK, normRoPEWarps
	items := int64(a.T) * int64(nh)
	if items > 1<<31-1 {
		return Launch{}, fmt.Errorf("%s: %d tokens are too many for one launch", op, a.T)
	}
	var per, stage int
	fast := normRoPEFast(a)
	if fast {
		slots := 2 * warps
		per = slots * max(1, min(normRoPEItems, ceilDiv(int(items), slots*normRoPEBlocksPerSM*sms(a.SMs))))
	} else {
		groups := ceilDiv(nh, 2*warps)
		if a.T*groups < 2*sms(a.SMs) {
			groups = ceilDiv(nh, warps)
		}
		per, stage = ceilDiv(nh, groups), warps*a.D
	}
	// A block starts a multiple of gcd(per, nh) heads into a token, so at
	// most nh - gcd: the most tokens (rope tables) its per items span.
	g := per
	for m := nh; m != 0; {
		g, m = m, g%m
	}
	tables := min(a.T, (nh-g+per-1)/nh+1)
	return kernel("rope.cu", "qk_norm_rope", []string{a.DType}, []int64{int64(b2i(fast))}, dims(ceilDiv(int(items), per)),
		dims(32*warps), (stage+tables*r)*4,
		i32(a.T), i32(a.NQ), i32(a.NK), i32(a.D), i64(int64(a.LD)), i64(int64(a.LD)), ptrArg(a.X), ptrArg(a.Out),
		ptrArg(a.WQ), ptrArg(a.WK), f32(a.Eps), ptrArg(a.Pos), ptrArg(a.Table.InvFreq), i32(r), f32(a.Table.AttnFactor), i32(per)), nil
}

// normRoPEFast says whether qk_norm_rope's fast path (FAST = 1) applies:
// head_dim 128 of 2-byte values in 16-byte aligned rows (every base is
// Alignment-aligned), and rot/2 a multiple of 8 channels whose number of
// 8-channel chunks is a power of two (a chunk's rotation partner is a
// lane xor away).
func normRoPEFast(a NormRoPEArgs) bool {
	r := a.Table.RotaryDim
	hq := r / 16
	return dtypeSize(a.DType) == 2 && a.D == 128 && r%16 == 0 && hq&(hq-1) == 0 && a.LD%8 == 0 &&
		a.X.Aligned(16) && a.Out.Aligned(16)
}

// SoftplusGate computes Laguna's attention output gate out = x *
// softplus(g): x and out [T, nh*d] contiguous, g [T, G] with rows ldg
// elements apart (0: G); G == nh gates per head, G == nh*d per element.
func SoftplusGate(dt string, out, x, g Ptr, T, nh, d, G, ldg int) (Launch, error) {
	const op = "SoftplusGate"
	if err := checkDT(op, dt); err != nil {
		return Launch{}, err
	}
	if err := checkPos(op, "T", T, "nh", nh, "d", d, "G", G); err != nil {
		return Launch{}, err
	}
	if G != nh && G != nh*d {
		return Launch{}, fmt.Errorf("%s: gate width %d is neither nh = %d (per-head) nor nh*d = %d (per-element)", op, G, nh, nh*d)
	}
	if ldg == 0 {
		ldg = G
	}
	if ldg < G {
		return Launch{}, fmt.Errorf("%s: gate row stride %d is below its width %d", op, ldg, G)
	}
	if err := checkPtrs(op, "out", out, "x", x, "g", g); err != nil {
		return Launch{}, err
	}
	gr, bl := grid1D(int64(T) * int64(nh) * int64(d))
	return kernel("gate.cu", "softplus_gate", []string{dt}, nil, gr, bl, 0,
		i32(T), i32(nh), i32(d), i32(G), ptrArg(x), ptrArg(g), i64(int64(ldg)), ptrArg(out)), nil
}

// Elementwise is one of the n-element kernels of elementwise_ops.cu (silu,
// mul, add), its pointers in the kernel's order: inputs, then out.
func Elementwise(name, dt string, n int, ptrs ...Ptr) (Launch, error) {
	if err := checkDT(name, dt); err != nil {
		return Launch{}, err
	}
	if n <= 0 {
		return Launch{}, fmt.Errorf("%s: n = %d must be positive", name, n)
	}
	args := []Arg{i64(int64(n))}
	for i, p := range ptrs {
		if p.Null() {
			return Launch{}, fmt.Errorf("%s: pointer %d is null", name, i)
		}
		args = append(args, ptrArg(p))
	}
	g, b := grid1D(int64(n))
	return kernel("elementwise_ops.cu", name, []string{dt}, nil, g, b, 0, args...), nil
}

// RouterTopK is the MoE router: logits [T, E] (dtype dt), optionally
// soft-capped, s = sigmoid; the top topK experts by s + bias (f32 [E], or
// null; it only chooses) go best first to ids i32 [T, topK], with weights
// f32 [T, topK] = s / sum(chosen s) * scaling. Above RouterBlockMaxT
// tokens a warp per token with the scores in registers (RouterWarpMaxE
// experts and RouterWarpMaxK choices at most), four tokens a block; else,
// and beyond those, a block per token.
func RouterTopK(dt string, weights, ids, logits, bias Ptr, T, E, topK int, softcap, scaling float32) (Launch, error) {
	const op = "RouterTopK"
	if err := checkDT(op, dt); err != nil {
		return Launch{}, err
	}
	if err := checkPos(op, "T", T, "E", E, "top_k", topK); err != nil {
		return Launch{}, err
	}
	if topK > E {
		return Launch{}, fmt.Errorf("%s: top_k = %d exceeds the %d experts", op, topK, E)
	}
	if !(softcap >= 0) {
		return Launch{}, fmt.Errorf("%s: softcap = %g must not be negative", op, softcap)
	}
	if err := checkPtrs(op, "weights", weights, "ids", ids, "logits", logits); err != nil {
		return Launch{}, err
	}
	args := []Arg{i32(T), i32(E), i32(topK), f32(softcap), f32(scaling), ptrArg(logits), i64(int64(E)), ptrArg(bias), ptrArg(weights), ptrArg(ids)}
	if T > RouterBlockMaxT && E <= RouterWarpMaxE && topK <= RouterWarpMaxK {
		per := 1 // experts per lane: a power of two
		for 32*per < E {
			per *= 2
		}
		w := min(T, routerWarps)
		return kernel("router.cu", "router_topk", []string{dt}, []int64{int64(per)}, dims(ceilDiv(T, w)), dims(32*w), 0, args...), nil
	}
	return kernel("router.cu", "router_topk_block", []string{dt}, nil, dims(T), dims(min(1024, 32*ceilDiv(E, 32))), routerSmem(E, topK), args...), nil
}

// RouterTopKBlock is RouterTopK's block kernel at any T, where RouterTopK
// would pick the warp kernel (the tests check both).
func RouterTopKBlock(dt string, weights, ids, logits, bias Ptr, T, E, topK int, softcap, scaling float32) (Launch, error) {
	l, err := RouterTopK(dt, weights, ids, logits, bias, min(T, RouterBlockMaxT), E, topK, softcap, scaling)
	if err != nil {
		return Launch{}, err
	}
	if l.Kernel != "router_topk_block" {
		return Launch{}, fmt.Errorf("RouterTopKBlock: RouterTopK chose %s", l.Kernel)
	}
	l.Grid, l.Args[0] = dims(T), i32(T)
	return l, nil
}

// routerSmem is the block selection's shared memory: a 64-bit key and a
// float score per expert, and the k chosen indices.
func routerSmem(E, topK int) int { return 12*E + 4*topK }

// The router's warp kernel holds up to 32 experts per lane and one choice
// per lane; a block takes up to routerWarps tokens (router.cu's launch
// bounds).
const (
	RouterWarpMaxE = 1024
	RouterWarpMaxK = 32
	routerWarps    = 4
	// RouterBlockMaxT: up to this many tokens (decode, batched decode) the
	// block kernel runs, measured faster there on an H200 (4.7 against 6.1
	// us for one token, graph replay). Both give the same bits.
	RouterBlockMaxT = 64
)

// ArgMax writes the index of the largest element of each row of x [T, V]
// to out i32 [T]: the first on ties, a NaN above every number. Each row is
// split into ArgMaxParts blocks (enough for the GPU's nsm SMs; 0: an
// H200's); with
// more than one, their best candidates go to the workspace ws
// (ArgMaxWorkspace bytes) and a second launch reduces them. The result does
// not depend on the split: the maximum of the keys is exact.
func ArgMax(dt string, out, x, ws Ptr, T, V, nsm int) ([]Launch, error) {
	return ArgMaxKeep(dt, out, x, ws, T, V, nsm, Ptr{}, Ptr{})
}

// ArgMaxKeep is ArgMax that also copies the row (T 1) to keep + 4*V*(pos[0]&1),
// where a decode step's logits stay for the host while the next step runs
// (BaseKept); null keep: ArgMax.
func ArgMaxKeep(dt string, out, x, ws Ptr, T, V, nsm int, keep, pos Ptr) ([]Launch, error) {
	const op = "ArgMax"
	if err := checkDT(op, dt); err != nil {
		return nil, err
	}
	if err := checkPos(op, "T", T, "V", V); err != nil {
		return nil, err
	}
	if err := checkPtrs(op, "out", out, "x", x); err != nil {
		return nil, err
	}
	if !keep.Null() && (T != 1 || pos.Null() || !keep.Aligned(4)) {
		return nil, fmt.Errorf("%s: keeping the row takes one row, a position and 4-byte alignment (%d rows, pos %s, keep %s)", op, T, pos, keep)
	}
	parts := ArgMaxParts(T, V, nsm)
	if parts == 1 {
		return []Launch{kernel("argmax.cu", "argmax", []string{dt}, nil, dims(T, 1), dims(argmaxThreads), 0,
			i32(T), i32(V), ptrArg(x), ptrArg(Ptr{}), ptrArg(out), ptrArg(keep), ptrArg(pos))}, nil
	}
	if ws.Null() {
		return nil, fmt.Errorf("%s: %d parts a row need a workspace of %d bytes", op, parts, ArgMaxWorkspace(T, V, nsm))
	}
	if !ws.Aligned(8) {
		return nil, fmt.Errorf("%s: workspace %s is not 8-byte aligned", op, ws)
	}
	w := min(T, 8) // rows (warps) a block of argmax_final
	return []Launch{
		kernel("argmax.cu", "argmax", []string{dt}, nil, dims(T, parts), dims(argmaxThreads), 0,
			i32(T), i32(V), ptrArg(x), ptrArg(ws), ptrArg(out), ptrArg(keep), ptrArg(pos)),
		kernel("argmax.cu", "argmax_final", nil, nil, dims(ceilDiv(T, w)), dims(32*w), 0,
			i32(T), i32(parts), ptrArg(ws), ptrArg(out)),
	}, nil
}

// argmax.cu's block (AM_THREADS) and the elements it reads in one pass
// (AM_CHUNK).
const (
	argmaxThreads = 256
	argmaxChunk   = 4 * argmaxThreads
)

// ArgMaxParts is how many blocks share a row of ArgMax: about two blocks
// per SM over all T rows, no more than the row has chunks (nor than a
// grid's second dimension allows).
func ArgMaxParts(T, V, nsm int) int {
	return max(1, min(ceilDiv(V, argmaxChunk), ceilDiv(2*sms(nsm), T), 65535))
}

// ArgMaxWorkspace is the workspace ArgMax needs: a 64-bit key per part of
// every row when a row has more than one part.
func ArgMaxWorkspace(T, V, nsm int) int64 {
	if parts := ArgMaxParts(T, V, nsm); parts > 1 {
		return 8 * int64(T) * int64(parts)
	}
	return 0
}

// CopyRows copies rows x cols elements: dst[r*ldo + c] = src[r*ldi + c],
// one piece of a split or concat along an inner axis.
func CopyRows(dt string, rows, cols int64, src Ptr, ldi int64, dst Ptr, ldo int64) Launch {
	g, b := grid1D(rows * cols)
	return kernel("copy.cu", "copy_rows", []string{dt}, nil, g, b, 0, i64(rows), i64(cols), ptrArg(src), i64(ldi), ptrArg(dst), i64(ldo))
}

// StepNext ends a decode step: its argmax (next) becomes the next step's
// token and the position advances, on the device; with out (BaseOut), the
// argmax and the bits of logits[next] (f32 [V]) also go to its slot there.
func StepNext(next, tokens, pos, logits Ptr, V int, out Ptr) Launch {
	return kernel("step.cu", "step_next", nil, nil, dims(1), dims(32), 0, ptrArg(next), ptrArg(tokens), ptrArg(pos),
		ptrArg(logits), i32(V), ptrArg(out))
}

// OutBytes is BaseOut's size: two slots of an argmax and a logit's bits.
const OutBytes = 16

// KeptBytes is BaseKept's size for a vocabulary of V: two rows of logits.
func KeptBytes(V int) int64 { return 8 * int64(V) }

// FillHash fills n elements at out with offset + scale*u, u uniform in
// [-1, 1) from a hash of (seed, index): synthetic weights made on the
// device.
func FillHash(dt string, n int64, seed uint32, offset, scale float32, out Ptr) Launch {
	g, b := grid1D(n)
	return kernel("fill.cu", "fill_hash", []string{dt}, nil, g, b, 0, i64(n), u32(seed), f32(offset), f32(scale), ptrArg(out))
}
