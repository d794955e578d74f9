package quant

import "math"

// Q8_0 (block_q8_0): 32 weights in 34 bytes: f16 d, then 32 int8 q;
// weight = q * d.

func init() { table[Q8_0].dequant, table[Q8_0].quant = dequantQ8_0, quantQ8_0 }

func dequantQ8_0(dst []float32, src []byte) {
	for len(dst) > 0 {
		d := f16(src)
		for j := range 32 {
			dst[j] = float32(int8(src[2+j])) * d
		}
		dst, src = dst[32:], src[34:]
	}
}

// quantQ8_0 follows quantize_row_q8_0_ref: d = amax/127, q = roundf(x/d).
func quantQ8_0(dst []byte, src []float32) {
	for len(src) > 0 {
		x := src[:32]
		var amax float32
		for _, v := range x {
			amax = fmax(amax, abs32(v))
		}
		d := amax / 127
		var id float32
		if d != 0 {
			id = 1 / d
		}
		putF16(dst, d)
		for j, v := range x {
			dst[2+j] = byte(int8(roundf(v * id)))
		}
		dst, src = dst[34:], src[32:]
	}
}

// abs32 is C's fabsf.
func abs32(x float32) float32 { return math.Float32frombits(math.Float32bits(x) &^ (1 << 31)) }

// fmax is ggml's MAX(a, b): ((a) > (b) ? (a) : (b)), NaN behaviour included.
func fmax(a, b float32) float32 {
	if a > b {
		return a
	}
	return b
}

// roundf is C's roundf (half away from zero); float32 to float64 is exact.
func roundf(x float32) float32 { return float32(math.Round(float64(x))) }
