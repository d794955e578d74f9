package quant

import (
	"encoding/binary"
	"math"
)

// The 32-weight block types of ggml-common.h. Nibbles: byte j holds weight
// j in its low four bits and weight j+16 in its high four bits.
//
//	Q4_0 (18 bytes): f16 d, 16 bytes of nibbles;          w = d*(q-8)
//	Q4_1 (20 bytes): f16 d, f16 m, 16 bytes of nibbles;   w = d*q + m
//	Q5_0 (22 bytes): f16 d, u32 qh, 16 bytes of nibbles;  w = d*(q-16), bit 4 of q from qh
//	Q5_1 (24 bytes): f16 d, f16 m, u32 qh, nibbles;       w = d*q + m

func init() {
	table[Q4_0].dequant, table[Q4_0].quant = dequantQ4_0, quantQ4_0
	table[Q4_1].dequant, table[Q4_1].quant = dequantQ4_1, quantQ4_1
	table[Q5_0].dequant, table[Q5_0].quant = dequantQ5_0, quantQ5_0
	table[Q5_1].dequant, table[Q5_1].quant = dequantQ5_1, quantQ5_1
}

func dequantQ4_0(dst []float32, src []byte) {
	for len(dst) > 0 {
		d := f16(src)
		for j, b := range src[2:18] {
			dst[j] = d * float32(int(b&0xf)-8)
			dst[j+16] = d * float32(int(b>>4)-8)
		}
		dst, src = dst[32:], src[18:]
	}
}

func dequantQ4_1(dst []float32, src []byte) {
	for len(dst) > 0 {
		d, m := f16(src), f16(src[2:])
		for j, b := range src[4:20] {
			dst[j] = float32(d*float32(b&0xf)) + m
			dst[j+16] = float32(d*float32(b>>4)) + m
		}
		dst, src = dst[32:], src[20:]
	}
}

func dequantQ5_0(dst []float32, src []byte) {
	for len(dst) > 0 {
		d := f16(src)
		qh := binary.LittleEndian.Uint32(src[2:])
		for j, b := range src[6:22] {
			lo := int(b&0xf) | int(qh>>j&1)<<4
			hi := int(b>>4) | int(qh>>(j+16)&1)<<4
			dst[j] = d * float32(lo-16)
			dst[j+16] = d * float32(hi-16)
		}
		dst, src = dst[32:], src[22:]
	}
}

func dequantQ5_1(dst []float32, src []byte) {
	for len(dst) > 0 {
		d, m := f16(src), f16(src[2:])
		qh := binary.LittleEndian.Uint32(src[4:])
		for j, b := range src[8:24] {
			lo := b&0xf | byte(qh>>j&1)<<4
			hi := b>>4 | byte(qh>>(j+16)&1)<<4
			dst[j] = float32(d*float32(lo)) + m
			dst[j+16] = float32(d*float32(hi)) + m
		}
		dst, src = dst[32:], src[24:]
	}
}

// absMax returns the largest magnitude and the element that has it (the
// first of equals), as ggml's quantisers find them.
func absMax(x []float32) (amax, vmax float32) {
	for _, v := range x {
		if ax := abs32(v); ax > amax {
			amax, vmax = ax, v
		}
	}
	return amax, vmax
}

// minMax returns the smallest and largest element, starting from ±FLT_MAX
// as quantize_row_q4_1_ref and q5_1_ref do.
func minMax(x []float32) (lo, hi float32) {
	lo, hi = math.MaxFloat32, -math.MaxFloat32
	for _, v := range x {
		if v < lo {
			lo = v
		}
		if v > hi {
			hi = v
		}
	}
	return lo, hi
}

// inverse is C's `d ? 1.0f/d : 0.0f`.
func inverse(d float32) float32 {
	if d != 0 {
		return 1 / d
	}
	return 0
}

// quantQ4_0 follows quantize_row_q4_0_ref: d = max/-8, q = trunc(x/d + 8.5).
func quantQ4_0(dst []byte, src []float32) {
	for len(src) > 0 {
		x := src[:32]
		_, vmax := absMax(x)
		d := vmax / -8
		id := inverse(d)
		putF16(dst, d)
		for j := range 16 {
			q0 := min(15, int8(float32ToInt(float32(x[j]*id)+8.5)))
			q1 := min(15, int8(float32ToInt(float32(x[j+16]*id)+8.5)))
			dst[2+j] = uint8(q0) | uint8(q1)<<4
		}
		dst, src = dst[18:], src[32:]
	}
}

// quantQ4_1 follows quantize_row_q4_1_ref: d = (max-min)/15, m = min.
func quantQ4_1(dst []byte, src []float32) {
	for len(src) > 0 {
		x := src[:32]
		lo, hi := minMax(x)
		d := (hi - lo) / 15
		id := inverse(d)
		putF16(dst, d)
		putF16(dst[2:], lo)
		for j := range 16 {
			q0 := min(15, int8(float32ToInt(float32((x[j]-lo)*id)+0.5)))
			q1 := min(15, int8(float32ToInt(float32((x[j+16]-lo)*id)+0.5)))
			dst[4+j] = uint8(q0) | uint8(q1)<<4
		}
		dst, src = dst[20:], src[32:]
	}
}

// quantQ5_0 follows quantize_row_q5_0_ref: d = max/-16, q = trunc(x/d + 16.5).
func quantQ5_0(dst []byte, src []float32) {
	for len(src) > 0 {
		x := src[:32]
		_, vmax := absMax(x)
		d := vmax / -16
		id := inverse(d)
		putF16(dst, d)
		var qh uint32
		for j := range 16 {
			q0 := uint8(min(31, int8(float32ToInt(float32(x[j]*id)+16.5))))
			q1 := uint8(min(31, int8(float32ToInt(float32(x[j+16]*id)+16.5))))
			dst[6+j] = q0&0xf | (q1&0xf)<<4
			qh |= uint32(q0&0x10)>>4<<j | uint32(q1&0x10)>>4<<(j+16)
		}
		binary.LittleEndian.PutUint32(dst[2:], qh)
		dst, src = dst[22:], src[32:]
	}
}

// quantQ5_1 follows quantize_row_q5_1_ref: d = (max-min)/31, m = min.
func quantQ5_1(dst []byte, src []float32) {
	for len(src) > 0 {
		x := src[:32]
		lo, hi := minMax(x)
		d := (hi - lo) / 31
		id := inverse(d)
		putF16(dst, d)
		putF16(dst[2:], lo)
		var qh uint32
		for j := range 16 {
			q0 := uint8(float32ToInt(float32((x[j]-lo)*id) + 0.5))
			q1 := uint8(float32ToInt(float32((x[j+16]-lo)*id) + 0.5))
			dst[8+j] = q0&0xf | (q1&0xf)<<4
			qh |= uint32(q0&0x10)>>4<<j | uint32(q1&0x10)>>4<<(j+16)
		}
		binary.LittleEndian.PutUint32(dst[4:], qh)
		dst, src = dst[24:], src[32:]
	}
}
