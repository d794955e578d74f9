package prep

import "fmt"

// ConcatRows joins parts, each viewed as [outer, sizes[i]], into out
// [outer, sum(sizes)]. Callers check the lengths.
func ConcatRows(out []float32, parts [][]float32, outer int, sizes []int) {
	total := 0
	for _, s := range sizes {
		total += s
	}
	for o := 0; o < outer; o++ {
		off := o * total
		for i, p := range parts {
			s := sizes[i]
			copy(out[off:off+s], p[o*s:o*s+s])
			off += s
		}
	}
}

// Derive computes a derived weight from its sources (of the given shapes):
// "reshape" of one source is its data; "concat" joins the sources along
// axis (negative counts from the end), as the concat op does.
func Derive(op string, axis int, srcs [][]float32, shapes [][]int) ([]float32, error) {
	if len(srcs) == 0 || len(srcs) != len(shapes) {
		return nil, fmt.Errorf("%s of %d sources with %d shapes", op, len(srcs), len(shapes))
	}
	for i, s := range srcs {
		if n := elems(shapes[i]); n < 0 || len(s) != n {
			return nil, fmt.Errorf("%s: source %d has %d elements, its shape %v has %d", op, i, len(s), shapes[i], n)
		}
	}
	switch op {
	case "reshape":
		if len(srcs) != 1 {
			return nil, fmt.Errorf("reshape of %d sources, want 1", len(srcs))
		}
		return srcs[0], nil
	case "concat":
		r := len(shapes[0])
		if axis < 0 {
			axis += r
		}
		if axis < 0 || axis >= r {
			return nil, fmt.Errorf("concat axis %d is outside rank %d", axis, r)
		}
		outer := elems(shapes[0][:axis])
		sizes := make([]int, len(srcs))
		total := 0
		for i, sh := range shapes {
			if len(sh) != r || elems(sh[:axis]) != outer {
				return nil, fmt.Errorf("concat along axis %d of shapes %v and %v", axis, shapes[0], sh)
			}
			sizes[i] = elems(sh[axis:])
			total += len(srcs[i])
		}
		out := make([]float32, total)
		ConcatRows(out, srcs, outer, sizes)
		return out, nil
	}
	return nil, fmt.Errorf("weight transform %q is not supported (concat, reshape)", op)
}

// elems is the number of elements of a shape, -1 for a negative dimension.
func elems(shape []int) int {
	n := 1
	for _, d := range shape {
		if d < 0 {
			return -1
		}
		n *= d
	}
	return n
}
