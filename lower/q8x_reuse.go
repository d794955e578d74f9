package lower

import "reflect"

// A quantised GEMV quantises its activations into the workspace first
// (Q8XQuantize), and consecutive GEMVs often quantise the same ones: a
// matmul_split of several rows quantises its x once per row block.
// reuseQ8X drops such a repeat. Its invariant:
//
//	a q8x_quantize launch identical to the last one in the stream is
//	dropped only when every launch since that one is a qgemv whose output
//	y does not overlap the quantised source x.
//
// An identical launch reads the same bytes of x and writes the same
// workspace bytes, and its result depends on nothing else. qgemv reads
// the workspace and writes y [T, N] only (cuda/kernels/quant.cu), so
// neither the source nor the quantised copy has changed: the workspace
// already holds what the repeat would write, bit for bit (batched rows
// included). Any other launch, or a launch whose arguments do not read as
// expected, ends the reuse.

// reuseQ8X drops the repeated quantisations from a stream of launches, a
// list per step, in place.
func reuseQ8X(steps [][]Launch) {
	var held Launch // the last q8x_quantize, while the invariant holds
	holding := false
	for i, ls := range steps {
		var kept []Launch
		for _, l := range ls {
			switch {
			case l.Kernel == "q8x_quantize" && holding && reflect.DeepEqual(held, l):
				continue
			case l.Kernel == "q8x_quantize":
				_, _, holding = q8xSource(l)
				held = l
			case l.Kernel == "qgemv" && holding:
				x, xn, _ := q8xSource(held)
				y, yn, ok := qgemvOutput(l)
				holding = ok && !overlaps(x, xn, y, yn)
			default:
				holding = false
			}
			kept = append(kept, l)
		}
		steps[i] = kept
	}
}

// q8xSource is the activations a q8x_quantize launch (groups, x, xq,
// scales) reads: groups of 32 elements of DTypes[0]. It fails unless the
// launch reads as that, its output (the int8 values, then 16 bytes of
// scales a group) lying apart from x.
func q8xSource(l Launch) (Ptr, int64, bool) {
	a := l.Args
	if len(a) != 4 || a[0].Kind != ArgI64 || a[1].Kind != ArgPtr || a[2].Kind != ArgPtr || a[3].Kind != ArgPtr || len(l.DTypes) != 1 {
		return Ptr{}, 0, false
	}
	groups, size := a[0].Int, int64(dtypeSize(l.DTypes[0]))
	x, xn := a[1].Ptr(), 32*groups*size
	xq, scales := a[2].Ptr(), a[3].Ptr()
	out := scales.Offset + 16*groups - xq.Offset
	ok := groups > 0 && size > 0 && xq.Base == scales.Base && scales.Offset >= xq.Offset && !overlaps(x, xn, xq, out)
	return x, xn, ok
}

// qgemvOutput is what a qgemv launch (QGEMV) writes: y [T, N] of
// DTypes[0] at its eighth argument, T its second integer parameter and N
// its first argument.
func qgemvOutput(l Launch) (Ptr, int64, bool) {
	if len(l.Args) != 9 || l.Args[0].Kind != ArgI32 || l.Args[7].Kind != ArgPtr || len(l.Ints) < 2 || len(l.DTypes) != 1 {
		return Ptr{}, 0, false
	}
	T, N, size := l.Ints[1], l.Args[0].Int, int64(dtypeSize(l.DTypes[0]))
	return l.Args[7].Ptr(), T * N * size, T > 0 && N > 0 && size > 0
}
