package cpu

import (
	"fmt"
	"math"
	"math/bits"
)

// checkLen reports a slice whose length is not the product of dims (or a
// product that does not fit an int, which no real shape reaches).
func checkLen(op, name string, got int, dims ...int) error {
	want := prod(dims...)
	if want < 0 {
		return fmt.Errorf("cpu.%s: %s: dimensions %v are negative or too large", op, name, dims)
	}
	if got != want {
		return fmt.Errorf("cpu.%s: %s has %d elements, want %d", op, name, got, want)
	}
	return nil
}

// prod returns the product of dims, or -1 if one is negative or the product
// overflows. Every kernel call checks its lengths with it: overflow is
// found by a full-width multiply, not a division.
func prod(dims ...int) int {
	p := uint64(1)
	for _, d := range dims {
		if d < 0 {
			return -1
		}
		hi, lo := bits.Mul64(p, uint64(d))
		if hi != 0 || lo > math.MaxInt {
			return -1
		}
		p = lo
	}
	return int(p)
}

// dim is a named dimension, for checkDims.
type dim struct {
	name string
	v    int
}

// checkDims reports the first non-positive dimension.
func checkDims(op string, ds ...dim) error {
	for _, d := range ds {
		if d.v <= 0 {
			return fmt.Errorf("cpu.%s: %s = %d must be positive", op, d.name, d.v)
		}
	}
	return nil
}
