package ir

import "fmt"

// checkBlockRuns reports a load-time weight transform that would cut
// through the blocks of a quantised dtype. Blocks run along the last axis,
// so the stored bytes of a concatenation are the sources' bytes joined run
// by run (a run: one source's elements from the concat axis on, for each
// index of the axes before it) and each run must be whole blocks; a reshape
// keeps the bytes and must keep rows of whole blocks.
func checkBlockRuns(op string, attrs Attrs, srcs []*Value, out Type) error {
	dt := out.DType
	if !dt.IsQuantized() {
		return nil
	}
	bs := int64(dt.BlockSize())
	switch op {
	case "concat":
		axis, _ := attrs["axis"].(int)
		for _, s := range srcs {
			sh := s.Type.Shape
			a := axis
			if a < 0 {
				a += len(sh)
			}
			if a < 0 || a > len(sh) {
				return nil // InferTypes has rejected the axis already
			}
			run, ok := sh[a:].ConstElems()
			if ok && run%bs != 0 {
				return fmt.Errorf("concat along axis %d joins runs of %d elements of %s, not whole %s blocks of %d", axis, run, s.Name, dt, bs)
			}
		}
	case "reshape":
		if n := len(out.Shape); n > 0 && out.Shape[n-1].IsConst() && int64(out.Shape[n-1].N)%bs != 0 {
			return fmt.Errorf("reshape to %s makes rows of %d elements, not whole %s blocks of %d", out.Shape, out.Shape[n-1].N, dt, bs)
		}
	}
	return nil
}
