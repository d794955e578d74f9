package quant

import "math"

// Helpers of ggml-quants.c's reference quantisers. The arithmetic is
// float32 operation by operation, as C evaluates it; explicit float32()
// conversions around products that are then added keep the Go compiler
// from fusing them into FMAs (it may on arm64), which would change results.

// groupMaxEps is GROUP_MAX_EPS: a group whose largest magnitude is below it
// is all zeros.
const groupMaxEps = 1e-15

// nearestInt is ggml's nearest_int: round to nearest, ties to even, by
// adding 1.5*2^23 (valid for |f| <= 4194303; other inputs give ggml's
// garbage, deterministically).
func nearestInt(f float32) int {
	v := float32(f) + 12582912
	return int(math.Float32bits(v)&0x007fffff) - 0x00400000
}

// clampInt is MAX(lo, MIN(hi, v)).
func clampInt(v, lo, hi int) int { return max(lo, min(hi, v)) }

// sqrtf is C's sqrtf; rounding the float64 root to float32 is exact.
func sqrtf(x float32) float32 { return float32(math.Sqrt(float64(x))) }

// float32ToInt is C's conversion of a float to an integer type: truncation
// through a 32-bit integer, as x86's cvttss2si does.
func float32ToInt(x float32) int32 { return int32(x) }

// makeQXQuants is make_qx_quants with rmse_type 1 and no importance
// weights (w = x²): the symmetric scale for levels -nmax..nmax-1 (stored
// as L + nmax) that maximises the weighted fit, searched over 19 scales.
func makeQXQuants(nmax int, x []float32, L []int8) float32 {
	amax, vmax := absMax(x)
	if amax < groupMaxEps {
		clear(L[:len(x)])
		return 0
	}
	iscale := float32(-nmax) / vmax
	var sumlx, suml2 float32
	for i, v := range x {
		l := clampInt(nearestInt(iscale*v), -nmax, nmax-1)
		L[i] = int8(l + nmax)
		w, fl := v*v, float32(l)
		sumlx += float32(w * v * fl)
		suml2 += float32(w * fl * fl)
	}
	var scale float32
	if suml2 != 0 {
		scale = sumlx / suml2
	}
	best := scale * sumlx
	for is := -9; is <= 9; is++ {
		if is == 0 {
			continue
		}
		iscale = -(float32(nmax) + float32(0.1*float32(is))) / vmax
		sumlx, suml2 = 0, 0
		for _, v := range x {
			l := clampInt(nearestInt(iscale*v), -nmax, nmax-1)
			w, fl := v*v, float32(l)
			sumlx += float32(w * v * fl)
			suml2 += float32(w * fl * fl)
		}
		if suml2 > 0 && sumlx*sumlx > best*suml2 {
			for i, v := range x {
				L[i] = int8(nmax + clampInt(nearestInt(iscale*v), -nmax, nmax-1))
			}
			scale = sumlx / suml2
			best = scale * sumlx
		}
	}
	return scale
}

// makeQ3Quants is make_q3_quants with do_rmse: levels -nmax..nmax-1 (stored
// as L + nmax), refined element by element for up to five rounds.
func makeQ3Quants(nmax int, x []float32, L []int8) float32 {
	amax, vmax := absMax(x)
	if amax < groupMaxEps {
		clear(L[:len(x)])
		return 0
	}
	iscale := float32(-nmax) / vmax
	var sumlx, suml2 float32
	for i, v := range x {
		l := clampInt(nearestInt(iscale*v), -nmax, nmax-1)
		L[i] = int8(l)
		w, fl := v*v, float32(l)
		sumlx += float32(w * v * fl)
		suml2 += float32(w * fl * fl)
	}
	for range 5 {
		changed := 0
		for i, v := range x {
			w := v * v
			fli := float32(L[i])
			slx := sumlx - float32(w*v*fli)
			if slx > 0 {
				sl2 := suml2 - float32(w*fli*fli)
				nl := clampInt(nearestInt(v*sl2/slx), -nmax, nmax-1)
				if nl != int(L[i]) {
					fn := float32(nl)
					slx += float32(w * v * fn)
					sl2 += float32(w * fn * fn)
					if sl2 > 0 && slx*slx*suml2 > sumlx*sumlx*sl2 {
						L[i] = int8(nl)
						sumlx, suml2 = slx, sl2
						changed++
					}
				}
			}
		}
		if changed == 0 {
			break
		}
	}
	for i := range x {
		L[i] += int8(nmax)
	}
	if suml2 > 0 {
		return sumlx / suml2
	}
	return 0
}

// makeQKX2Quants is make_qkx2_quants: an asymmetric fit x ≈ scale*L - min
// with levels 0..nmax, searched over nstep+1 scales by weighted least
// squares (use_mad: weighted absolute error instead). It returns the scale
// and stores -min (>= 0) in *theMin.
func makeQKX2Quants(nmax int, x, weights []float32, L, Laux []uint8, theMin *float32,
	rmin, rdelta float32, nstep int, useMad bool) float32 {
	n := len(x)
	vmin, vmax := x[0], x[0]
	sumW := weights[0]
	sumX := sumW * x[0]
	for i := 1; i < n; i++ {
		if x[i] < vmin {
			vmin = x[i]
		}
		if x[i] > vmax {
			vmax = x[i]
		}
		w := weights[i]
		sumW += w
		sumX += float32(w * x[i])
	}
	if vmin > 0 {
		vmin = 0
	}
	if vmax == vmin {
		clear(L[:n])
		*theMin = -vmin
		return 0
	}
	errOf := func(diff float32) float32 {
		if useMad {
			return abs32(diff)
		}
		return diff * diff
	}
	iscale := float32(nmax) / (vmax - vmin)
	scale := 1 / iscale
	var bestError float32
	for i := range n {
		l := nearestInt(iscale * (x[i] - vmin))
		L[i] = uint8(clampInt(l, 0, nmax))
		diff := float32(float32(scale*float32(L[i]))+vmin) - x[i]
		bestError += float32(weights[i] * errOf(diff))
	}
	if nstep < 1 {
		*theMin = -vmin
		return scale
	}
	for is := 0; is <= nstep; is++ {
		iscale = (float32(rmin+float32(rdelta*float32(is))) + float32(nmax)) / (vmax - vmin)
		var sumL, sumL2, sumXL float32
		for i := range n {
			l := clampInt(nearestInt(iscale*(x[i]-vmin)), 0, nmax)
			Laux[i] = uint8(l)
			w, fl := weights[i], float32(l)
			sumL += float32(w * fl)
			sumL2 += float32(w * fl * fl)
			sumXL += float32(w * fl * x[i])
		}
		D := float32(sumW*sumL2) - float32(sumL*sumL)
		if D > 0 {
			thisScale := (float32(sumW*sumXL) - float32(sumX*sumL)) / D
			thisMin := (float32(sumL2*sumX) - float32(sumL*sumXL)) / D
			if thisMin > 0 {
				thisMin = 0
				thisScale = sumXL / sumL2
			}
			var curError float32
			for i := range n {
				diff := float32(float32(thisScale*float32(Laux[i]))+thisMin) - x[i]
				curError += float32(weights[i] * errOf(diff))
			}
			if curError < bestError {
				copy(L[:n], Laux[:n])
				bestError = curError
				scale, vmin = thisScale, thisMin
			}
		}
	}
	*theMin = -vmin
	return scale
}
