package lower

import "fmt"

// branchSharedDown (opt-in, decode only; docs/DECODE_MEGAKERNEL.md) takes
// the shared expert's down GEMV of a quantised MoE layer off the chain of
// launches: its GEMV reads only the shared activations (written before the
// routed gate+up) and its weights, so it can run on a second stream beside
// the routed gate+up and down, and only its store, the residual add and the
// next norm must wait for the routed down. Its invariant:
//
//	the stream's launches G, D, X, one after the other, a
//	moe_gateup_qgemv_trig, a moe_down_qgemv_pre and a qgemv_xin_norm_pre of
//	one row accumulating into its y, where G's and D's outputs lie apart
//	from X's xin, become: fork, X's GEMV as a qgemv_xin into an f32 buffer
//	(the side stream), G, D, join, qgemv_join_norm (X's store and tail).
//
// The fork comes right after the launch before G, so the side GEMV reads
// what X read (written before G; G and D do not write it); it writes only
// the buffer, past the schedule's workspace, which only the join's launch
// reads. Its sums are X's (the same qgemv_rows shape, K split and
// quantisation of xin), kept in f32, and qgemv_join_norm adds y to them as
// X's accumulating store did and runs X's tail: the same bits. Every
// layer's branch uses the one buffer: a layer's fork follows the previous
// layer's join launch on the main stream, so its side GEMV starts after
// that launch has read the buffer.
//
// branchSharedDownTail (opt-in) is the same branch joined before the routed
// down, whose last block then does the join launch's work
// (BranchSharedDownTail): one launch a layer fewer on the chain.
//
// sharedDownBlocks (opt-in) needs no branch: X's GEMV runs as extra blocks
// of the routed down's launch (SharedDownBlocks), which start before G
// completes, and its last block does the join's work; sharedDownBlocksLast
// puts those blocks after the routed down's.
const (
	branchFusion           = "branchSharedDown"
	branchTailFusion       = "branchSharedDownTail"
	sharedBlocksFusion     = "sharedDownBlocks"
	sharedBlocksLastFusion = "sharedDownBlocksLast"
)

// The forms of branchSharedDown.
const (
	branchJoinLaunch = iota // branchSharedDown
	branchJoinTail          // branchSharedDownTail
	branchNone              // sharedDownBlocks
	branchNoneLast          // sharedDownBlocksLast
)

// BranchSharedDown returns the launches g, d, x become on a branch with
// its f32 sums at buf (x's row of N values in f32): fork and the side GEMV (to go right
// after the launch before g), and join and the join launch (in x's place);
// or an error saying why they may not.
func BranchSharedDown(g, d, x Launch, buf Ptr) (fork, side, join, tail Launch, err error) {
	if side, err = branchSide("BranchSharedDown", g, d, x, buf); err != nil {
		return Launch{}, Launch{}, Launch{}, Launch{}, err
	}
	R, N := x.Ints[1], x.Args[0].Int
	tail = kernel("quant.cu", "qgemv_join_norm", []string{x.DTypes[0], x.DTypes[2]}, []int64{x.Ints[5]}, dims(1), dims(256), 0,
		append([]Arg{i32(int(R * N)), ptrArg(buf), x.Args[6]}, x.Args[9:]...)...)
	return Launch{Kernel: Fork}, side, Launch{Kernel: Join}, tail, nil
}

// BranchSharedDownTail is BranchSharedDown with the join before d and
// x's store and tail in d's last block (moe_down_qgemv_pre_join, counting
// its blocks on x's counter), one launch fewer: fork and side go after the
// launch before g, join and down in d's place, x goes. One token, and d's
// output is x's y.
func BranchSharedDownTail(g, d, x Launch, buf Ptr) (fork, side, join, down Launch, err error) {
	const op = "BranchSharedDownTail"
	if side, err = branchSide(op, g, d, x, buf); err != nil {
		return Launch{}, Launch{}, Launch{}, Launch{}, err
	}
	if err = joinInDown(op, d, x); err != nil {
		return Launch{}, Launch{}, Launch{}, Launch{}, err
	}
	down = kernel("quant.cu", "moe_down_qgemv_pre_join", []string{d.DTypes[0], x.DTypes[2]}, []int64{d.Ints[0], d.Ints[1], d.Ints[2], d.Ints[3], x.Ints[5]},
		d.Grid, d.Block, d.Shmem, append(append(append([]Arg(nil), d.Args...), x.Args[8], ptrArg(buf)), x.Args[9:]...)...)
	return Launch{Kernel: Fork}, side, Launch{Kernel: Join}, down, nil
}

