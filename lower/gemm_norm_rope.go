package lower

import "fmt"

// A prefill attention layer's q, k, v and gate come from one split GEMM
// (gemm_wgmma, SPLIT), and its q and k heads are then normalised and
// rotated by qk_norm_rope launches (norm_rope steps). fusePrefillGEMMNormRoPE
// lets the GEMM do that as it stores them (gemm_wgmma_nr, wg_norm_rope in
// cuda/kernels/gemm_hopper.cu): neither the k heads' launch nor the q
// heads' work in the attention's prologue (which fusePrefillNormRoPEAttention
// would otherwise take) remains. Its invariant:
//
//	the qk_norm_rope launches N of one or two norm_rope steps right after
//	a matmul_split step whose last launch is a plain split gemm_wgmma G
//	(bf16, EPI 0) are dropped and G becomes
//	GEMMNormRoPE(G, N..., D..., ropeCSAt(G)): rope_cs_table writing the
//	rows' cosines and sines into the workspace after what G reads there
//	(the step reserves them: matmulSplitScratch; they overlap none of G's
//	or the Ns' rows), then gemm_wgmma_nr,
//	only when each N normalises and rotates exactly one of G's first two
//	segments (all its heads of 128, rows as G writes them) and the Ns
//	agree on positions, rotation and eps. A segment goes to D: N's
//	output, where that overlaps neither G's input rows, another segment's
//	output nor the other N's rows; else (the memory plan may put N's
//	output over G's input, dead after G) the segment's own rows, when the
//	attention launch A opening the step after the Ns reads N's output as
//	its q rows, and A's q becomes those rows (A writes its output over
//	them or apart, as PrefillNormRoPEAttention requires). No step but N's
//	reads the segment's unrotated rows, and with D the segment's rows no
//	step but A's reads N's output, before a step writes them again.
//
// G then writes each such segment, normalised and rotated, at D, and
// nothing where it was that a step reads. The launches between G and an N
// are the other N, whose rows are apart from D, so moving N's writes into
// G changes nothing they see.

