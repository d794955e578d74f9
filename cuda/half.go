package cuda

import "math"

// F32ToF16 rounds f to the nearest IEEE binary16 (ties to even), as the
// device's cvt.rn.f16.f32 does. Overflow gives infinity; NaN stays NaN.
func F32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23) & 0xff
	mant := b & 0x7fffff
	switch {
	case exp == 0xff: // Inf or NaN
		if mant != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	case exp-127 > 15: // too large
		return sign | 0x7c00
	case exp-127 >= -14: // normal
		e := uint32(exp - 127 + 15)
		m := mant >> 13
		rest := mant & 0x1fff
		h := e<<10 | m
		if rest > 0x1000 || (rest == 0x1000 && m&1 == 1) {
			h++ // may carry into the exponent, and to infinity: both correct
		}
		return sign | uint16(h)
	default: // subnormal or zero in f16
		if exp < 127-25 {
			return sign // rounds to zero (below half the smallest subnormal)
		}
		m := mant | 0x800000
		shift := uint32(-(exp - 127) - 14 + 13) // 14..24
		h := m >> shift
		rest := m & (1<<shift - 1)
		half := uint32(1) << (shift - 1)
		if rest > half || (rest == half && h&1 == 1) {
			h++
		}
		return sign | uint16(h)
	}
}

// F16ToF32 widens an IEEE binary16 exactly.
func F16ToF32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case exp == 0:
		if mant == 0 {
			return math.Float32frombits(sign)
		}
		f := float32(mant) / (1 << 24) // subnormal: mant * 2^-24
		if sign != 0 {
			return -f
		}
		return f
	default:
		return math.Float32frombits(sign | (exp+112)<<23 | mant<<13)
	}
}

// F32ToBF16 rounds f to bfloat16 (ties to even), as cvt.rn.bf16.f32 does.
func F32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 { // NaN: keep it quiet and a NaN
		return uint16(b>>16) | 0x40
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// BF16ToF32 widens a bfloat16 exactly.
func BF16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }
