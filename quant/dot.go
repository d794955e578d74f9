package quant

import "fmt"

// DotRow returns the dot product of one row of type t (w, t.RowBytes(len(x))
// bytes) with x. It dequantises one block at a time (256 elements at a time
// for plain types) into a small buffer, so the row is never materialised;
// each block's float32 partial sum is accumulated in float64.
func DotRow(t Type, w []byte, x []float32) (float32, error) {
	tr, err := checkSizes(t, len(x), len(w), "dot")
	if err != nil {
		return 0, err
	}
	if tr.dequant == nil {
		return 0, fmt.Errorf("dot: type %s is not supported", tr.name)
	}
	chunk := tr.blockElems
	if chunk == 1 {
		chunk = QK
	}
	var buf [QK]float32
	var sum float64
	for len(x) > 0 {
		n := min(chunk, len(x))
		nb := n / tr.blockElems * tr.blockBytes
		tr.dequant(buf[:n], w[:nb])
		var s float32
		for i, v := range buf[:n] {
			s += v * x[i]
		}
		sum += float64(s)
		x, w = x[n:], w[nb:]
	}
	return float32(sum), nil
}
