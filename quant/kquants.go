package quant

// The k-quants of ggml-common.h: super-blocks of 256 weights in sub-blocks
// of 16 or 32, each with its own quantised scale (and min).
//
//	Q2_K (84 bytes):  scales[16] (low nibble scale, high nibble min), qs[64]
//	                  (2 bits), f16 d, f16 dmin;  w = d*sc*q - dmin*m
//	Q3_K (110 bytes): hmask[32] (bit 2 of q, inverted), qs[64] (bits 0-1),
//	                  scales[12] (16 packed 6-bit scales), f16 d;  w = d*(sc-32)*(q-4 if hmask bit clear)
//	Q4_K (144 bytes): f16 d, f16 dmin, scales[12] (8 packed 6-bit scales and
//	                  mins), qs[128] (4 bits);  w = d*sc*q - dmin*m
//	Q5_K (176 bytes): as Q4_K plus qh[32] (bit 4 of q) before qs
//	Q6_K (210 bytes): ql[128] (bits 0-3), qh[64] (bits 4-5), int8 scales[16],
//	                  f16 d;  w = d*sc*(q-32)
//
// In 2-bit fields, byte l of a 32-byte group holds weights l, l+32, l+64,
// l+96 in bits 0-1, 2-3, 4-5, 6-7; in nibbles, byte l of a 32-byte group
// holds weights l and l+32.

func init() {
	table[Q2_K].dequant, table[Q2_K].quant = dequantQ2K, quantQ2K
	table[Q3_K].dequant, table[Q3_K].quant = dequantQ3K, quantQ3K
	table[Q4_K].dequant, table[Q4_K].quant = dequantQ4K, quantQ4K
	table[Q5_K].dequant, table[Q5_K].quant = dequantQ5K, quantQ5K
	table[Q6_K].dequant, table[Q6_K].quant = dequantQ6K, quantQ6K
}

func dequantQ2K(dst []float32, src []byte) {
	for len(dst) > 0 {
		scales, qs := src[:16], src[16:80]
		d, dmin := f16(src[80:]), f16(src[82:])
		for e := range QK {
			h, s, l := e/128, e/32%4, e%32
			q := qs[32*h+l] >> (2 * s) & 3
			sc := scales[e/16]
			dl, ml := d*float32(sc&0xf), dmin*float32(sc>>4)
			dst[e] = float32(dl*float32(q)) - ml
		}
		dst, src = dst[QK:], src[84:]
	}
}

// q3Scales unpacks Q3_K's 16 6-bit scales (without the offset of 32).
func q3Scales(s []byte) [16]int8 {
	var out [16]int8
	for i := range 16 {
		lo := s[i%8] >> (4 * (i / 8)) & 0xf
		hi := s[8+i%4] >> (2 * (i / 4)) & 3
		out[i] = int8(lo|hi<<4) - 32
	}
	return out
}

func dequantQ3K(dst []float32, src []byte) {
	for len(dst) > 0 {
		hmask, qs := src[:32], src[32:96]
		sc := q3Scales(src[96:108])
		d := f16(src[108:])
		for e := range QK {
			h, s, l := e/128, e/32%4, e%32
			q := int8(qs[32*h+l] >> (2 * s) & 3)
			if hmask[l]>>(e/32)&1 == 0 {
				q -= 4
			}
			dst[e] = d * float32(sc[e/16]) * float32(q)
		}
		dst, src = dst[QK:], src[110:]
	}
}

// k4ScaleMin unpacks sub-block j's 6-bit scale and min of Q4_K and Q5_K
// (get_scale_min_k4).
func k4ScaleMin(j int, s []byte) (sc, m byte) {
	if j < 4 {
		return s[j] & 63, s[j+4] & 63
	}
	return s[j+4]&0xf | (s[j-4]>>6)<<4, s[j+4]>>4 | (s[j]>>6)<<4
}

