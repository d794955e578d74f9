package lower

import "fmt"

// In a quantised decode MoE layer the shared expert's down GEMV (with the
// residual add and the next norm: qgemv_xin_norm) follows the routed
// experts' down (moe_down_qgemv), which it waits for although its GEMV
// reads only the shared activations of the launch two before (the router
// with the shared gate+up) and its weights: only its store (it
// accumulates into the routed sum) and the norm need the routed down.
// fuseXInPre (a launch fusion; decode 1.1% faster on the H200, 4.6% with
// fuseDownPre: docs/PERF.md) lets it compute the GEMV before its
// griddepcontrol.wait and the routed down let it start once every block of
// that has passed its own wait (XInPre).
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
	// P's output: T tokens of H values.
	T, H := downTokens(p)
	if T <= 0 {
		return Launch{}, Launch{}, fmt.Errorf("%s: moe_down_qgemv of %d rows, %d a warp, %d warps, %d blocks", op, H, p.Ints[1], p.Ints[3], p.Grid[0])
	}
	out, outN := p.Args[11].Ptr(), T*H*int64(dtypeSize(p.DTypes[0]))
	K, R := g.Args[1].Int, g.Ints[1]
	xin, xinN := g.Args[5].Ptr(), R*K*int64(dtypeSize(g.DTypes[1]))
	if T <= 0 || outN <= 0 || xinN <= 0 || overlaps(out, outN, xin, xinN) || out.Base == g.Args[4].Ptr().Base {
		return Launch{}, Launch{}, fmt.Errorf("%s: %s's GEMV reads what %s writes (or the sizes do not read back)", op, g.NameExpr(), p.NameExpr())
	}
	p.Kernel, g.Kernel = "moe_down_qgemv_trig", "qgemv_xin_norm_pre"
	return p, g, nil
}

// downTokens is what a moe_down_qgemv launch d covers: T tokens of H
// rows, T its blocks over the blocks a token (W warps of NH rows each); T
// is 0 where its shape does not read back.
func downTokens(d Launch) (T, H int64) {
	H, nh, w := d.Args[1].Int, d.Ints[1], d.Ints[3]
	if H <= 0 || nh <= 0 || w <= 0 {
		return 0, H
	}
	return int64(d.Grid[0]) / ((H + nh*w - 1) / (nh * w)), H
}

// fuseXInPre applies XInPre to each such pair of the stream, in place.
func fuseXInPre(steps [][]Launch) { renamePairs(steps, XInPre) }

// renamePairs walks steps' launches in stream order, across steps, and
// where f accepts a launch and the one after it puts what it returns in
// their places (both stay: unlike fusePairs, nothing is dropped), going on
// after the second.
func renamePairs(steps [][]Launch, f func(a, b Launch) (Launch, Launch, error)) {
	where := streamOrder(steps)
	for k := 0; k+1 < len(where); k++ {
		a, b := where[k], where[k+1]
		x, y, err := f(steps[a.step][a.i], steps[b.step][b.i])
		if err != nil {
			continue
		}
		steps[a.step][a.i], steps[b.step][b.i] = x, y
		k++
	}
}

// The routed experts' down (moe_down_qgemv) waits for their gate+up
// (moe_gateup_qgemv) before it reads anything, though only its
// activations come from there: its route ids and weights are the
// router's, two launches before, and its weights never change. fuseDownPre
// (a launch fusion, after fuseXInPre) lets it read those, stage
// its rows' shared bytes and ask for its first round of weights before its
// wait, and the gate+up let it start once every block of that has passed
// its own wait (DownPre). Its invariant:
//
//	a moe_gateup_qgemv launch G right before a moe_down_qgemv launch D
//	(or moe_down_qgemv_trig, fuseXInPre's) of the register path (ALL 0)
//	become moe_gateup_qgemv_trig and moe_down_qgemv_pre (TRIG 1 where D
//	was _trig) with the same arguments, only when D's ids and routing
//	weights lie apart from G's outputs (aq, as).
//
// As for XInPre: what D reads before its wait was written by launches
// before G, complete once G has passed its own wait.

