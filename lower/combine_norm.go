package lower

import "reflect"

// A bf16 model's MoE layer ends with moe_combine adding each token's expert
// rows onto the residual stream, and the next layer's input norm (or the
// final norm) reads that sum right after: at 2048 tokens two launches and
// two passes over 12 MiB of rows. fuseCombineNorm makes them one
// (MoECombineNorm). Its invariant:
//
//	a moe_combine launch C and the rms_norm launch N right after it (no
//	launch between them; steps between may launch nothing) become one
//	launch at C's place, MoECombineNorm of C's and N's arguments, and N is
//	dropped, only when C is as MoECombine builds it (MoECombineNorm then
//	takes its 8 values a thread: H a multiple of 8),
//	N as RMSNorm builds it with a block a row (not the warp, add or _q8x
//	forms), N's x is C's out in C's dtype, N's rows are C's tokens and its
//	row length C's, and N's output lies apart from everything C reads and
//	writes (MoECombineNorm checks it).
//
// Nothing runs between C and N, so the fused launch sees the memory C saw
// and leaves what N left: its out gets the combine's bits (the same
// expression, moe_combine_at) and the norm's output the norm's bits of
// that row as stored (norm_row with N's block). C's place rather than N's,
// as fuseAddNorm: after C's step its output is in memory.

// fuseCombineNorm fuses combines into the norms reading their sums, in
// place.
func fuseCombineNorm(steps [][]Launch) {
	fusePairs(steps, false, func(c, n Launch, _ []Launch) (Launch, bool) {
		if c.Kernel != "moe_combine" {
			return Launch{}, false
		}
		return combineNorm(c, n)
	})
}

// combineNorm returns the fused launch of c (a moe_combine) and n (the
// launch right after it) when the invariant above holds.
func combineNorm(c, n Launch) (Launch, bool) {
	if len(c.DTypes) != 1 || !ArgKinds(c.Args, ArgI32, ArgI32, ArgI32, ArgPtr, ArgPtr, ArgPtr, ArgPtr, ArgI32) {
		return Launch{}, false
	}
	a := c.Args
	ydt, T, k, H := c.DTypes[0], int(a[0].Int), int(a[1].Int), int(a[2].Int)
	weights, pos, ys, out, acc := a[3].Ptr(), a[4].Ptr(), a[5].Ptr(), a[6].Ptr(), a[7].Int != 0
	if want := MoECombine(ydt, T, k, H, weights, pos, ys, out, acc); !reflect.DeepEqual(want, c) {
		return Launch{}, false
	}
	m, ok := parseNormOf(n)
	if !ok || m.add || m.q8x || n.Kernel != "rms_norm_block" || m.x != out || m.xdt != ydt || m.rows != T || m.n != H {
		return Launch{}, false
	}
	f, err := MoECombineNorm(ydt, m.odt, T, k, H, weights, pos, ys, out, acc, m.w, m.out, m.eps)
	return f, err == nil
}
