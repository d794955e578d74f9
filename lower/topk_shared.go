package lower

import "fmt"

// A prefill (or batched) MoE layer with shared experts selects each token's
// routed experts (router_topk, the router_topk step), then the moe_grouped
// step's first launch, moe_add_shared, copies them into the routes buffer
// with the shared experts' routes (weight 1) appended. fuseTopKShared lets
// the selection write the extended routes itself (router_topk_shared), one
// launch fewer a layer. A decode layer whose shared expert runs among the
// routed ones (a bf16 model's, or stacks of one type: llama.cpp's
// mixtures) does the same after its router_fused (router_fused_shared): a
// one-block launch fewer on the step's chain. Its invariant:
//
//	a router_topk (or router_fused) launch R ending its step and a moe_add_shared launch A of
//	the next step that launches anything, with only memcpy launches before A in that step (the
//	residual's copy), become TopKShared(R, A) and A is dropped, only when A
//	reads exactly R's weights and ids (as many tokens and routes), at most
//	32 routes a token, the memcpys touch neither R's outputs nor A's, no
//	other launch of A's step takes a pointer to R's outputs, and no step
//	but A's reads R's output rows before a step writes them again.
//
// R' then writes what A wrote, with the same values (A copies R's weights
// and ids and appends the same constants), and R's own output rows, which
// it no longer writes, are read by nobody.

// topkRouter is what TopKShared reads of a selecting launch: its tokens,
// routes a token, the weights and ids it writes, what else it reads or
// writes (which the extended routes must not overlap), and where its
// arguments end before the routes (router_topk) or continue after them
// (router_fused: the counter).
type topkRouter struct {
	T, k        int64
	w, ids      Arg
	other       []span
	shared      string
	head, after []Arg
}

// readTopK reads r as RouterTopK builds a router_topk launch or
// RouterFused a router_fused one.
func readTopK(r Launch) (topkRouter, bool) {
	a := r.Args
	const i, f, p, x = ArgI32, ArgF32, ArgPtr, ArgI64
	switch {
	case r.Kernel == "router_topk" && r.File == "router.cu" && len(r.DTypes) == 1 && len(r.Ints) == 1 && ArgKinds(a, i, i, i, f, f, p, x, p, p, p):
		T, E := a[0].Int, a[1].Int
		return topkRouter{T: T, k: a[2].Int, w: a[8], ids: a[9], shared: "router_topk_shared", head: a[:8],
			other: []span{rowsRange(a[5].Ptr(), T, a[6].Int, E, 4), bytesAt(a[7].Ptr(), 4*E)}}, true
	case r.Kernel == "router_fused" && r.File == "router.cu" && len(r.DTypes) == 2 && len(r.Ints) == 2 &&
		ArgKinds(a, i, i, i, p, p, p, i, f, f, p, p, p, p):
		T, E, K, xs := r.Ints[0], a[0].Int, a[1].Int, int64(dtypeSize(r.DTypes[0]))
		return topkRouter{T: T, k: a[6].Int, w: a[10], ids: a[11], shared: "router_fused_shared", head: a[:10], after: a[12:],
			other: []span{rowsRange(a[5].Ptr(), T, E, E, 4), bytesAt(a[9].Ptr(), 4*E), bytesAt(a[12].Ptr(), 4),
				rowsRange(a[3].Ptr(), T, K, K, xs)}}, xs > 0
	}
	return topkRouter{}, false
}

// TopKShared is the router_topk (or router_fused) launch r writing the
// routes the moe_add_shared launch a makes of its output, as
// router_topk_shared (router_fused_shared).
func TopKShared(r, a Launch) (Launch, error) {
	const op = "TopKShared"
	rt, ok := readTopK(r)
	if !ok {
		return Launch{}, fmt.Errorf("%s: %s is not a router_topk or router_fused launch as RouterTopK and RouterFused build them", op, r.NameExpr())
	}
	if a.Kernel != "moe_add_shared" || a.File != "moe.cu" || len(a.Args) != 8 ||
		!ArgKinds(a.Args, ArgI32, ArgI32, ArgI32, ArgI32, ArgPtr, ArgPtr, ArgPtr, ArgPtr) {
		return Launch{}, fmt.Errorf("%s: %s is not a moe_add_shared launch as MoEAddShared builds it", op, a.NameExpr())
	}
	T, k, S, first := a.Args[0].Int, a.Args[1].Int, a.Args[2].Int, a.Args[3].Int
	switch {
	case T != rt.T || k != rt.k:
		return Launch{}, fmt.Errorf("%s: moe_add_shared of %d tokens' %d routes after %s's %d of %d", op, T, k, r.Kernel, rt.T, rt.k)
	case a.Args[4] != rt.w || a.Args[5] != rt.ids:
		return Launch{}, fmt.Errorf("%s: moe_add_shared reads %v and %v, %s writes %v and %v", op, a.Args[4], a.Args[5], r.Kernel, rt.w, rt.ids)
	case S < 1 || k+S > 32 || first < 0:
		return Launch{}, fmt.Errorf("%s: %d routed and %d shared routes a token from expert %d (a warp's lanes hold them: at most 32)", op, k, S, first)
	}
	for _, e := range routeRanges(a.Args[6], a.Args[7], T*(k+S)) {
		for _, o := range rt.other {
			if e.overlaps(o) {
				return Launch{}, fmt.Errorf("%s: the extended routes overlap the router's logits, bias or other operands (%s)", op, r.Kernel)
			}
		}
	}
	f := r
	f.Kernel = rt.shared
	f.Args = append(append(append(append([]Arg(nil), rt.head...), a.Args[6], a.Args[7]), rt.after...), i32(int(S)), i32(int(first)))
	return f, nil
}

