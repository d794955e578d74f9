package lower

import "fmt"

// A prefill (or batched) MoE layer with shared experts selects each token's
// routed experts (router_topk, the router_topk step), then the moe_grouped
// step's first launch, moe_add_shared, copies them into the routes buffer
// with the shared experts' routes (weight 1) appended. fuseTopKShared lets
// the selection write the extended routes itself (router_topk_shared), one
// launch fewer a layer. Its invariant:
//
//	a router_topk launch R ending its step and a moe_add_shared launch A of
//	the next step, with only memcpy launches before A in that step (the
//	residual's copy), become TopKShared(R, A) and A is dropped, only when A
//	reads exactly R's weights and ids (as many tokens and routes), at most
//	32 routes a token, the memcpys touch neither R's outputs nor A's, no
//	other launch of A's step takes a pointer to R's outputs, and no step
//	but A's reads R's output rows before a step writes them again.
//
// R' then writes what A wrote, with the same values (A copies R's weights
// and ids and appends the same constants), and R's own output rows, which
// it no longer writes, are read by nobody.

// TopKShared is the router_topk launch r writing the routes the
// moe_add_shared launch a makes of its output, as router_topk_shared.
func TopKShared(r, a Launch) (Launch, error) {
	const op = "TopKShared"
	if r.Kernel != "router_topk" || r.File != "router.cu" || len(r.DTypes) != 1 || len(r.Ints) != 1 || len(r.Args) != 10 ||
		!ArgKinds(r.Args, ArgI32, ArgI32, ArgI32, ArgF32, ArgF32, ArgPtr, ArgI64, ArgPtr, ArgPtr, ArgPtr) {
		return Launch{}, fmt.Errorf("%s: %s is not a router_topk launch as RouterTopK builds it", op, r.NameExpr())
	}
	if a.Kernel != "moe_add_shared" || a.File != "moe.cu" || len(a.Args) != 8 ||
		!ArgKinds(a.Args, ArgI32, ArgI32, ArgI32, ArgI32, ArgPtr, ArgPtr, ArgPtr, ArgPtr) {
		return Launch{}, fmt.Errorf("%s: %s is not a moe_add_shared launch as MoEAddShared builds it", op, a.NameExpr())
	}
	T, k, S, first := a.Args[0].Int, a.Args[1].Int, a.Args[2].Int, a.Args[3].Int
	switch {
	case T != r.Args[0].Int || k != r.Args[2].Int:
		return Launch{}, fmt.Errorf("%s: moe_add_shared of %d tokens' %d routes after router_topk's %d of %d", op, T, k, r.Args[0].Int, r.Args[2].Int)
	case a.Args[4] != r.Args[8] || a.Args[5] != r.Args[9]:
		return Launch{}, fmt.Errorf("%s: moe_add_shared reads %v and %v, router_topk writes %v and %v", op, a.Args[4], a.Args[5], r.Args[8], r.Args[9])
	case S < 1 || k+S > 32 || first < 0:
		return Launch{}, fmt.Errorf("%s: %d routed and %d shared routes a token from expert %d (a warp's lanes hold them: at most 32)", op, k, S, first)
	}
	in := []byteRange{rowsRange(r.Args[5].Ptr(), T, r.Args[6].Int, r.Args[1].Int, 4), bytesAt(r.Args[7].Ptr(), 4*r.Args[1].Int)}
	for _, e := range routeRanges(a.Args[6], a.Args[7], T*(k+S)) {
		for _, o := range in {
			if e.overlaps(o) {
				return Launch{}, fmt.Errorf("%s: the extended routes overlap the router's logits or bias", op)
			}
		}
	}
	f := r
	f.Kernel = "router_topk_shared"
	f.Args = append(append([]Arg(nil), r.Args[:8]...), a.Args[6], a.Args[7], i32(int(S)), i32(int(first)))
	return f, nil
}

// fuseTopKShared applies TopKShared where the invariant above holds.
func fuseTopKShared(meta []Step, steps [][]Launch) {
	if len(meta) != len(steps) {
		return
	}
	for i := 0; i+1 < len(steps); i++ {
		if len(steps[i]) == 0 || steps[i][len(steps[i])-1].Kernel != "router_topk" {
			continue
		}
		r := steps[i][len(steps[i])-1]
		j := i + 1
		m := 0
		for m < len(steps[j]) && steps[j][m].Kernel == Memcpy {
			m++
		}
		if m == len(steps[j]) || steps[j][m].Kernel != "moe_add_shared" {
			continue
		}
		a := steps[j][m]
		f, err := TopKShared(r, a)
		if err != nil {
			continue
		}
		T, k, S := a.Args[0].Int, a.Args[1].Int, a.Args[2].Int
		outs := routeRanges(r.Args[8], r.Args[9], T*k)
		ok := true
		for _, c := range steps[j][:m] {
			n := c.Args[2].Int
			for _, b := range append(outs, routeRanges(a.Args[6], a.Args[7], T*(k+S))...) {
				if bytesAt(c.Args[1].Ptr(), n).overlaps(b) || bytesAt(c.Args[0].Ptr(), n).overlaps(b) {
					ok = false
				}
			}
		}
		for _, l := range steps[j][m+1:] {
			for _, arg := range l.Args {
				if arg.Kind == ArgPtr && (arg.Ptr() == r.Args[8].Ptr() || arg.Ptr() == r.Args[9].Ptr()) {
					ok = false
				}
			}
		}
		for _, o := range outs {
			ok = ok && onlyReaderUntilWritten(meta, i+1, j, o, int(T))
		}
		if !ok {
			continue
		}
		steps[i][len(steps[i])-1] = f
		steps[j] = append(steps[j][:m:m], steps[j][m+1:]...)
	}
}

// routeRanges are the bytes of n routes' weights (f32) at w and ids (i32)
// at ids.
func routeRanges(w, ids Arg, n int64) []byteRange {
	return []byteRange{bytesAt(w.Ptr(), 4*n), bytesAt(ids.Ptr(), 4*n)}
}
