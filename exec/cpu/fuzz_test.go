package cpu

import (
	"math"
	"testing"

	"lagc/prep"
)

// FuzzKernelShapes calls every kernel with dimensions and slice lengths that
// need not agree: each must return an error or succeed, never panic.
func FuzzKernelShapes(f *testing.F) {
	f.Add(int16(2), int16(3), int16(4), int16(2), uint8(8), uint8(24), uint8(6), uint8(8), int32(0))
	f.Add(int16(1), int16(8), int16(8), int16(1), uint8(8), uint8(8), uint8(8), uint8(8), int32(7))
	f.Add(int16(-1), int16(0), int16(3), int16(2), uint8(0), uint8(3), uint8(255), uint8(1), int32(-5))
	f.Add(int16(3), int16(2), int16(2), int16(3), uint8(12), uint8(12), uint8(4), uint8(6), int32(1<<30))
	f.Add(int16(32767), int16(32767), int16(32767), int16(32767), uint8(1), uint8(1), uint8(1), uint8(1), int32(math.MaxInt32))
	f.Fuzz(func(t *testing.T, a, b, c, d int16, la, lb, lc, ld uint8, p int32) {
		A, B, C, D := int(a), int(b), int(c), int(d)
		x := randSlice(1, int(la), 1)
		y := randSlice(2, int(lb), 1)
		z := randSlice(3, int(lc), 1)
		w := randSlice(4, int(ld), 1)
		ids := make([]int32, int(lc))
		for i := range ids {
			ids[i] = p + int32(i)
		}
		_ = MatMul(x, y, z, A, B, C)
		_ = RMSNorm(x, y, z, A, B, 1e-6)
		_ = Embedding(x, ids, y, A, B)
		_ = ArgMax(ids, x, A, B)
		_ = SoftplusGate(x, y, z, A, B, C, D)
		_ = RouterTopK(x, ids, y, z, A, B, C, 1, 1)
		_ = RouterTopK(x, ids, y, nil, A, B, C, 0, 1)
		_ = MoEExperts(x, y, z, ids, w, w, w, A, B, C, D, 1)
		_ = Concat(x, [][]float32{y, z}, A, []int{B, C})
		_ = Split([][]float32{y, z}, x, A, []int{B, C})
		_ = SiLU(x, y)
		_ = Mul(x, y, z)
		_ = Add(x, y, z)
		if tab, err := prep.NewRopeTable(prep.RopeParams{RotaryDim: C, Theta: float64(D) * 100, Type: "yarn", Factor: float64(B), OriginalContext: A}); err == nil {
			_ = RoPE(x, y, ids, A, B, C, tab)
		}
		if cache, err := NewKVCache(C, D, B&7, A&1023); err == nil {
			_ = Attention(x, y, z, w, ids, A, B, C, D, B&7, 0.5, cache)
			_ = Attention(x, y, z, w, ids, A, B, C, D, B&7, 0.5, cache)
		}
		if s, err := NewSampler(SamplerConfig{Temperature: float64(A) / 10, TopK: B, TopP: float64(la) / 255, MinP: float64(lb) / 512, RepetitionPenalty: float64(lc) / 100}); err == nil {
			_, _ = s.Sample(x, ids)
		}
	})
}