func dequantQ4K(dst []float32, src []byte) {
	for len(dst) > 0 {
		d, dmin := f16(src), f16(src[2:])
		scales, qs := src[4:16], src[16:144]
		for j := range 8 {
			sc, m := k4ScaleMin(j, scales)
			d1, m1 := d*float32(sc), dmin*float32(m)
			for l := range 32 {
				q := qs[32*(j/2)+l] >> (4 * (j % 2)) & 0xf
				dst[32*j+l] = float32(d1*float32(q)) - m1
			}
		}
		dst, src = dst[QK:], src[144:]
	}
}

func dequantQ5K(dst []float32, src []byte) {
	for len(dst) > 0 {
		d, dmin := f16(src), f16(src[2:])
		scales, qh, qs := src[4:16], src[16:48], src[48:176]
		for j := range 8 {
			sc, m := k4ScaleMin(j, scales)
			d1, m1 := d*float32(sc), dmin*float32(m)
			for l := range 32 {
				q := qs[32*(j/2)+l]>>(4*(j%2))&0xf | (qh[l]>>j&1)<<4
				dst[32*j+l] = float32(d1*float32(q)) - m1
			}
		}
		dst, src = dst[QK:], src[176:]
	}
}

func dequantQ6K(dst []float32, src []byte) {
	for len(dst) > 0 {
		ql, qh, scales := src[:128], src[128:192], src[192:208]
		d := f16(src[208:])
		for e := range QK {
			h, r := e/128, e%128
			lo := ql[64*h+r%64] >> (4 * (r / 64)) & 0xf
			hi := qh[32*h+r%32] >> (2 * (r / 32)) & 3
			q := int8(lo|hi<<4) - 32
			dst[e] = d * float32(int8(scales[e/16])) * float32(q)
		}
		dst, src = dst[QK:], src[210:]
	}
}

// packQ2 stores 2-bit levels L[0:256] as Q2_K and Q3_K do: byte l of the
// 32-byte group h holds L[128h+l], L[128h+l+32], L[128h+l+64], L[128h+l+96].
func packQ2(qs []byte, L []uint8) {
	for j := 0; j < QK; j += 128 {
		for l := range 32 {
			qs[j/4+l] = L[j+l] | L[j+l+32]<<2 | L[j+l+64]<<4 | L[j+l+96]<<6
		}
	}
}

// quantQ2K follows quantize_row_q2_K_ref: make_qkx2_quants per 16 weights
// (weights |x|, absolute error), scales and mins quantised to 4 bits.
func quantQ2K(dst []byte, src []float32) {
	var (
		L              [QK]uint8
		Laux           [16]uint8
		weights        [16]float32
		mins, scales   [QK / 16]float32
		q4scale        = float32(15)
		maxScale, maxM float32
	)
	for len(src) > 0 {
		x, y := src[:QK], dst[:84]
		maxScale, maxM = 0, 0
		for j := range QK / 16 {
			xs := x[16*j : 16*j+16]
			for l, v := range xs {
				weights[l] = abs32(v)
			}
			scales[j] = makeQKX2Quants(3, xs, weights[:], L[16*j:], Laux[:], &mins[j], -0.5, 0.1, 15, true)
			if scales[j] > maxScale {
				maxScale = scales[j]
			}
			if mins[j] > maxM {
				maxM = mins[j]
			}
		}
		sc := y[:16]
		if maxScale > 0 {
			iscale := q4scale / maxScale
			for j := range sc {
				sc[j] = uint8(nearestInt(iscale * scales[j]))
			}
			putF16(y[80:], maxScale/q4scale)
		} else {
			clear(sc)
			putF16(y[80:], 0)
		}
		if maxM > 0 {
			iscale := q4scale / maxM
			for j := range sc {
				sc[j] |= uint8(nearestInt(iscale*mins[j]) << 4)
			}
			putF16(y[82:], maxM/q4scale)
		} else {
			putF16(y[82:], 0)
		}
		d, dmin := f16(y[80:]), f16(y[82:])
		for j := range QK / 16 {
			dl := d * float32(sc[j]&0xf)
			if dl == 0 {
				continue
			}
			dm := dmin * float32(sc[j]>>4)
			for ii := range 16 {
				L[16*j+ii] = uint8(clampInt(nearestInt((x[16*j+ii]+dm)/dl), 0, 3))
			}
		}
		packQ2(y[16:80], L[:])
		src, dst = src[QK:], dst[84:]
	}
}