// fuseTopKShared applies TopKShared where the invariant above holds.
func fuseTopKShared(meta []Step, steps [][]Launch) {
	if len(meta) != len(steps) {
		return
	}
	for i := 0; i+1 < len(steps); i++ {
		if len(steps[i]) == 0 {
			continue
		}
		r := steps[i][len(steps[i])-1]
		rt, ok := readTopK(r)
		if !ok {
			continue
		}
		// A's step: the next one launching anything (decode's selection
		// step launches nothing: router_fused does its work).
		j := i + 1
		for j+1 < len(steps) && len(steps[j]) == 0 {
			j++
		}
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
		outs := routeRanges(rt.w, rt.ids, T*k)
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
				if arg.Kind == ArgPtr && (arg.Ptr() == rt.w.Ptr() || arg.Ptr() == rt.ids.Ptr()) {
					ok = false
				}
			}
		}
		for _, o := range outs {
			ok = ok && onlyReaderUntilWritten(meta, j, j, o, int(T))
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
func routeRanges(w, ids Arg, n int64) []span {
	return []span{bytesAt(w.Ptr(), 4*n), bytesAt(ids.Ptr(), 4*n)}
}

// Selection is where a launch that selects experts writes their weights
// (f32, at W) and ids (i32, at IDs): T tokens' rows of Stride routes each,
// the first K of a row routed, the rest (Stride > K) the shared experts'
// routes TopKShared appended.
type Selection struct {
	W, IDs       Ptr
	T, K, Stride int64
}

// SelectionOf reads l as a router_topk, router_topk_block, router_fused,
// router_topk_shared, router_fused_shared or router_qgemv launch as
// RouterTopK, RouterFused, TopKShared and RouterQGEMV build them. A fused
// selection no longer writes its step's own outputs (the router_topk
// step's rows): whoever reads what a router chose (a census, a check) must
// ask here.
func SelectionOf(l Launch) (Selection, bool) {
	a := l.Args
	const i, f, p, x = ArgI32, ArgF32, ArgPtr, ArgI64
	if l.Kernel == "router_qgemv" && l.File == "router_qgemv.cu" && len(a) > 14 && len(l.DTypes) == 3 && len(l.Ints) > 2 {
		// RouterQGEMV: the block count, then router_fused's arguments.
		l = Launch{Kernel: "router_fused", File: "router.cu", DTypes: l.DTypes[:2], Ints: l.Ints[:2], Args: a[1:14]}
		a = l.Args
	}
	if l.File != "router.cu" {
		return Selection{}, false
	}
	switch {
	case l.Kernel == "router_topk_block" && ArgKinds(a, i, i, i, f, f, p, x, p, p, p):
		return Selection{W: a[8].Ptr(), IDs: a[9].Ptr(), T: a[0].Int, K: a[2].Int, Stride: a[2].Int}, true
	case l.Kernel == "router_topk_shared" && ArgKinds(a, i, i, i, f, f, p, x, p, p, p, i, i):
		return Selection{W: a[8].Ptr(), IDs: a[9].Ptr(), T: a[0].Int, K: a[2].Int, Stride: a[2].Int + a[10].Int}, true
	case l.Kernel == "router_fused_shared" && len(l.Ints) == 2 && ArgKinds(a, i, i, i, p, p, p, i, f, f, p, p, p, p, i, i):
		return Selection{W: a[10].Ptr(), IDs: a[11].Ptr(), T: l.Ints[0], K: a[6].Int, Stride: a[6].Int + a[13].Int}, true
	}
	if rt, ok := readTopK(l); ok {
		return Selection{W: rt.w.Ptr(), IDs: rt.ids.Ptr(), T: rt.T, K: rt.k, Stride: rt.k}, true
	}
	return Selection{}, false
}

// StepSelection is the selection that router_topk step i of steps (a
// schedule's launches at some T) stands for: its own last launch's or,
// where the step launches nothing, that of the last launch before it
// (RouterFused's, in the step before).
func StepSelection(steps [][]Launch, i int) (Selection, bool) {
	for j := i; j >= 0 && j < len(steps); j-- {
		if n := len(steps[j]); n > 0 {
			return SelectionOf(steps[j][n-1])
		}
	}
	return Selection{}, false
}
