package quant

import (
	"math/rand/v2"
	"testing"
)

// go test ./quant -run - -bench . : throughput of every conversion, in
// float32 elements per second (MB/s counts 4 bytes per element).
func BenchmarkQuantize(b *testing.B) { benchConvert(b, true) }

func BenchmarkDequantize(b *testing.B) { benchConvert(b, false) }

func benchConvert(b *testing.B, quantize bool) {
	r := rand.New(rand.NewPCG(1, 1))
	x := make([]float32, 1<<16)
	for i := range x {
		x[i] = float32(r.NormFloat64()) * 0.02
	}
	for _, name := range Names() {
		t, _ := ParseType(name)
		if quantize && !t.CanQuantize() {
			continue
		}
		n, _ := t.RowBytes(len(x))
		q := make([]byte, n)
		if err := Quantize(t, q, x); err != nil {
			b.Fatal(err)
		}
		y := make([]float32, len(x))
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(4 * len(x)))
			for b.Loop() {
				if quantize {
					_ = Quantize(t, q, x)
				} else {
					_ = Dequantize(t, y, q)
				}
			}
		})
	}
}