// GEMMNormRoPE returns the split GEMM g normalising and rotating the
// segments the qk_norm_rope launches ns (one or two) read, segment of
// ns[k] written at dst[k] (ns[k]'s output, or the segment's own rows), as
// gemm_wgmma_nr, and the rope_cs_table launch before it that writes the
// rows' cosines and sines to tab (RoPECSBytes); or an error saying why it
// may not.
func GEMMNormRoPE(g Launch, ns []Launch, dst []Ptr, tab Ptr) (table, gemm Launch, err error) {
	const op = "GEMMNormRoPE"
	if g.Kernel != "gemm_wgmma" || g.File != "gemm_hopper.cu" || len(g.DTypes) != 1 || len(g.Ints) != 5 || len(g.Args) != 16 ||
		!ArgKinds(g.Args, ArgTMap, ArgTMap, ArgI32, ArgI32, ArgI32, ArgPtr, ArgI32, ArgPtr, ArgPtr, ArgI32, ArgPtr, ArgPtr, ArgPtr,
			ArgI32, ArgI32, ArgI32) {
		return Launch{}, Launch{}, fmt.Errorf("%s: %s is not a gemm_wgmma launch as HopperGEMM builds it", op, g.NameExpr())
	}
	bn, epi, grouped, pp, split := g.Ints[0], g.Ints[1], g.Ints[2], g.Ints[3], g.Ints[4]
	if g.DTypes[0] != "bf16" || epi != EpiStore || grouped != 0 || split != 1 || bn%128 != 0 {
		return Launch{}, Launch{}, fmt.Errorf("%s: %s is not a plain split GEMM into bf16 with tiles of whole 128-column heads", op, g.NameExpr())
	}
	if len(ns) < 1 || len(ns) > 2 || len(dst) != len(ns) {
		return Launch{}, Launch{}, fmt.Errorf("%s: %d qk_norm_rope launches (one or two) and %d destinations", op, len(ns), len(dst))
	}
	M, N := g.Args[2].Int, g.Args[3].Int
	// Segment s: columns [cs[s], cs[s+1]) into ys[s].
	cs := []int64{0, g.Args[13].Int, g.Args[14].Int, g.Args[15].Int, N}
	ys := []Ptr{g.Args[5].Ptr(), g.Args[10].Ptr(), g.Args[11].Ptr(), g.Args[12].Ptr()}
	out := g
	out.Args = append([]Arg(nil), g.Args...)
	var w [2]Arg
	w[0], w[1] = ptrArg(Ptr{}), ptrArg(Ptr{})
	taken := [2]bool{}
	var rot int64
	var first Launch
	var outs []span
	for k, n := range ns {
		if !isQKNormRoPE(n) {
			return Launch{}, Launch{}, fmt.Errorf("%s: %s is not a qk_norm_rope launch", op, n.NameExpr())
		}
		a := n.Args
		T, nh1, nh2, d, ldx, ldo := a[0].Int, a[1].Int, a[2].Int, a[3].Int, a[4].Int, a[5].Int
		x, o := a[6].Ptr(), a[7].Ptr()
		s := -1
		for i := 0; i < 2; i++ {
			if ys[i] == x && cs[i+1] > cs[i] {
				s = i
			}
		}
		switch {
		case n.DTypes[0] != "bf16":
			return Launch{}, Launch{}, fmt.Errorf("%s: %s elements (the GEMM's are bf16)", op, n.DTypes[0])
		case s < 0:
			return Launch{}, Launch{}, fmt.Errorf("%s: qk_norm_rope reads %v, not the GEMM's first or second segment", op, x)
		case taken[s]:
			return Launch{}, Launch{}, fmt.Errorf("%s: two qk_norm_rope launches of segment %d", op, s)
		case T != M || nh2 != 0 || d != 128 || nh1*d != cs[s+1]-cs[s] || ldx != nh1*d || ldo != nh1*d:
			return Launch{}, Launch{}, fmt.Errorf("%s: qk_norm_rope of %d tokens, %d+%d heads of %d, rows %d and %d apart, against segment %d's %d rows of %d columns",
				op, T, nh1, nh2, d, ldx, ldo, s, M, cs[s+1]-cs[s])
		case a[8].Ptr().Null() || !a[8].Ptr().Aligned(8):
			return Launch{}, Launch{}, fmt.Errorf("%s: qk_norm_rope without a norm weight, or one not 8-byte aligned (%v)", op, a[8].Ptr())
		case a[13].Int < 16 || a[13].Int > 128 || a[13].Int%16 != 0:
			return Launch{}, Launch{}, fmt.Errorf("%s: a rotary width of %d (gemm_wgmma_nr takes a multiple of 16 up to 128)", op, a[13].Int)
		case dst[k] != o && dst[k] != x:
			return Launch{}, Launch{}, fmt.Errorf("%s: segment %d to %v, neither qk_norm_rope's output %v nor its own rows", op, s, dst[k], o)
		}
		if k == 0 {
			first, rot = n, a[13].Int
		} else if f := first.Args; a[10] != f[10] || a[11] != f[11] || a[12] != f[12] || a[13] != f[13] || a[14] != f[14] {
			return Launch{}, Launch{}, fmt.Errorf("%s: the two qk_norm_rope launches differ in eps, positions or rotation", op)
		}
		taken[s] = true
		w[s] = a[8]
		out.Args[[]int{5, 10}[s]] = ptrArg(dst[k]) // y, y1
		outs = append(outs, rowsRange(dst[k], M, ldo, ldo, 2), rowsRange(x, M, ldx, ldx, 2))
	}
	// G's input rows, and where it writes the segments it keeps.
	xm := g.Args[0].Map
	if xm == nil || xm.Rows <= 0 || xm.Cols <= 0 {
		return Launch{}, Launch{}, fmt.Errorf("%s: %s has no x map", op, g.NameExpr())
	}
	keep := []span{rowsRange(g.Args[0].Ptr(), xm.Rows, xm.LD, xm.Cols, 2)}
	for s := 0; s < 4; s++ {
		if cs[s+1] > cs[s] && (s > 1 || !taken[s]) {
			keep = append(keep, rowsRange(ys[s], M, cs[s+1]-cs[s], cs[s+1]-cs[s], 2))
		}
	}
	for i := 0; i < len(outs); i += 2 {
		if dst[i/2] == ns[i/2].Args[6].Ptr() {
			continue // the segment's own rows
		}
		for _, r := range keep {
			if outs[i].overlaps(r) {
				return Launch{}, Launch{}, fmt.Errorf("%s: a rotated segment's rows overlap the GEMM's input or another segment's output", op)
			}
		}
		for j := 0; j < len(outs); j++ {
			if j/2 != i/2 && outs[i].overlaps(outs[j]) {
				return Launch{}, Launch{}, fmt.Errorf("%s: one qk_norm_rope's output overlaps the other's rows", op)
			}
		}
	}
	if tab.Null() || !tab.Aligned(16) {
		return Launch{}, Launch{}, fmt.Errorf("%s: the rope table at %v", op, tab)
	}
	tr := bytesAt(tab, 4*M*rot)
	wm := g.Args[1].Map
	if wm == nil {
		return Launch{}, Launch{}, fmt.Errorf("%s: %s has no w map", op, g.NameExpr())
	}
	for _, r := range append(append(keep, rowsRange(g.Args[1].Ptr(), wm.Rows, wm.LD, wm.Cols, 2)), outs...) {
		if tr.overlaps(r) {
			return Launch{}, Launch{}, fmt.Errorf("%s: the rope table at %v overlaps the GEMM's or the norms' rows", op, tab)
		}
	}
	f := first.Args
	gr, bl := grid1D(M * rot / 2)
	table = kernel("rope.cu", "rope_cs_table", nil, nil, gr, bl, 0, i32(int(M)), f[11], f[12], i32(int(rot)), f[14], ptrArg(tab))
	out.Kernel = "gemm_wgmma_nr"
	out.Ints = []int64{bn, pp, rot}
	out.Args = append(out.Args, w[0], w[1], ptrArg(tab), f[10])
	return table, out, nil
}