// joinInDown checks that d's last block may do x's store and tail (the
// forms that join in the routed down, BranchSharedDownTail and
// SharedDownBlocks): one token, d's output x's y, not accumulating, the
// register path.
func joinInDown(op string, d, x Launch) error {
	if T, H := downTokens(d); T != 1 || H != x.Args[0].Int || d.Args[11] != x.Args[6] || d.Args[12].Int != 0 || d.Ints[4] != 0 {
		return fmt.Errorf("%s: %s is not one token's routed down writing %s's y", op, d.NameExpr(), x.NameExpr())
	}
	return nil
}

// sharedDownRows: the rows a warp of SharedDownBlocks' shared blocks
// computes (rows a warp change no row's sums).
const sharedDownRows = 8

// SharedDownBlocks returns the launch d and x become when x's GEMV runs as
// extra blocks of d (moe_down_qgemv_pre_shared), its f32 sums at buf and
// x's store and tail in the launch's last block: one launch for two, and
// no branch. The shared blocks come first (fewer and shorter than the
// routed ones, resident while the routed gate+up runs), or with last
// after the routed ones (which then keep the slots for their early
// work). The checks are BranchSharedDownTail's (branchSide, joinInDown),
// and x's K split must fit d's warps.
func SharedDownBlocks(g, d, x Launch, buf Ptr, last bool) (Launch, error) {
	const op = "SharedDownBlocks"
	side, err := branchSide(op, g, d, x, buf)
	if err != nil {
		return Launch{}, err
	}
	if err := joinInDown(op, d, x); err != nil {
		return Launch{}, err
	}
	warps := int64(d.Block[0] / 32)
	split := x.Ints[4]
	if split <= 0 || warps%split != 0 || d.Block[1] != 1 || d.Block[2] != 1 {
		return Launch{}, fmt.Errorf("%s: %s's K split %d does not fit %s's %d warps", op, x.NameExpr(), split, d.NameExpr(), warps)
	}
	N := x.Args[0].Int
	per := warps / split * sharedDownRows // rows a shared block
	sb := (N + per - 1) / per
	shmem := max(d.Shmem, side.Shmem)
	args := append(append([]Arg(nil), d.Args...), i32(int(sb)))
	args = append(append(args, x.Args[:6]...), ptrArg(buf))
	args = append(args, x.Args[8:]...)
	return kernel("quant.cu", "moe_down_qgemv_pre_shared", []string{d.DTypes[0], x.DTypes[1], x.DTypes[2]},
		[]int64{d.Ints[0], d.Ints[1], d.Ints[2], d.Ints[3], d.Ints[5], int64(b2i(!last)), x.Ints[0], sharedDownRows, split, x.Ints[5]},
		dims(d.Grid[0]+int(sb)), d.Block, shmem, args...), nil
}

