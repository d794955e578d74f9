package quant

import (
	"encoding/binary"
	"math"
	"testing"
)

// FuzzDequantize feeds arbitrary types, lengths and bytes: Dequantize,
// Quantize and DotRow either succeed or return an error, never panic;
// Dequantize succeeds exactly when the sizes fit a supported type, and what
// Quantize writes dequantises.
func FuzzDequantize(f *testing.F) {
	f.Add(uint32(Q8_0), uint16(32), make([]byte, 34))
	f.Add(uint32(Q4_K), uint16(256), make([]byte, 144))
	f.Add(uint32(F16), uint16(3), []byte{1, 2, 3, 4, 5, 6})
	f.Add(uint32(IQ4_XS), uint16(255), make([]byte, 136))
	f.Add(uint32(1<<31), uint16(0), []byte{})
	f.Fuzz(func(t *testing.T, typ uint32, n uint16, src []byte) {
		ty := Type(typ)
		dst := make([]float32, n)
		err := Dequantize(ty, dst, src)
		want, e := ty.RowBytes(int(n))
		if fits := e == nil && want == int64(len(src)) && ty.Supported(); fits != (err == nil) {
			t.Fatalf("Dequantize(%s, %d elements, %d bytes): %v; RowBytes = %d, %v", ty, n, len(src), err, want, e)
		}
		// Any float32 bit pattern, NaNs and infinities included.
		x := make([]float32, n)
		for i := range x {
			if 4*i+4 <= len(src) {
				x[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
			}
		}
		_, _ = DotRow(ty, src, x)
		buf := make([]byte, len(src))
		if err := Quantize(ty, buf, x); err == nil {
			back := make([]float32, n)
			if err := Dequantize(ty, back, buf); err != nil {
				t.Fatalf("%s: quantised bytes do not dequantise: %v", ty, err)
			}
		}
	})
}
