package cpu

import (
	"fmt"

	"lagc/exec/cpu/internal/vec"
	"lagc/prep"
)

// SiLU computes out = x * sigmoid(x) = x / (1 + exp(-x)), element-wise
// (computed in float64, rounded once). out may alias x.
func SiLU(out, x []float32) error {
	if err := checkLen("SiLU", "out", len(out), len(x)); err != nil {
		return err
	}
	parallelFor(len(x), 16, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			out[i] = vec.SiLU(x[i])
		}
	})
	return nil
}

// Mul computes out = a * b element-wise (same shapes). out may alias either.
func Mul(out, a, b []float32) error {
	if err := checkLen("Mul", "b", len(b), len(a)); err != nil {
		return err
	}
	if err := checkLen("Mul", "out", len(out), len(a)); err != nil {
		return err
	}
	for i := range a {
		out[i] = a[i] * b[i]
	}
	return nil
}

// Add computes out = a + b element-wise (same shapes). out may alias either.
func Add(out, a, b []float32) error {
	if err := checkLen("Add", "b", len(b), len(a)); err != nil {
		return err
	}
	if err := checkLen("Add", "out", len(out), len(a)); err != nil {
		return err
	}
	for i := range a {
		out[i] = a[i] + b[i]
	}
	return nil
}

// Concat joins row-major tensors along one axis. Each part i is viewed as
// [outer, sizes[i]], where outer is the product of the dimensions before the
// axis and sizes[i] is the part's extent along the axis times the product of
// the dimensions after it; out is [outer, sum(sizes)].
func Concat(out []float32, parts [][]float32, outer int, sizes []int) error {
	total, err := checkSplit("Concat", parts, outer, sizes)
	if err != nil {
		return err
	}
	if err := checkLen("Concat", "out", len(out), outer, total); err != nil {
		return err
	}
	prep.ConcatRows(out, parts, outer, sizes)
	return nil
}

// Split is the inverse of Concat: x [outer, sum(sizes)] into parts
// [outer, sizes[i]].
func Split(parts [][]float32, x []float32, outer int, sizes []int) error {
	total, err := checkSplit("Split", parts, outer, sizes)
	if err != nil {
		return err
	}
	if err := checkLen("Split", "x", len(x), outer, total); err != nil {
		return err
	}
	for o := 0; o < outer; o++ {
		off := o * total
		for i, p := range parts {
			s := sizes[i]
			copy(p[o*s:o*s+s], x[off:off+s])
			off += s
		}
	}
	return nil
}

func checkSplit(op string, parts [][]float32, outer int, sizes []int) (int, error) {
	if err := checkDims(op, dim{"outer", outer}); err != nil {
		return 0, err
	}
	if len(parts) != len(sizes) {
		return 0, fmt.Errorf("cpu.%s: %d parts but %d sizes", op, len(parts), len(sizes))
	}
	total := 0
	for i, s := range sizes {
		if s < 0 {
			return 0, fmt.Errorf("cpu.%s: sizes[%d] = %d is negative", op, i, s)
		}
		if err := checkLen(op, fmt.Sprintf("part %d", i), len(parts[i]), outer, s); err != nil {
			return 0, err
		}
		if total += s; total < 0 {
			return 0, fmt.Errorf("cpu.%s: sizes %v overflow", op, sizes)
		}
	}
	return total, nil
}
