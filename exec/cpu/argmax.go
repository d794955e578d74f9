package cpu

// ArgMax writes the index of the largest element of each row of x [T,V]
// into out [T]. The first maximum wins on ties; a NaN counts as larger than
// any number (as torch.argmax treats it), so the first NaN wins.
func ArgMax(out []int32, x []float32, T, V int) error {
	if err := checkDims("ArgMax", dim{"T", T}, dim{"V", V}); err != nil {
		return err
	}
	if err := checkLen("ArgMax", "x", len(x), T, V); err != nil {
		return err
	}
	if err := checkLen("ArgMax", "out", len(out), T); err != nil {
		return err
	}
	for t := 0; t < T; t++ {
		out[t] = int32(argmax(x[t*V : t*V+V]))
	}
	return nil
}

func argmax(row []float32) int {
	best := 0
	for i := 1; i < len(row); i++ {
		if greater(row[i], row[best]) {
			best = i
		}
	}
	return best
}

// greater orders floats with NaN above every number and equal to itself.
func greater(a, b float32) bool {
	if a != a {
		return b == b
	}
	return a > b
}
