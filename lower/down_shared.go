package lower

import "fmt"

// After fuseXInPre and fuseDownPre a quantised decode MoE layer ends in
// two launches: the routed experts' down (moe_down_qgemv_pre) and the
// shared expert's down with the residual add and the next norm
// (qgemv_xin_norm_pre), whose GEMV already runs before its wait. The
// boundary between them still costs the chain a launch (about 8 us of a
// MoE layer's 80 on the H200, docs/PERF.md). fuseDownShared (a launch
// fusion, after fuseDownPre) makes them one launch, moe_down_shexp_norm:
// each block of the routed down also sums the shared GEMV's rows of its
// block (one warp a row, lane stride 32, as qgemv_xin_norm_pre with one
// row a warp and no split sums them) before its wait, stores shared +
// routed as the second launch stored it, and the last block runs the norm.
// Its invariant:
//
//	a moe_down_qgemv_pre launch D of one token (T = 1), TRIG 1 (fuseXInPre's
//	pair), right before a qgemv_xin_norm_pre launch G (no launch between)
//	of one activation row, no SwiGLU, one row a warp, no split, G's N =
//	D's H, G accumulating into D's output (y is D's out) and D's output
//	dtype G's, become one launch of D's geometry at D's place, G dropped,
//	only when G's GEMV inputs (w, xin) lie apart from D's output and its
//	shared memory fits.
//
// The shared GEMV's reads before the wait are XInPre's (written by
// launches before the one before D, complete once that one passed its
// own wait); each row's sum is wdots' in qgemv_rows' order and the store
// adds it to the routed sum rounded as D stored it: the same bits. The
// norm's last block sees every block's stores (last_block), as G's did.

// DownShared returns d and g (moe_down_qgemv_pre, qgemv_xin_norm_pre) as
// one moe_down_shexp_norm launch, or an error saying why they may not be.
func DownShared(d, g Launch) (Launch, error) {
	const op = "DownShared"
	if d.Kernel != "moe_down_qgemv_pre" || d.File != "quant.cu" || len(d.DTypes) != 1 || len(d.Ints) != 6 ||
		!ArgKinds(d.Args, ArgI32, ArgI32, ArgI32, ArgI32, ArgI64, ArgI64, ArgPtr, ArgPtr, ArgPtr, ArgPtr, ArgPtr, ArgPtr, ArgI32) {
		return Launch{}, fmt.Errorf("%s: %s is not a moe_down_qgemv_pre launch", op, d.NameExpr())
	}
	if g.Kernel != "qgemv_xin_norm_pre" || g.File != "quant.cu" || len(g.DTypes) != 3 || len(g.Ints) != 6 ||
		!ArgKinds(g.Args, ArgI32, ArgI32, ArgI64, ArgI64, ArgPtr, ArgPtr, ArgPtr, ArgI32,
			ArgPtr, ArgI32, ArgI32, ArgF32, ArgPtr, ArgPtr, ArgPtr, ArgPtr, ArgPtr, ArgPtr, ArgPtr, ArgPtr) {
		return Launch{}, fmt.Errorf("%s: %s is not a qgemv_xin_norm_pre launch", op, g.NameExpr())
	}
	H, nh, w := d.Args[1].Int, d.Ints[1], d.Ints[3]
	if H <= 0 || nh <= 0 || (w != 4 && w != 8) || d.Ints[4] != 0 || d.Ints[5] != 1 {
		return Launch{}, fmt.Errorf("%s: %s: %d rows, %d a warp, %d warps, ALL %d, TRIG %d (want ALL 0, TRIG 1)", op,
			d.NameExpr(), H, nh, w, d.Ints[4], d.Ints[5])
	}
	if per := (H + nh*w - 1) / (nh * w); int64(d.Grid[0]) != per || d.Grid[1] != 1 || d.Grid[2] != 1 || d.Block[0] != int(32*w) {
		return Launch{}, fmt.Errorf("%s: %s is not one token's launch (grid %v, %d blocks a token)", op, d.NameExpr(), d.Grid, per)
	}
	// G: QT, R, SWIGLU, NW, SPLIT, TAIL.
	if g.Ints[1] != 1 || g.Ints[2] != 0 || g.Ints[3] != 1 || g.Ints[4] != 1 {
		return Launch{}, fmt.Errorf("%s: %s is not one row without SwiGLU, a row a warp and no split", op, g.NameExpr())
	}
	N, K := g.Args[0].Int, g.Args[1].Int
	out, y := d.Args[11].Ptr(), g.Args[6].Ptr()
	if N != H || y != out || g.Args[7].Int != 1 || g.DTypes[0] != d.DTypes[0] {
		return Launch{}, fmt.Errorf("%s: %s does not add %d rows to %s's output (N %d, y %v, out %v)", op, g.NameExpr(), H, d.NameExpr(),
			N, y, out)
	}
	xin, w2 := g.Args[5].Ptr(), g.Args[4].Ptr()
	outN := H * int64(dtypeSize(d.DTypes[0]))
	xinN := K * int64(dtypeSize(g.DTypes[1]))
	if K <= 0 || K%32 != 0 || outN <= 0 || xinN <= 0 || overlaps(out, outN, xin, xinN) || out.Base == w2.Base {
		return Launch{}, fmt.Errorf("%s: %s's GEMV reads what %s writes (or the sizes do not read back)", op, g.NameExpr(), d.NameExpr())
	}
	xoff := align256(int64(d.Shmem))
	shmem := xoff + K*3/2
	if shmem > qmoeMaxShared {
		return Launch{}, fmt.Errorf("%s: %d bytes of shared memory (at most %d)", op, shmem, qmoeMaxShared)
	}
	args := append([]Arg(nil), d.Args...)
	args = append(args, i32(int(K)), g.Args[2], g.Args[3], g.Args[4], g.Args[5], i32(int(xoff)))
	args = append(args, g.Args[8:]...)
	return Launch{Kernel: "moe_down_shexp_norm", File: "quant.cu",
		DTypes: []string{d.DTypes[0], g.DTypes[1], g.DTypes[2]},
		Ints:   []int64{d.Ints[0], d.Ints[1], d.Ints[2], d.Ints[3], g.Ints[0], g.Ints[5]},
		Grid:   d.Grid, Block: d.Block, Shmem: int(shmem), Args: args}, nil
}

// fuseDownShared applies DownShared to each such pair of the stream, in
// place (at D's place, G dropped).
func fuseDownShared(steps [][]Launch) {
	fusePairs(steps, false, func(d, g Launch, _ []Launch) (Launch, bool) {
		f, err := DownShared(d, g)
		return f, err == nil
	})
}
