package lower

import "fmt"

// In a quantised decode MoE layer the shared expert's down GEMV (with the
// residual add and the next norm: qgemv_xin_norm) follows the routed
// experts' down (moe_down_qgemv), which it waits for although its GEMV
// reads only the shared activations of the launch two before (the router
// with the shared gate+up) and its weights: only its store (it
// accumulates into the routed sum) and the norm need the routed down.
// fuseXInPre (opt-in, Options.XInPre; NOT RUN ON A GPU yet) lets it
// compute the GEMV before its griddepcontrol.wait and the routed down let
// it start once every block of that has passed its own wait (XInPre).
// Its invariant:
//
//	a moe_down_qgemv launch P right before a qgemv_xin_norm launch G
//	(no launch between) become moe_down_qgemv_trig and
//	qgemv_xin_norm_pre with the same arguments, only when G's inputs to
//	its GEMV (w, and xin's R x K values) lie apart from P's output.
//
// What G reads before its wait is then written by launches before P only,
// which have completed when P passes its own wait (each launch waits for
// the one before it), and P lets G start only after that wait. G's loads,
// sums and stores are qgemv_xin_norm's in the same order (the same bits);
// P's work is unchanged.

// XInPre returns the pair p, g as moe_down_qgemv_trig and
// qgemv_xin_norm_pre, or an error saying why they may not be.
func XInPre(p, g Launch) (Launch, Launch, error) {
	const op = "XInPre"
	if p.Kernel != "moe_down_qgemv" || p.File != "quant.cu" || len(p.DTypes) != 1 || len(p.Ints) != 5 ||
		!ArgKinds(p.Args, ArgI32, ArgI32, ArgI32, ArgI32, ArgI64, ArgI64, ArgPtr, ArgPtr, ArgPtr, ArgPtr, ArgPtr, ArgPtr, ArgI32) {
		return Launch{}, Launch{}, fmt.Errorf("%s: %s is not a moe_down_qgemv launch", op, p.NameExpr())
	}
	if g.Kernel != "qgemv_xin_norm" || g.File != "quant.cu" || len(g.DTypes) != 3 || len(g.Ints) != 6 || len(g.Args) < 6 ||
		!ArgKinds(g.Args[:6], ArgI32, ArgI32, ArgI64, ArgI64, ArgPtr, ArgPtr) {
		return Launch{}, Launch{}, fmt.Errorf("%s: %s is not a qgemv_xin_norm launch", op, g.NameExpr())
	}
	// P's output: T tokens of H values, T its blocks over the blocks a
	// token (W warps of NH rows each).
	H, nh, w := p.Args[1].Int, p.Ints[1], p.Ints[3]
	if H <= 0 || nh <= 0 || w <= 0 {
		return Launch{}, Launch{}, fmt.Errorf("%s: moe_down_qgemv of %d rows, %d a warp, %d warps", op, H, nh, w)
	}
	per := (H + nh*w - 1) / (nh * w)
	T := int64(p.Grid[0]) / per
	out, outN := p.Args[11].Ptr(), T*H*int64(dtypeSize(p.DTypes[0]))
	K, R := g.Args[1].Int, g.Ints[1]
	xin, xinN := g.Args[5].Ptr(), R*K*int64(dtypeSize(g.DTypes[1]))
	if T <= 0 || outN <= 0 || xinN <= 0 || overlaps(out, outN, xin, xinN) || out.Base == g.Args[4].Ptr().Base {
		return Launch{}, Launch{}, fmt.Errorf("%s: %s's GEMV reads what %s writes (or the sizes do not read back)", op, g.NameExpr(), p.NameExpr())
	}
	p.Kernel, g.Kernel = "moe_down_qgemv_trig", "qgemv_xin_norm_pre"
	return p, g, nil
}

// fuseXInPre applies XInPre to each such pair of the stream, in place.
func fuseXInPre(steps [][]Launch) {
	type pos struct{ step, i int }
	var where []pos
	for i, ls := range steps {
		for j := range ls {
			where = append(where, pos{i, j})
		}
	}
	for k := 0; k+1 < len(where); k++ {
		a, b := where[k], where[k+1]
		p, g, err := XInPre(steps[a.step][a.i], steps[b.step][b.i])
		if err != nil {
			continue
		}
		steps[a.step][a.i], steps[b.step][b.i] = p, g
		k++
	}
}
