package prep

// CountNonFinite counts the NaN and infinite values of d and returns the
// index of the first (-1 if all are finite).
func CountNonFinite(d []float32) (nan, inf, first int) {
	first = -1
	for i, x := range d {
		if x-x == 0 { // x-x is 0 for finite x, NaN for NaN and infinities
			continue
		}
		if x != x {
			nan++
		} else {
			inf++
		}
		if first < 0 {
			first = i
		}
	}
	return nan, inf, first
}
