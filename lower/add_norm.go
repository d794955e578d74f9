package lower

import "reflect"

// Where a layer ends with the residual add (a quantised model's MoE
// layers), the next layer's input norm (or the final norm) follows it: in
// decode two launches of about 2 us each on a few KB. fuseAddNorm makes
// them one (AddRMSNorm, AddRMSNormQ8X). Its invariant:
//
//	an add launch A and the rms_norm launch N right after it (no launch
//	between them; steps between may launch nothing) become one launch at
//	A's place, AddRMSNorm(Q8X) of A's a, b and out and N's other
//	arguments, and N is dropped, only when A is as Elementwise builds it,
//	N as RMSNorm or RMSNormQ8X builds it, N's x is A's out in A's dtype,
//	N's rows*n is A's n, and N's outputs (out and the quantised copy) lie
//	apart from A's a, b and out (AddRMSNorm checks the rest it needs).
//
// Nothing runs between A and N, so the fused launch sees the memory A saw
// and leaves what N left: sum gets add's bits (the same expression) and
// out and the copy the norm's of them (norm.cu). A's place rather than
// N's: after A's step its output is in memory, as the step-by-step check
// (LocateNonFinite) expects; N's step then launches nothing, its outputs
// already written.

// fuseAddNorm fuses adds into the norms reading their sum, in place.
func fuseAddNorm(steps [][]Launch) {
	fusePairs(steps, false, func(a, n Launch, _ []Launch) (Launch, bool) {
		if a.Kernel != "add" {
			return Launch{}, false
		}
		return addNorm(a, n)
	})
}

// addNorm returns the fused launch of a (an add) and n (the launch right
// after it) when the invariant above holds.
func addNorm(a, n Launch) (Launch, bool) {
	if len(a.DTypes) != 1 || !ArgKinds(a.Args, ArgI64, ArgPtr, ArgPtr, ArgPtr) {
		return Launch{}, false
	}
	dt, elems := a.DTypes[0], a.Args[0].Int
	pa, pb, sum := a.Args[1].Ptr(), a.Args[2].Ptr(), a.Args[3].Ptr()
	if want, err := Elementwise("add", dt, int(elems), pa, pb, sum); err != nil || !reflect.DeepEqual(want, a) {
		return Launch{}, false
	}
	m, ok := parseNormOf(n)
	if !ok || m.add || m.x != sum || m.xdt != dt || int64(m.rows)*int64(m.n) != elems {
		return Launch{}, false
	}
	size := elems * int64(dtypeSize(dt))
	outs := []span{{m.out, m.outBytes()}}
	if m.q8x {
		outs = append(outs, span{m.xq, Q8XBytes(m.rows, m.n)})
	}
	for _, o := range outs {
		for _, p := range []Ptr{pa, pb, sum} {
			if overlaps(o.at, o.n, p, size) {
				return Launch{}, false
			}
		}
	}
	var f Launch
	var err error
	if m.q8x {
		f, err = AddRMSNormQ8X(m.xdt, m.odt, sum, m.out, pa, pb, m.w, m.xq, m.rows, m.n, m.eps)
	} else {
		f, err = AddRMSNorm(m.xdt, m.odt, sum, m.out, pa, pb, m.w, m.rows, m.n, m.eps)
	}
	return f, err == nil
}
