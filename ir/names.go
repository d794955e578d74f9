package ir

import (
	"strconv"
	"strings"
)

// LayerOf returns N for a canonical per-layer name "blk.N....", the layer a
// weight or activation belongs to.
func LayerOf(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, "blk.")
	if !ok {
		return 0, false
	}
	num, _, ok := strings.Cut(rest, ".")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(num)
	if err != nil || n < 0 {
		return 0, false
	}
	return n, true
}
