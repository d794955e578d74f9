package lower

import (
	"fmt"
	"slices"
)

// sharedDownGateUp (decode only; 2.6% faster decode at full depth on an
// H100, docs/PERF.md) moves
// a quantised MoE layer's shared-expert down GEMV into the routed gate+up's
// launch. qgemv_xin_norm_pre computes that GEMV before its wait so that it
// runs beside the routed down, but the routed down's blocks hold every SM's
// registers, so 12 of its 384 blocks find room (lagc plan --resources): the
// GEMV runs after the routed down, on the chain. The gate+up's launch (320
// blocks of three an SM at S-2.1's shapes) leaves a wave's room for it.
// Its invariant:
//
//	the stream's launches G, D, X, one after the other, a
//	moe_gateup_qgemv_trig of 8 warps, a moe_down_qgemv_pre and a
//	qgemv_xin_norm_pre of one row accumulating into its y, where G's and
//	D's outputs lie apart from X's xin and from the buffer, become: G
//	with X's GEMV as its first blocks (moe_gateup_qgemv_xin_trig, the sums
//	in f32 into the buffer), D, and qgemv_join_norm (X's store and tail,
//	one block).
//
// X's xin and weights are written before G (G and D do not write them), so
// G's blocks read what X read once G has passed its wait. The buffer lies
// past the schedule's workspace: only these launches touch it, and a
// layer's G comes after the previous layer's join in the stream, whose
// launches each wait for the one before. The sums are X's (qgemv_rows of
// the same K split: rows a warp change no row's sums; xin quantised as
// qgemv_xin_quant does), and the join adds y to them as X's accumulating
// store did and runs X's tail: the same bits.
const sharedDownGateUpFusion = "sharedDownGateUp"

// sharedDownGateUpRows: the rows a warp of the shared blocks computes, so
// that S-2.1's 3072 rows take 96 blocks beside the gate+up's 320.
const sharedDownGateUpRows = 4

