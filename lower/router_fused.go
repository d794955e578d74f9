package lower

import (
	"fmt"
	"reflect"
)

// The MoE router in decode is a GEMV of the router weights into f32
// logits and the block top-k on them: two launches of a few microseconds
// each for 256 x 3072 weights. fuseRouter makes them one (RouterFused). Its
// invariant:
//
//	a router_topk_block launch S is dropped, and the gemv launch G right
//	before it in the stream becomes RouterFused(G, S), only when G is a
//	GEMV of R <= RouterFusedMaxT rows into f32 logits without accumulation,
//	S is RouterTopK's block launch of those R rows reading exactly G's
//	output, and S's outputs lie apart from the logits.
//
// The fused kernel's blocks compute G's blocks' logits with G's code,
// grid and split (the same bits, written to the same place), and its last
// block runs S's selection on them after every block has written its rows:
// after the launch, memory is what it was after S (its counter, in the
// sync region, back at 0).

// RouterFusedMaxT is the most tokens fuseRouter fuses the router for: the
// fused kernel's last block selects the tokens one after another, which
// for more tokens may cost more than the launch it saves (not measured).
const RouterFusedMaxT = 1

// RouterFusedMaxE is the most experts RouterFused takes (the block
// selection's shared memory, well under the 48 KiB a launch gets unasked).
const RouterFusedMaxE = 1024

// RouterFusedCounters is the sync bytes (BaseSync) a fused router needs:
// one u32.
const RouterFusedCounters = 4

// RouterFused is gemv (a MatMul GEMV launch: x [R, K] . w^T into f32 logits
// [R, E]) and topk (RouterTopK's block launch on those logits) as one
// launch of router.cu's router_fused, its blocks counting themselves done
// at counter (4 bytes, zero before the launch, which leaves it zero).
func RouterFused(gemv, topk Launch, counter Ptr) (Launch, error) {
	const op = "RouterFused"
	is := ArgKinds
	const i, f, p, x = ArgI32, ArgF32, ArgPtr, ArgI64
	g, s := gemv.Args, topk.Args
	if gemv.Kernel != "gemv" || gemv.File != "matmul.cu" || len(gemv.DTypes) != 3 || len(gemv.Ints) != 3 || !is(g, i, i, i, p, p, p, i) {
		return Launch{}, fmt.Errorf("%s: %s is not a GEMV launch", op, gemv.NameExpr())
	}
	if topk.Kernel != "router_topk_block" || topk.File != "router.cu" || !is(s, i, i, i, f, f, p, x, p, p, p) {
		return Launch{}, fmt.Errorf("%s: %s is not a block top-k launch", op, topk.NameExpr())
	}
	R, swiglu, vec := int(gemv.Ints[0]), gemv.Ints[1], gemv.Ints[2]
	N, K, split, acc := int(g[0].Int), int(g[1].Int), int(g[2].Int), g[6].Int
	xp, wp, y := g[3].Ptr(), g[4].Ptr(), g[5].Ptr()
	T, E, k, softcap, scaling := int(s[0].Int), int(s[1].Int), int(s[2].Int), s[3].Float, s[4].Float
	logits, ld, bias, weights, ids := s[5].Ptr(), s[6].Int, s[7].Ptr(), s[8].Ptr(), s[9].Ptr()
	switch {
	case gemv.DTypes[2] != "f32" || swiglu != 0 || acc != 0 || (vec != 0 && vec != 1):
		return Launch{}, fmt.Errorf("%s: the GEMV must store f32 logits (got %s)", op, gemv.NameExpr())
	case R < 1 || R > GEMVMaxRows || !(split == 1 || split == 2 || split == 4 || split == 8) || N < 1 || K < 1 ||
		gemv.Grid != dims(ceilDiv(N, 8/split)) || gemv.Block != dims(256) || gemv.Shmem != 0:
		return Launch{}, fmt.Errorf("%s: %s is not as MatMul builds a GEMV", op, gemv)
	case len(topk.DTypes) != 1 || topk.DTypes[0] != "f32" || T != R || E != N || ld != int64(E) || logits != y:
		return Launch{}, fmt.Errorf("%s: the top-k does not read the GEMV's f32 logits [%d, %d]", op, R, N)
	case E > RouterFusedMaxE:
		return Launch{}, fmt.Errorf("%s: %d experts (at most %d)", op, E, RouterFusedMaxE)
	case counter.Null():
		return Launch{}, fmt.Errorf("%s: null counter", op)
	}
	want, err := RouterTopK("f32", weights, ids, logits, bias, T, E, k, softcap, scaling)
	if err != nil || !reflect.DeepEqual(want, topk) {
		return Launch{}, fmt.Errorf("%s: %s is not as RouterTopK builds it", op, topk)
	}
	ln, rk := int64(4*R*E), int64(4*R*k)
	if overlaps(weights, rk, logits, ln) || overlaps(ids, rk, logits, ln) {
		return Launch{}, fmt.Errorf("%s: the routes overlap the logits", op)
	}
	return kernel("router.cu", "router_fused", gemv.DTypes[:2], []int64{int64(R), vec}, gemv.Grid, gemv.Block, routerSmem(E, k),
		i32(E), i32(K), i32(split), ptrArg(xp), ptrArg(wp), ptrArg(y), i32(k), f32(softcap), f32(scaling),
		ptrArg(bias), ptrArg(weights), ptrArg(ids), ptrArg(counter)), nil
}

// fuseRouter fuses the routers of at most RouterFusedMaxT tokens in a
// stream of launches, a list per step, in place; the counter is the sync
// region's first (the router_topk rule's counters reserve it).
func fuseRouter(steps [][]Launch) {
	fusePairs(steps, false, func(g, topk Launch, _ []Launch) (Launch, bool) {
		if g.Kernel != "gemv" || topk.Kernel != "router_topk_block" || len(g.Ints) == 0 || g.Ints[0] > RouterFusedMaxT {
			return Launch{}, false
		}
		f, err := RouterFused(g, topk, Ptr{BaseSync, 0})
		return f, err == nil
	})
}

// routerCounters: a router step of few tokens may be fused with its GEMV
// (fuseRouter), whose blocks count themselves done at sync+0.
func routerCounters(c *stepCtx) (int64, error) {
	if c.rows(c.st.In[0]) <= RouterFusedMaxT {
		return RouterFusedCounters, nil
	}
	return 0, nil
}
