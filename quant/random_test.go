package quant

import (
	"bytes"
	"math"
	"testing"
)

// TestRandom: random blocks of every type dequantise to finite values of
// about the asked magnitude and about zero mean (the codebooks of Q4_0
// and IQ4_NL, centred half a step low, leave them -0.06 and -0.05 of it),
// and the seed fixes the bytes.
func TestRandom(t *testing.T) {
	const scale = 0.05
	for typ := range randomLayouts {
		t.Run(typ.String(), func(t *testing.T) {
			n := 64 * 256 // whole blocks of every type
			b := make([]byte, n/typ.BlockElems()*typ.BlockBytes())
			offset := float32(0)
			if typ.Float() {
				offset = 1
			}
			if err := Random(typ, b, 7, offset, scale); err != nil {
				t.Fatal(err)
			}
			again := make([]byte, len(b))
			Random(typ, again, 7, offset, scale)
			other := make([]byte, len(b))
			Random(typ, other, 8, offset, scale)
			if !bytes.Equal(b, again) || bytes.Equal(b, other) {
				t.Fatal("the seed does not fix the bytes")
			}
			f := make([]float32, n)
			if err := Dequantize(typ, f, b); err != nil {
				t.Fatal(err)
			}
			var maxAbs, sumAbs, sum float64
			for _, v := range f {
				d := math.Abs(float64(v - offset))
				if math.IsNaN(d) || math.IsInf(d, 0) {
					t.Fatalf("non-finite value %v", v)
				}
				maxAbs = max(maxAbs, d)
				sumAbs += d
				sum += float64(v - offset)
			}
			mean := sumAbs / float64(n)
			if maxAbs > 1.6*scale || mean < 0.05*scale {
				t.Errorf("values spread to %.3g (mean |x| %.3g), want about ±%g", maxAbs, mean, scale)
			}
			if m := sum / float64(n); math.Abs(m) > 0.07*scale {
				t.Errorf("values average %.3g, want about 0 (|mean| at most %.3g)", m, 0.07*scale)
			}
		})
	}
	if err := Random(Q4_K, make([]byte, 100), 1, 0, 1); err == nil {
		t.Error("a partial block was accepted")
	}
	if err := Random(Q8_K, make([]byte, Q8_K.BlockBytes()), 1, 0, 1); err == nil {
		t.Error("an unsupported type was accepted")
	}
}