// SharedDownGateUp returns the launches g, d, x become, the shared GEMV's
// sums at buf (x's row of N values in f32): g with x's GEMV as its first
// blocks, d as it is, and the join in x's place; or an error saying why
// they may not.
func SharedDownGateUp(g, d, x Launch, buf Ptr) (gx, join Launch, err error) {
	const op = "SharedDownGateUp"
	fail := func(f string, a ...any) (Launch, Launch, error) {
		return Launch{}, Launch{}, fmt.Errorf("%s: "+f, append([]any{op}, a...)...)
	}
	if g.Kernel != "moe_gateup_qgemv_trig" || !isGateUp(g) {
		return fail("%s is not a moe_gateup_qgemv_trig launch", g.NameExpr())
	}
	if g.Ints[2] != 8 || g.Block != dims(256) {
		return fail("%s has %d warps (the shared blocks take 8)", g.NameExpr(), g.Ints[2])
	}
	if d.Kernel != "moe_down_qgemv_pre" || !isDown(d) || len(d.Ints) != 6 {
		return fail("%s is not a moe_down_qgemv_pre launch", d.NameExpr())
	}
	if x.Kernel != "qgemv_xin_norm_pre" || x.File != "quant.cu" || len(x.DTypes) != 3 || len(x.Ints) != 6 ||
		!ArgKinds(x.Args, ArgI32, ArgI32, ArgI64, ArgI64, ArgPtr, ArgPtr, ArgPtr, ArgI32, ArgPtr, ArgI32, ArgI32, ArgF32,
			ArgPtr, ArgPtr, ArgPtr, ArgPtr, ArgPtr, ArgPtr, ArgPtr, ArgPtr) {
		return fail("%s is not a qgemv_xin_norm_pre launch", x.NameExpr())
	}
	R, N, K := x.Ints[1], x.Args[0].Int, x.Args[1].Int
	if R != 1 || x.Ints[2] != 0 || x.Ints[4] != 1 || x.Args[7].Int != 1 || N <= 0 || K <= 0 || x.Block != dims(256) {
		return fail("%s: %d rows, SwiGLU %d, K split %d, accumulate %d (one row accumulating, no SwiGLU, no split)",
			x.NameExpr(), R, x.Ints[2], x.Ints[4], x.Args[7].Int)
	}
	if buf.Null() {
		return fail("no buffer for the shared GEMV's sums")
	}
	T, H := downTokens(d)
	if T <= 0 {
		return fail("routed down of %d rows in %d blocks", H, d.Grid[0])
	}
	routes, outs := gateUpOutputs(g)
	xin := span{x.Args[5].Ptr(), K * int64(dtypeSize(x.DTypes[1]))}
	w := x.Args[4].Ptr()
	for _, o := range append(outs, span{d.Args[11].Ptr(), T * H * int64(dtypeSize(d.DTypes[0]))}) {
		if routes <= 0 || overlaps(o.at, o.n, xin.at, xin.n) || overlaps(o.at, o.n, buf, 4*N) || o.at.Base == w.Base {
			return fail("%s or %s writes what the shared GEMV reads or writes (or the sizes do not read back)", g.NameExpr(), d.NameExpr())
		}
	}
	per := 8 * int64(sharedDownGateUpRows) // rows a shared block
	sb := (N + per - 1) / per
	args := append(append([]Arg(nil), g.Args...), i32(int(sb)))
	args = append(append(args, x.Args[:6]...), ptrArg(buf))
	gx = kernel("quant.cu", "moe_gateup_qgemv_xin_trig", []string{x.DTypes[1]},
		[]int64{g.Ints[0], g.Ints[1], g.Ints[2], g.Ints[3], x.Ints[0], sharedDownGateUpRows},
		dims(g.Grid[0]+int(sb)), g.Block, max(g.Shmem, x.Shmem), args...)
	join = kernel("quant.cu", "qgemv_join_norm", []string{x.DTypes[0], x.DTypes[2]}, []int64{x.Ints[5]}, dims(1), dims(256), 0,
		append([]Arg{i32(int(N)), ptrArg(buf), x.Args[6]}, x.Args[9:]...)...)
	return gx, join, nil
}

// fuseSharedDownGateUp applies SharedDownGateUp to each such run of the
// stream, its sums at ws (the end of the schedule's workspace), and
// returns the workspace bytes it adds (0: none applied).
func fuseSharedDownGateUp(steps [][]Launch, ws int64) int64 {
	where := streamOrder(steps)
	buf := Ptr{BaseWorkspace, ws}
	at := func(p streamPos) *Launch { return &steps[p.step][p.i] }
	var need int64
	for k := 0; k+2 < len(where); k++ {
		g, d, x := at(where[k]), at(where[k+1]), at(where[k+2])
		gx, join, err := SharedDownGateUp(*g, *d, *x, buf)
		if err != nil {
			continue
		}
		need = max(need, 4*x.Args[0].Int)
		*g, *x = gx, join
		k += 2 // the next run starts after x: no window reads an edited launch
	}
	return align(need)
}

// lateFusionNames run on a one-token decode schedule's launches after its
// workspace is sized (sharedDownGateUp puts its buffer past it).
var lateFusionNames = []string{sharedDownGateUpFusion}

// lateFusions runs the late fusions the plan enables on a decode
// schedule's launches, sharedDownGateUp's buffer past ws (the workspace
// the steps need), and returns the bytes they add there.
func (p *Plan) lateFusions(launches [][]Launch, ws int64) int64 {
	if !p.fusionOn(sharedDownGateUpFusion) {
		return 0
	}
	return fuseSharedDownGateUp(launches, ws)
}

// fusionOn says whether the plan runs the launch fusion name.
func (p *Plan) fusionOn(name string) bool { return !slices.Contains(p.fusionsOff(), name) }