// quantQ3K follows quantize_row_q3_K_ref: make_q3_quants per 16 weights,
// 6-bit signed scales relative to the largest.
func quantQ3K(dst []byte, src []float32) {
	var (
		L      [QK]int8
		scales [QK / 16]float32
	)
	for len(src) > 0 {
		x, y := src[:QK], dst[:110]
		for j := range QK / 16 {
			scales[j] = makeQ3Quants(4, x[16*j:16*j+16], L[16*j:])
		}
		_, maxScale := absMax(scales[:])
		sc := y[96:108]
		clear(sc)
		if maxScale != 0 {
			iscale := -32 / maxScale
			for j := range QK / 16 {
				l := int8(nearestInt(iscale * scales[j]))
				l = int8(clampInt(int(l), -32, 31) + 32)
				if j < 8 {
					sc[j] = uint8(l) & 0xf
				} else {
					sc[j-8] |= (uint8(l) & 0xf) << 4
				}
				l >>= 4
				sc[j%4+8] |= uint8(l) << (2 * (j / 4))
			}
			putF16(y[108:], 1/iscale)
		} else {
			putF16(y[108:], 0)
		}
		d := f16(y[108:])
		s := q3Scales(sc)
		for j := range QK / 16 {
			dl := d * float32(s[j])
			if dl == 0 {
				continue
			}
			for ii := range 16 {
				L[16*j+ii] = int8(clampInt(nearestInt(x[16*j+ii]/dl), -4, 3) + 4)
			}
		}
		hmask := y[:32]
		clear(hmask)
		var U [QK]uint8
		for j := range QK {
			l := uint8(L[j])
			if l > 3 {
				hmask[j%32] |= 1 << (j / 32)
				l -= 4
			}
			U[j] = l
		}
		packQ2(y[32:96], U[:])
		src, dst = src[QK:], dst[110:]
	}
}

// quantK4Scales fills Q4_K/Q5_K's d, dmin and 12 packed scale bytes from
// the sub-block scales and mins (6 bits each, relative to the largest),
// as quantize_row_q4_K_ref and quantize_row_q5_K_ref do.
func quantK4Scales(y []byte, scales, mins []float32) {
	var maxScale, maxMin float32
	for j := range 8 {
		if scales[j] > maxScale {
			maxScale = scales[j]
		}
		if mins[j] > maxMin {
			maxMin = mins[j]
		}
	}
	var invScale, invMin float32
	if maxScale > 0 {
		invScale = 63 / maxScale
	}
	if maxMin > 0 {
		invMin = 63 / maxMin
	}
	s := y[4:16]
	for j := range 8 {
		ls := min(63, uint8(nearestInt(invScale*scales[j])))
		lm := min(63, uint8(nearestInt(invMin*mins[j])))
		if j < 4 {
			s[j], s[j+4] = ls, lm
		} else {
			s[j+4] = ls&0xf | (lm&0xf)<<4
			s[j-4] |= (ls >> 4) << 6
			s[j] |= (lm >> 4) << 6
		}
	}
	putF16(y, maxScale/63)
	putF16(y[2:], maxMin/63)
}

// quantK4Levels requantises each sub-block of 32 with its stored scale and
// min: levels 0..nmax.
func quantK4Levels(y []byte, x []float32, L []uint8, nmax int) {
	d, dmin := f16(y), f16(y[2:])
	for j := range 8 {
		sc, m := k4ScaleMin(j, y[4:16])
		dl := d * float32(sc)
		if dl == 0 {
			continue
		}
		dm := dmin * float32(m)
		for ii := range 32 {
			L[32*j+ii] = uint8(clampInt(nearestInt((x[32*j+ii]+dm)/dl), 0, nmax))
		}
	}
}

