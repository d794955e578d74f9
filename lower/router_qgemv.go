package lower

import (
	"fmt"
	"reflect"

	"lagc/quant"
)

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
	is := ArgKinds
	const i, fl, p, x = ArgI32, ArgF32, ArgPtr, ArgI64
	fa, qa := f.Args, q.Args
	if f.Kernel != "router_fused" || f.File != "router.cu" || len(f.DTypes) != 2 || len(f.Ints) != 2 ||
		!is(fa, i, i, i, p, p, p, i, fl, fl, p, p, p, p) {
		return Launch{}, fmt.Errorf("%s: %s is not a fused router launch", op, f.NameExpr())
	}
	if q.Kernel != "qgemv" || q.File != "quant.cu" || len(q.DTypes) != 1 || len(q.Ints) != 5 || !is(qa, i, i, x, x, p, p, p, p, i) {
		return Launch{}, fmt.Errorf("%s: %s is not a quantised GEMV launch", op, q.NameExpr())
	}
	R, E, K, k := int(f.Ints[0]), int(fa[0].Int), int(fa[1].Int), int(fa[6].Int)
	xp, logits, bias, weights, ids, counter := fa[3].Ptr(), fa[5].Ptr(), fa[9].Ptr(), fa[10].Ptr(), fa[11].Ptr(), fa[12].Ptr()
	a := QGEMVArgs{T: int(q.Ints[1]), N: int(qa[0].Int), K: int(qa[1].Int), WRows: int(qa[2].Int), Row0: int(qa[3].Int),
		W: qa[4].Ptr(), XQ: qa[5].Ptr(), Y: qa[7].Ptr(), WType: quant.Type(q.Ints[0]), YType: q.DTypes[0],
		SwiGLU: q.Ints[2] != 0, Accumulate: qa[8].Int != 0, RowsPerWarp: int(q.Ints[3]), Split: int(q.Ints[4])}
	want, err := QGEMV(a)
	if err != nil || !reflect.DeepEqual(want, q) {
		return Launch{}, fmt.Errorf("%s: %s is not as QGEMV builds it", op, q)
	}
	if f.Block != dims(256) || q.Block != dims(256) || q.Shmem != 0 || f.Grid[1] != 1 || q.Grid[1] != 1 {
		return Launch{}, fmt.Errorf("%s: blocks of %v and %v threads, %d bytes of shared memory", op, f.Block, q.Block, q.Shmem)
	}
	// What each writes, then what each reads.
	ny := int64(a.T) * int64(a.N) * int64(dtypeSize(a.YType))
	type span struct {
		p Ptr
		n int64
	}
	fw := []span{{logits, 4 * int64(R*E)}, {weights, 4 * int64(R*k)}, {ids, 4 * int64(R*k)}, {counter, RouterFusedCounters}}
	fr := []span{{xp, int64(R*K) * int64(dtypeSize(f.DTypes[0]))}, {bias, 4 * int64(E)}}
	qw := []span{{a.Y, ny}}
	qr := []span{{a.XQ, Q8XBytes(a.T, a.K)}, {a.Y, ny}}
	for _, w := range fw {
		for _, o := range append(append([]span(nil), qw...), qr...) {
			if overlaps(w.p, w.n, o.p, o.n) {
				return Launch{}, fmt.Errorf("%s: the router writes %v, which the GEMV uses", op, w.p)
			}
		}
	}
	for _, w := range qw {
		for _, o := range fr {
			if !o.p.Null() && overlaps(w.p, w.n, o.p, o.n) {
				return Launch{}, fmt.Errorf("%s: the GEMV writes %v, which the router reads", op, w.p)
			}
		}
	}
	args := append([]Arg{i32(f.Grid[0])}, fa...)
	args = append(args, qa...)
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