// DownPre returns the pair g, d as moe_gateup_qgemv_trig and
// moe_down_qgemv_pre, or an error saying why they may not be.
func DownPre(g, d Launch) (Launch, Launch, error) {
	const op = "DownPre"
	if g.Kernel != "moe_gateup_qgemv" || !isGateUp(g) {
		return Launch{}, Launch{}, fmt.Errorf("%s: %s is not a moe_gateup_qgemv launch", op, g.NameExpr())
	}
	trig := d.Kernel == "moe_down_qgemv_trig"
	if (d.Kernel != "moe_down_qgemv" && !trig) || !isDown(d) || len(d.Ints) != 5 {
		return Launch{}, Launch{}, fmt.Errorf("%s: %s is not a moe_down_qgemv launch", op, d.NameExpr())
	}
	if d.Ints[4] != 0 {
		return Launch{}, Launch{}, fmt.Errorf("%s: %s copies all its units at once (ALL): no early round to move", op, d.NameExpr())
	}
	R, outs := gateUpOutputs(g)
	k := d.Args[0].Int
	T, H := downTokens(d)
	if k <= 0 || T <= 0 {
		return Launch{}, Launch{}, fmt.Errorf("%s: moe_down_qgemv of %d routes, %d rows, %d blocks", op, k, H, d.Grid[0])
	}
	early := []span{{d.Args[8].Ptr(), 4 * T * k}, {d.Args[9].Ptr(), 4 * T * k}} // routing weights, ids
	for _, o := range outs {
		for _, e := range early {
			if R <= 0 || T <= 0 || overlaps(o.at, o.n, e.at, e.n) {
				return Launch{}, Launch{}, fmt.Errorf("%s: %s reads early what %s writes (or the sizes do not read back)", op, d.NameExpr(), g.NameExpr())
			}
		}
	}
	g.Kernel, d.Kernel = "moe_gateup_qgemv_trig", "moe_down_qgemv_pre"
	d.Ints = append(append([]int64(nil), d.Ints...), int64(b2i(trig)))
	return g, d, nil
}

// fuseDownPre applies DownPre to each such pair of the stream, in place.
func fuseDownPre(steps [][]Launch) { renamePairs(steps, DownPre) }

// isGateUp reports whether g's template ints and arguments are QMoE's
// gate+up launch's (moe_gateup_qgemv or its _trig form), of a positive
// multiple of 32 values a route.
func isGateUp(g Launch) bool {
	return g.File == "quant.cu" && len(g.Ints) == 4 && len(g.Args) == 15 &&
		ArgKinds(g.Args, ArgI32, ArgI32, ArgI32, ArgI32, ArgPtr, ArgPtr, ArgPtr, ArgPtr, ArgI64, ArgI64, ArgPtr, ArgI64, ArgI64,
			ArgPtr, ArgPtr) && g.Args[2].Int > 0 && g.Args[2].Int%32 == 0
}

// isDown reports whether d's template ints (at least five) and arguments
// are QMoE's down launch's (moe_down_qgemv or a form of it with the same
// arguments: _trig, _pre).
func isDown(d Launch) bool {
	return d.File == "quant.cu" && len(d.DTypes) == 1 && len(d.Ints) >= 5 &&
		ArgKinds(d.Args, ArgI32, ArgI32, ArgI32, ArgI32, ArgI64, ArgI64, ArgPtr, ArgPtr, ArgPtr, ArgPtr, ArgPtr, ArgPtr, ArgI32)
}

// gateUpOutputs is what a gate+up launch g (isGateUp) writes: R routes
// of I int8 values and their I/32 float4 scales, R its blocks over the
// blocks a route (32 values each).
func gateUpOutputs(g Launch) (R int64, outs []span) {
	I := g.Args[2].Int
	R = int64(g.Grid[0]) / (I / 32)
	return R, []span{{g.Args[13].Ptr(), R * I}, {g.Args[14].Ptr(), R * I / 32 * 16}}
}
