package lower

import "fmt"

// A decode attention (attn_decode) reads little memory (its layer's cache
// window, a few MB at most) and runs about a fifth of a quantised MoE
// layer's decode, while o_proj's GEMV after it (qgemv_norm) waits for it
// before it reads anything, its weights included. fuseNormPre (a launch
// fusion, after fuseDownPre) lets that GEMV prefetch its block's weight
// rows into L2 before its griddepcontrol.wait (NormPre; prefetches hold no
// registers, where loading a round into registers spilled); the attention
// lets the launch after it start once every block of it has passed its own
// wait, so the GEMV's blocks that fit beside the attention's (140 of 384 in
// S-2.1's sliding layers) bring their weights while it runs. Its invariant:
//
//	an attn_decode launch A right before a qgemv_norm launch G (no launch
//	between) becomes A and qgemv_norm_pre with the same arguments.
//
// What G reads before its wait, its weights, no launch writes; its
// activations, output and tail are read and written after the wait, as
// before: the same loads, sums and stores in the same order (the same
// bits).

// NormPre returns g as qgemv_norm_pre when a, the launch before it, is a
// decode attention, or an error saying why not.
func NormPre(a, g Launch) (Launch, Launch, error) {
	const op = "NormPre"
	if a.Kernel != "attn_decode" || a.File != "attention.cu" {
		return Launch{}, Launch{}, fmt.Errorf("%s: %s is not a decode attention", op, a.NameExpr())
	}
	if g.Kernel != "qgemv_norm" || g.File != "quant.cu" || len(g.DTypes) != 2 || len(g.Ints) != 6 || len(g.Args) != 21 ||
		!ArgKinds(g.Args[:5], ArgI32, ArgI32, ArgI64, ArgI64, ArgPtr) || g.Args[4].Ptr().Base != BaseWeights {
		return Launch{}, Launch{}, fmt.Errorf("%s: %s is not a qgemv_norm launch over weights", op, g.NameExpr())
	}
	g.Kernel = "qgemv_norm_pre"
	return a, g, nil
}

// fuseNormPre applies NormPre to each such pair of the stream, in place.
func fuseNormPre(steps [][]Launch) { renamePairs(steps, NormPre) }

// After a MoE layer's one-block join (qgemv_join_norm, sharedDownGateUp)
// the next layer's first GEMV (the q, k, v and gate projections, or the LM
// head after the last layer: qgemv) waits for that block, the GPU idle but
// for one SM, before it asks for its weights. fuseQGEMVPre (a late fusion,
// after sharedDownGateUp, which makes the joins: Plan.lateFusions) lets it
// prefetch its weight rows into L2 before its wait (QGEMVPre); the join
// lets the launch after it start once its block has passed its wait. Its
// invariant:
//
//	a qgemv_join_norm launch J right before a qgemv launch G without
//	SwiGLU over weights becomes J and qgemv_pre with the same arguments.
//
// As for NormPre, G reads only its weights before its wait.

// QGEMVPre returns g as qgemv_pre when j, the launch before it, is a
// MoE layer's shared-down tail, or an error saying why not.
func QGEMVPre(j, g Launch) (Launch, Launch, error) {
	const op = "QGEMVPre"
	if j.Kernel != "qgemv_join_norm" {
		return Launch{}, Launch{}, fmt.Errorf("%s: %s is not a MoE layer's shared-down tail", op, j.NameExpr())
	}
	if g.Kernel != "qgemv" || g.File != "quant.cu" || len(g.Ints) != 5 || g.Ints[2] != 0 || len(g.Args) != 9 ||
		!ArgKinds(g.Args[:5], ArgI32, ArgI32, ArgI64, ArgI64, ArgPtr) || g.Args[4].Ptr().Base != BaseWeights {
		return Launch{}, Launch{}, fmt.Errorf("%s: %s is not a qgemv launch over weights without SwiGLU", op, g.NameExpr())
	}
	g.Kernel = "qgemv_pre"
	return j, g, nil
}

// fuseQGEMVPre applies QGEMVPre to each such pair of the stream, in place.
func fuseQGEMVPre(steps [][]Launch) { renamePairs(steps, QGEMVPre) }