// RoPECSBytes is the most rope_cs_table writes for t tokens: a rotary
// width of at most 128 floats a token (lower reserves it in the workspace
// of every prefill matmul_split step).
func RoPECSBytes(t int) int64 { return 4 * 128 * int64(t) }

// fusePrefillGEMMNormRoPE fuses the q and k heads' qk_norm_rope launches
// into the split GEMM before them where the invariant above holds.
func fusePrefillGEMMNormRoPE(meta []Step, steps [][]Launch) {
	if len(meta) != len(steps) {
		return
	}
	for i := range steps {
		if meta[i].Op != "matmul_split" || len(steps[i]) == 0 || steps[i][len(steps[i])-1].Kernel != "gemm_wgmma" {
			continue
		}
		g := steps[i][len(steps[i])-1]
		tab := ropeCSAt(g)
		// The norm_rope steps right after it, one qk_norm_rope each.
		var js []int
		for j := i + 1; j < len(steps) && j <= i+2 && meta[j].Op == "norm_rope" && len(steps[j]) == 1 &&
			steps[j][0].Kernel == "qk_norm_rope" && len(steps[j][0].Args) == 16; j++ {
			js = append(js, j)
		}
		a := i + len(js) + 1 // the attention's step
		var ns []Launch
		var dst []Ptr
		retarget := -1
		for _, j := range js {
			n := steps[j][0]
			T, x, o := n.Args[0].Int, n.Args[6].Ptr(), n.Args[7].Ptr()
			rows := rowsRange(x, T, n.Args[4].Int, n.Args[4].Int, 2)
			if !onlyReaderUntilWritten(meta, i+1, j, rows, int(T)) {
				continue
			}
			if _, _, err := GEMMNormRoPE(g, []Launch{n}, []Ptr{o}, tab); err == nil {
				ns, dst = append(ns, n), append(dst, o)
				continue
			}
			// In place, the attention reading the segment's rows instead.
			if a >= len(steps) || len(steps[a]) == 0 || retarget >= 0 || !attnReadsQ(steps[a][0], o, n.Args[5].Int, x) ||
				!onlyReaderUntilWritten(meta, j+1, a, rowsRange(o, T, n.Args[5].Int, n.Args[5].Int, 2), int(T)) {
				continue
			}
			ns, dst, retarget = append(ns, n), append(dst, x), len(ns)
		}
		if len(ns) == 0 {
			continue
		}
		tl, f, err := GEMMNormRoPE(g, ns, dst, tab)
		if err != nil {
			continue
		}
		steps[i] = append(steps[i][:len(steps[i])-1:len(steps[i])-1], tl, f)
		if retarget >= 0 {
			at := steps[a][0]
			at.Args = append([]Arg(nil), at.Args...)
			at.Args[7] = ptrArg(dst[retarget])
			steps[a][0] = at
		}
		for _, j := range js {
			for _, n := range ns {
				if len(steps[j]) == 1 && steps[j][0].Args[6] == n.Args[6] {
					steps[j] = nil
				}
			}
		}
	}
}

