package lower

import "reflect"

// The o_proj of a quantised model quantises the decode attention's output
// (Q8XQuantize) before its GEMV: a launch of 2 us for 9,216 values.
// fuseAttnQ8X lets the attention write that quantised copy as it writes its
// output (AttentionDecodeArgs.XQ). Its invariant:
//
//	a q8x_quantize launch Q is dropped, and the attn_decode launch A right
//	before it becomes A with XQ set to Q's output, only when A is as
//	AttentionDecode builds it (no XQ yet), Q is exactly Q8XQuantize of A's
//	whole output (every row of nh*d elements), head_dim is a multiple of
//	32, and Q's output lies apart from everything A reads and writes in
//	the workspace (its split partials).
//
// Q ran right after A and read only A's output, which A wrote; the fused
// kernel writes the same bytes (attention.cu: dec_q8x quantises the stored
// values as q8x_group does) to the same place, in the same launch, so
// after A's place memory is what it was after Q. A's partials lie apart
// (the attention rule keeps the workspace's start for the copy:
// attentionQ8XReserve), so its merge never reads a byte of the copy.

// attnDecodeArgs are the positions of attn_decode's arguments (AttentionDecode).
const (
	attnArgNH, attnArgNKV, attnArgD = 0, 1, 2
	attnArgPos                      = 7
	attnArgQ, attnArgK              = 10, 11
	attnArgOut                      = 18 // then part_acc, part_ml, counters, xq, xs
	attnArgXQ                       = 22
	attnArgNR                       = 24 // qw, kw, eps, inv_freq, rot, attnf (NormRoPEAttention)
	attnArgCount                    = 30
)

// fuseAttnQ8X fuses quantisations of a decode attention's output into it.
func fuseAttnQ8X(steps [][]Launch) {
	fusePairs(steps, false, func(a, q Launch, _ []Launch) (Launch, bool) {
		if a.Kernel != "attn_decode" || q.Kernel != "q8x_quantize" {
			return Launch{}, false
		}
		return attnWithQ8X(a, q)
	})
}

// attnWithQ8X returns a (an attn_decode launch) writing q's quantisation of
// its output too, when the invariant above holds.
func attnWithQ8X(a, q Launch) (Launch, bool) {
	args := a.Args
	if len(args) != attnArgCount || len(a.DTypes) != 1 || !args[attnArgXQ].Ptr().Null() {
		return Launch{}, false
	}
	nh, nkv, d := int(args[attnArgNH].Int), int(args[attnArgNKV].Int), int(args[attnArgD].Int)
	if nh <= 0 || nkv <= 0 || d <= 0 || d%32 != 0 || nh%nkv != 0 {
		return Launch{}, false
	}
	group := nh / nkv
	zh := ceilDiv(group, min(group, decodeHeads))
	if a.Grid[2]%zh != 0 {
		return Launch{}, false
	}
	rows := a.Grid[2] / zh
	out := args[attnArgOut].Ptr()
	if len(q.Args) != 4 || q.Args[2].Kind != ArgPtr {
		return Launch{}, false
	}
	xq := q.Args[2].Ptr()
	want, err := Q8XQuantize(a.DTypes[0], out, xq, rows, nh*d)
	if err != nil || !reflect.DeepEqual(want, q) || xq.Base != BaseWorkspace || !xq.Aligned(16) {
		return Launch{}, false
	}
	qn := Q8XBytes(rows, nh*d)
	for _, k := range []int{attnArgOut + 1, attnArgOut + 2} { // the partials: workspace from part_acc on
		p := args[k].Ptr()
		if p.Base == BaseWorkspace && p.Offset < xq.Offset+qn {
			return Launch{}, false
		}
	}
	f := a
	f.Args = append([]Arg(nil), args...)
	f.Args[attnArgXQ] = ptrArg(xq)
	f.Args[attnArgXQ+1] = ptrArg(q8xScales(xq, rows, nh*d))
	return f, true
}