// k4Fit runs make_qkx2_quants on each sub-block of 32 with the weights
// av_x + |x| of quantize_row_q4_K_ref / q5_K_ref.
func k4Fit(x []float32, L, Laux []uint8, scales, mins []float32, nmax int, rmin, rdelta float32, nstep int) {
	var weights [32]float32
	for j := range 8 {
		xs := x[32*j : 32*j+32]
		var sumX2 float32
		for _, v := range xs {
			sumX2 += float32(v * v)
		}
		avX := sqrtf(sumX2 / 32)
		for l, v := range xs {
			weights[l] = avX + abs32(v)
		}
		scales[j] = makeQKX2Quants(nmax, xs, weights[:], L[32*j:], Laux, &mins[j], rmin, rdelta, nstep, false)
	}
}

// quantQ4K follows quantize_row_q4_K_ref.
func quantQ4K(dst []byte, src []float32) {
	var (
		L, Laux      [QK]uint8
		scales, mins [8]float32
	)
	for len(src) > 0 {
		x, y := src[:QK], dst[:144]
		k4Fit(x, L[:], Laux[:], scales[:], mins[:], 15, -1, 0.1, 20)
		quantK4Scales(y, scales[:], mins[:])
		quantK4Levels(y, x, L[:], 15)
		q := y[16:144]
		for j := 0; j < QK; j += 64 {
			for l := range 32 {
				q[j/2+l] = L[j+l] | L[j+l+32]<<4
			}
		}
		src, dst = src[QK:], dst[144:]
	}
}

// quantQ5K follows quantize_row_q5_K_ref.
func quantQ5K(dst []byte, src []float32) {
	var (
		L, Laux      [QK]uint8
		scales, mins [8]float32
	)
	for len(src) > 0 {
		x, y := src[:QK], dst[:176]
		k4Fit(x, L[:], Laux[:], scales[:], mins[:], 31, -0.5, 0.1, 15)
		quantK4Scales(y, scales[:], mins[:])
		quantK4Levels(y, x, L[:], 31)
		qh, ql := y[16:48], y[48:176]
		clear(qh)
		for n := 0; n < QK; n += 64 {
			m1, m2 := uint8(1)<<(n/32), uint8(2)<<(n/32)
			for j := range 32 {
				l1, l2 := L[n+j], L[n+j+32]
				if l1 > 15 {
					l1 -= 16
					qh[j] |= m1
				}
				if l2 > 15 {
					l2 -= 16
					qh[j] |= m2
				}
				ql[n/2+j] = l1 | l2<<4
			}
		}
		src, dst = src[QK:], dst[176:]
	}
}

// quantQ6K follows quantize_row_q6_K_ref: make_qx_quants per 16 weights,
// int8 scales relative to the largest.
func quantQ6K(dst []byte, src []float32) {
	var (
		L      [QK]int8
		scales [QK / 16]float32
	)
	for len(src) > 0 {
		x, y := src[:QK], dst[:210]
		for ib := range QK / 16 {
			scales[ib] = makeQXQuants(32, x[16*ib:16*ib+16], L[16*ib:])
		}
		maxAbs, maxScale := absMax(scales[:])
		if maxAbs < groupMaxEps {
			clear(y)
			src, dst = src[QK:], dst[210:]
			continue
		}
		iscale := -128 / maxScale
		putF16(y[208:], 1/iscale)
		sc := y[192:208]
		for ib := range sc {
			sc[ib] = uint8(int8(min(127, nearestInt(iscale*scales[ib]))))
		}
		d := f16(y[208:])
		for j := range QK / 16 {
			dl := d * float32(int8(sc[j]))
			if dl == 0 {
				continue
			}
			for ii := range 16 {
				L[16*j+ii] = int8(clampInt(nearestInt(x[16*j+ii]/dl), -32, 31) + 32)
			}
		}
		ql, qh := y[:128], y[128:192]
		for j := 0; j < QK; j += 128 {
			for l := range 32 {
				q1, q2 := uint8(L[j+l]), uint8(L[j+l+32])
				q3, q4 := uint8(L[j+l+64]), uint8(L[j+l+96])
				ql[j/2+l] = q1&0xf | (q3&0xf)<<4
				ql[j/2+l+32] = q2&0xf | (q4&0xf)<<4
				qh[j/4+l] = q1>>4 | (q2>>4)<<2 | (q3>>4)<<4 | (q4>>4)<<6
			}
		}
		src, dst = src[QK:], dst[210:]
	}
}