// attnReadsQ says whether attention launch a (attn_prefill_wg as
// AttentionPrefill builds it, its q heads not yet fused) reads its q rows
// at q, ld apart, and writes its output either apart from the rows at x
// or over exactly them (each CTA writes only the rows its Q tile read,
// after reading them).
func attnReadsQ(a Launch, q Ptr, ld int64, x Ptr) bool {
	if a.Kernel != "attn_prefill_wg" || a.File != "attention_prefill_wg.cu" || len(a.Ints) != 4 || a.Ints[3] != 0 || len(a.Args) != 24 ||
		!ArgKinds(a.Args[:16], ArgI32, ArgI32, ArgI32, ArgI32, ArgI32, ArgF32, ArgPtr, ArgPtr, ArgI64, ArgPtr, ArgPtr, ArgI64, ArgPtr, ArgPtr, ArgPtr, ArgI64) {
		return false
	}
	T, w := a.Args[0].Int, a.Args[1].Int*a.Ints[0]
	if a.Args[7].Ptr() != q || a.Args[8].Int != ld || ld != w {
		return false
	}
	out, ldo := a.Args[14].Ptr(), a.Args[15].Int
	return !rowsRange(out, T, ldo, w, 2).overlaps(rowsRange(x, T, ld, w, 2)) || (out == x && ldo == ld)
}

// onlyReaderUntilWritten says whether, of steps from..end of meta, step
// j is the only one whose activation inputs overlap r before a step
// writes over r (that step's own inputs are read before it writes).
func onlyReaderUntilWritten(meta []Step, from, j int, r span, T int) bool {
	for s := from; s < len(meta); s++ {
		writes := false
		for _, o := range meta[s].In {
			if s != j && operandRange(o, T).overlaps(r) {
				return false
			}
		}
		for _, o := range meta[s].Out {
			writes = writes || operandRange(o, T).overlaps(r)
		}
		if writes && s != j {
			return true
		}
	}
	return true
}

// operandRange is the arena bytes of activation o at T tokens, or an
// empty range.
func operandRange(o Operand, T int) span {
	if o.Kind != "activation" || o.Weight >= 0 {
		return span{}
	}
	return span{Ptr{BaseArena, o.Offset}, int64(o.Elems(T) * dtypeSize(o.DType))}
}

// ropeCSAt is where the split GEMM g's rope table goes: in the workspace
// after what g reads there (a weight the step dequantised into it), where
// matmulSplitScratch reserves it; null where g has a pointer into the
// workspace of no known extent.
func ropeCSAt(g Launch) Ptr {
	var end int64
	for _, a := range g.Args {
		switch {
		case a.Base != BaseWorkspace:
		case a.Kind == ArgTMap && a.Map != nil:
			es := int64(2)
			if a.Map.Elem == "u8" {
				es = 1
			}
			end = max(end, a.Offset+es*a.Map.Rows*a.Map.LD)
		default:
			return Ptr{}
		}
	}
	return Ptr{BaseWorkspace, align(end)}
}
