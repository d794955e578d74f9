package lower

import "fmt"

// In a decode MoE layer the fused router (router_fused) is followed by the
// shared expert's gate+up GEMV (qgemv), which reads the norm's quantised
// copy of x, not the routes. The router's last block selects the experts
// alone on one SM for a few microseconds while the rest of the GPU waits;
// fuseRouterQGEMV runs the GEMV's blocks in the same launch instead
// (RouterQGEMV, router_qgemv.cu). Its invariant:
//
//	a qgemv launch Q right after a router_fused launch F is dropped, and F
//	becomes RouterQGEMV(F, Q), only when Q is as QGEMV builds it with 256
//	threads and no shared memory, and neither launch writes what the other
//	reads or writes (F: logits, weights, ids, its counter; Q: y).
//
// The fused kernel's first blocks are F's, the rest Q's, each running the
// code of the launch it replaces on the same block index: after the launch
// memory is what it was after F then Q.

// RouterQGEMV is the router_fused launch f and the quantised GEMV q, which
// neither reads nor writes what f writes, as one launch of
// router_qgemv.cu's router_qgemv.
func RouterQGEMV(f, q Launch) (Launch, error) {
	const op = "RouterQGEMV"
	fw, ok := routerOutputs(f) // logits, weights, ids, counter
	if f.Kernel != "router_fused" || f.File != "router.cu" || len(f.DTypes) != 2 || !ok {
		return Launch{}, fmt.Errorf("%s: %s is not a fused router launch", op, f.NameExpr())
	}
	a, ok := parseQGEMV(q)
	if !ok {
		return Launch{}, fmt.Errorf("%s: %s is not a quantised GEMV launch as QGEMV builds it", op, q.NameExpr())
	}
	if f.Block != dims(256) || q.Block != dims(256) || q.Shmem != 0 || f.Grid[1] != 1 || q.Grid[1] != 1 {
		return Launch{}, fmt.Errorf("%s: blocks of %v and %v threads, %d bytes of shared memory", op, f.Block, q.Block, q.Shmem)
	}
	fa := f.Args
	R, E, K := int64(f.Ints[0]), fa[0].Int, fa[1].Int
	ny := int64(a.T) * int64(a.N) * int64(dtypeSize(a.YType))
	fr := []span{{fa[3].Ptr(), R * K * int64(dtypeSize(f.DTypes[0]))}, {fa[9].Ptr(), 4 * E}} // x, bias
	qw := []span{{a.Y, ny}}
	if w, ok := clash(fw, []span{{a.XQ, Q8XBytes(a.T, a.K)}, {a.Y, ny}}); ok {
		return Launch{}, fmt.Errorf("%s: the router writes %v, which the GEMV uses", op, w.at)
	}
	if w, ok := clash(qw, fr); ok {
		return Launch{}, fmt.Errorf("%s: the GEMV writes %v, which the router reads", op, w.at)
	}
	args := append([]Arg{i32(f.Grid[0])}, fa...)
	args = append(args, q.Args...)
	return kernel("router_qgemv.cu", "router_qgemv", []string{f.DTypes[0], f.DTypes[1], q.DTypes[0]},
		append(append([]int64(nil), f.Ints...), q.Ints...), dims(f.Grid[0]+q.Grid[0]), dims(256), f.Shmem, args...), nil
}

// fuseRouterQGEMV fuses each fused router with the quantised GEMV right
// after it in a stream of launches, a list per step, in place, where
// RouterQGEMV takes them.
func fuseRouterQGEMV(steps [][]Launch) {
	fusePairs(steps, false, func(f, q Launch, _ []Launch) (Launch, bool) {
		if f.Kernel != "router_fused" || q.Kernel != "qgemv" {
			return Launch{}, false
		}
		l, err := RouterQGEMV(f, q)
		return l, err == nil
	})
}

// SplitRouterQGEMV is RouterQGEMV undone: the router_fused and qgemv
// launches a router_qgemv launch fused (tests and plan readers).
func SplitRouterQGEMV(l Launch) (f, q Launch, ok bool) {
	const fargs, qargs = 13, 9
	if l.Kernel != "router_qgemv" || l.File != "router_qgemv.cu" || len(l.DTypes) != 3 || len(l.Ints) != 7 ||
		len(l.Args) != 1+fargs+qargs || l.Args[0].Kind != ArgI32 {
		return Launch{}, Launch{}, false
	}
	rb := int(l.Args[0].Int)
	if rb < 1 || rb >= l.Grid[0] {
		return Launch{}, Launch{}, false
	}
	f = Launch{File: "router.cu", Kernel: "router_fused", DTypes: l.DTypes[:2], Ints: l.Ints[:2], Grid: dims(rb), Block: l.Block,
		Shmem: l.Shmem, Args: l.Args[1 : 1+fargs]}
	q = Launch{File: "quant.cu", Kernel: "qgemv", DTypes: l.DTypes[2:], Ints: l.Ints[2:], Grid: dims(l.Grid[0] - rb), Block: l.Block,
		Args: l.Args[1+fargs:]}
	return f, q, true
}
