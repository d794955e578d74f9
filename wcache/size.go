package wcache

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ParseSize parses a byte count with an optional K, M, G or T suffix
// (powers of 1024; "KiB", "GB" and the like are read the same way).
func ParseSize(s string) (int64, error) {
	t := strings.ToUpper(strings.TrimSpace(s))
	t = strings.TrimSuffix(strings.TrimSuffix(t, "B"), "I")
	shift := 0
	if n := len(t); n > 0 {
		switch t[n-1] {
		case 'K':
			shift = 10
		case 'M':
			shift = 20
		case 'G':
			shift = 30
		case 'T':
			shift = 40
		}
		if shift > 0 {
			t = t[:n-1]
		}
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(t), 64)
	if err != nil || math.IsNaN(v) || v < 0 || v*float64(int64(1)<<shift) > 1<<62 {
		return 0, fmt.Errorf("size %q: expected bytes with an optional K, M, G or T suffix, e.g. 200G", s)
	}
	return int64(v * float64(int64(1)<<shift)), nil
}