// branchSide checks g, d and x for either form and returns the side GEMV.
func branchSide(op string, g, d, x Launch, buf Ptr) (Launch, error) {
	fail := func(f string, a ...any) (Launch, error) {
		return Launch{}, fmt.Errorf("%s: "+f, append([]any{op}, a...)...)
	}
	if g.Kernel != "moe_gateup_qgemv_trig" || !isGateUp(g) {
		return fail("%s is not a moe_gateup_qgemv_trig launch", g.NameExpr())
	}
	if d.Kernel != "moe_down_qgemv_pre" || d.File != "quant.cu" || len(d.DTypes) != 1 || len(d.Ints) != 6 ||
		!ArgKinds(d.Args, ArgI32, ArgI32, ArgI32, ArgI32, ArgI64, ArgI64, ArgPtr, ArgPtr, ArgPtr, ArgPtr, ArgPtr, ArgPtr, ArgI32) {
		return fail("%s is not a moe_down_qgemv_pre launch", d.NameExpr())
	}
	if x.Kernel != "qgemv_xin_norm_pre" || x.File != "quant.cu" || len(x.DTypes) != 3 || len(x.Ints) != 6 ||
		!ArgKinds(x.Args, ArgI32, ArgI32, ArgI64, ArgI64, ArgPtr, ArgPtr, ArgPtr, ArgI32, ArgPtr, ArgI32, ArgI32, ArgF32,
			ArgPtr, ArgPtr, ArgPtr, ArgPtr, ArgPtr, ArgPtr, ArgPtr, ArgPtr) {
		return fail("%s is not a qgemv_xin_norm_pre launch", x.NameExpr())
	}
	R, N, K := x.Ints[1], x.Args[0].Int, x.Args[1].Int
	if R != 1 || x.Ints[2] != 0 || x.Args[7].Int != 1 || N <= 0 || K <= 0 {
		return fail("%s: %d rows, SwiGLU %d, accumulate %d (one row accumulating, no SwiGLU)", x.NameExpr(), R, x.Ints[2], x.Args[7].Int)
	}
	if buf.Null() {
		return fail("no buffer for the side GEMV's sums")
	}
	// What G and D write (DownPre's and XInPre's reading of their
	// arguments) must lie apart from the side GEMV's input and output.
	T, H := downTokens(d)
	if T <= 0 {
		return fail("routed down of %d rows in %d blocks", H, d.Grid[0])
	}
	routes, outs := gateUpOutputs(g)
	xin := span{x.Args[5].Ptr(), R * K * int64(dtypeSize(x.DTypes[1]))}
	for _, o := range append(outs, span{d.Args[11].Ptr(), T * H * int64(dtypeSize(d.DTypes[0]))}) {
		if routes <= 0 || overlaps(o.at, o.n, xin.at, xin.n) || overlaps(o.at, o.n, buf, 4*R*N) {
			return fail("%s or %s writes what the side GEMV reads or writes (or the sizes do not read back)", g.NameExpr(), d.NameExpr())
		}
	}
	return Launch{Kernel: "qgemv_xin", File: "quant.cu", DTypes: []string{"f32", x.DTypes[1]}, Ints: append([]int64(nil), x.Ints[:5]...),
		Grid: x.Grid, Block: x.Block, Shmem: x.Shmem, Stream: 1,
		Args: append(append([]Arg(nil), x.Args[:6]...), ptrArg(buf), i32(0))}, nil
}

// branchSharedDown applies BranchSharedDown (BranchSharedDownTail or
// SharedDownBlocks, by form) to each such run of the stream, its side GEMVs'
// sums at ws (the end of the schedule's workspace), and returns the
// workspace bytes it adds (0: none applied).
func branchSharedDown(steps [][]Launch, ws int64, form int) int64 {
	where := streamOrder(steps)
	buf := Ptr{BaseWorkspace, ws}
	var need int64
	// edits: at a stream position, the launches that replace it.
	edits := map[streamPos][]Launch{}
	for k := 1; k+2 < len(where); k++ {
		r, g, d, x := where[k-1], where[k], where[k+1], where[k+2]
		at := func(p streamPos) Launch { return steps[p.step][p.i] }
		switch form {
		case branchNone, branchNoneLast:
			down, err := SharedDownBlocks(at(g), at(d), at(x), buf, form == branchNoneLast)
			if err != nil {
				continue
			}
			edits[d] = []Launch{down}
			edits[x] = []Launch{}
		case branchJoinTail:
			fork, side, join, down, err := BranchSharedDownTail(at(g), at(d), at(x), buf)
			if err != nil {
				continue
			}
			edits[r] = []Launch{at(r), fork, side}
			edits[d] = []Launch{join, down}
			edits[x] = []Launch{}
		default:
			fork, side, join, last, err := BranchSharedDown(at(g), at(d), at(x), buf)
			if err != nil {
				continue
			}
			edits[r] = []Launch{at(r), fork, side}
			edits[x] = []Launch{join, last}
		}
		need = max(need, 4*at(x).Ints[1]*at(x).Args[0].Int)
		k += 2
	}
	if len(edits) == 0 {
		return 0
	}
	for i, ls := range steps {
		var out []Launch
		for j, l := range ls {
			if e, ok := edits[streamPos{i, j}]; ok {
				out = append(out, e...)
			} else {
				out = append(out, l)
			}
		}
		steps[i] = out
	}
	return align(need)
}
