package cpu

import "fmt"

// checkLen reports a slice whose length does not match its dimensions.
func checkLen(op, name string, got, want int) error {
	if got != want {
		return fmt.Errorf("cpu.%s: %s has %d elements, want %d", op, name, got, want)
	}
	return nil
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
