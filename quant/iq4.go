package quant

import "encoding/binary"

// The non-linear 4-bit types: a nibble indexes kvaluesIQ4NL.
//
//	IQ4_NL (18 bytes, 32 weights): f16 d, 16 bytes of nibbles (as Q4_0); w = d*k[q]
//	IQ4_XS (136 bytes, 256 weights): f16 d, u16 scales_h, 4 bytes scales_l,
//	  128 bytes of nibbles; sub-block i of 32 has the 6-bit scale
//	  (scales_l nibble i) | (scales_h bits 2i..2i+1) << 4, minus 32.

var kvaluesIQ4NL = [16]int8{-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}

func init() {
	table[IQ4_NL].dequant, table[IQ4_NL].quant = dequantIQ4NL, quantIQ4NL
	table[IQ4_XS].dequant, table[IQ4_XS].quant = dequantIQ4XS, quantIQ4XS
}

func dequantIQ4NL(dst []float32, src []byte) {
	for len(dst) > 0 {
		d := f16(src)
		for j, b := range src[2:18] {
			dst[j] = d * float32(kvaluesIQ4NL[b&0xf])
			dst[j+16] = d * float32(kvaluesIQ4NL[b>>4])
		}
		dst, src = dst[32:], src[18:]
	}
}

func dequantIQ4XS(dst []float32, src []byte) {
	for len(dst) > 0 {
		d := f16(src)
		sh := binary.LittleEndian.Uint16(src[2:])
		for ib := range 8 {
			ls := int(src[4+ib/2]>>(4*(ib%2))&0xf) | int(sh>>(2*ib)&3)<<4
			dl := d * float32(ls-32)
			qs := src[8+16*ib : 8+16*ib+16]
			y := dst[32*ib:]
			for j, b := range qs {
				y[j] = dl * float32(kvaluesIQ4NL[b&0xf])
				y[j+16] = dl * float32(kvaluesIQ4NL[b>>4])
			}
		}
		dst, src = dst[QK:], src[136:]
	}
}

// iq4Mid2 holds twice the midpoints between neighbouring levels:
// iq4Mid2[j] = k[j-1] + k[j], exact in float32.
var iq4Mid2 = func() (m [16]float32) {
	for j := 1; j < 16; j++ {
		m[j] = float32(int(kvaluesIQ4NL[j-1]) + int(kvaluesIQ4NL[j]))
	}
	return m
}()

// bestIndexIQ4 is best_index_int8 over kvaluesIQ4NL: the nearest level,
// the upper one at an exact midpoint (a branch-free binary search on 2x).
func bestIndexIQ4(x float32) int {
	x2 := x + x
	idx := 0
	for step := 8; step > 0; step >>= 1 {
		if x2 >= iq4Mid2[idx+step] {
			idx += step
		}
	}
	return idx
}

// iq4Fit is quantize_row_iq4_nl_impl's search for one block of 32 without
// an importance matrix (weights x²), with llama-quantize's ntry = 7: the
// scale d and the levels L.
func iq4Fit(xb []float32, L []uint8) float32 {
	amax, vmax := absMax(xb)
	if amax < groupMaxEps {
		clear(L[:32])
		return 0
	}
	const ntry = 7
	v0 := float32(kvaluesIQ4NL[0])
	d := -vmax / v0
	id := 1 / d
	var sumqx, sumq2 float32
	for j, v := range xb {
		l := bestIndexIQ4(id * v)
		L[j] = uint8(l)
		q, w := float32(kvaluesIQ4NL[l]), v*v
		sumqx += float32(w * q * v)
		sumq2 += float32(w * q * q)
	}
	d = 0
	if sumq2 > 0 {
		d = sumqx / sumq2
	}
	best := d * sumqx
	for itry := -ntry; itry <= ntry; itry++ {
		id = float32(itry+int(kvaluesIQ4NL[0])) / vmax
		sumqx, sumq2 = 0, 0
		for _, v := range xb {
			q, w := float32(kvaluesIQ4NL[bestIndexIQ4(id*v)]), v*v
			sumqx += float32(w * q * v)
			sumq2 += float32(w * q * q)
		}
		if sumq2 > 0 && sumqx*sumqx > best*sumq2 {
			d = sumqx / sumq2
			best = d * sumqx
		}
	}
	return d
}

// packIQ4 stores 32 levels as nibbles: byte j holds L[j] and L[j+16].
func packIQ4(q []byte, L []uint8) {
	for j := range 16 {
		q[j] = L[j] | L[j+16]<<4
	}
}

// quantIQ4NL follows quantize_iq4_nl (what llama-quantize runs) without an
// importance matrix.
func quantIQ4NL(dst []byte, src []float32) {
	var L [32]uint8
	for len(src) > 0 {
		x := src[:32]
		d := iq4Fit(x, L[:])
		putF16(dst, d)
		id := inverse(d)
		for j, v := range x {
			L[j] = uint8(bestIndexIQ4(id * v))
		}
		packIQ4(dst[2:18], L[:])
		dst, src = dst[18:], src[32:]
	}
}

// quantIQ4XS follows quantize_iq4_xs without an importance matrix: a scale
// per block of 32, quantised to 6 bits relative to the largest.
func quantIQ4XS(dst []byte, src []float32) {
	var (
		L      [QK]uint8
		scales [8]float32
	)
	for len(src) > 0 {
		x, y := src[:QK], dst[:136]
		for ib := range 8 {
			scales[ib] = iq4Fit(x[32*ib:32*ib+32], L[32*ib:])
		}
		_, maxScale := absMax(scales[:])
		d := -maxScale / 32
		putF16(y, d)
		id := inverse(d)
		var sh uint16
		sl := y[4:8]
		for ib := range 8 {
			l := clampInt(nearestInt(id*scales[ib]), -32, 31)
			idl := inverse(d * float32(l))
			for j, v := range x[32*ib : 32*ib+32] {
				L[32*ib+j] = uint8(bestIndexIQ4(idl * v))
			}
			l += 32
			if ib%2 == 0 {
				sl[ib/2] = uint8(l & 0xf)
			} else {
				sl[ib/2] |= uint8(l&0xf) << 4
			}
			sh |= uint16(l>>4) << (2 * ib)
		}
		binary.LittleEndian.PutUint16(y[2:], sh)
		for ib := range 8 {
			packIQ4(y[8+16*ib:], L[32*ib:])
		}
		src, dst = src[QK:], dst[136:]
	}
}
