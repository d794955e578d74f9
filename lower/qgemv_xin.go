package lower

import (
	"reflect"
	"strings"

	"lagc/quant"
)

// The shared expert's down projection of a MoE layer quantises its input
// (the gate+up GEMV's 1024 SwiGLU values in Laguna-S-2.1) in a launch of
// its own, about 2 us of a decode step that is latency-bound.
// fuseQGEMVXIn lets the GEMV quantise it in every block (QGEMVXIn). Its
// invariant:
//
//	a q8x_quantize launch Q is dropped, and the qgemv launch G right after
//	it becomes QGEMVXIn of G's arguments and Q's source x, only when G is
//	as QGEMV builds it, Q is exactly Q8XQuantize of x [T, K] into G's
//	copy (its XQ, T and K), T*K <= QGEMVXInMax, G's output lies apart
//	from x, and no later launch of the stream may read any byte of the
//	copy before a launch that rewrites all of it (laterReadsCopy).
//
// The fused kernel quantises x with q8x_group, as Q does, reading x where
// Q would have (right before G), and runs G's dot loop and epilogue on
// those bytes (cuda/kernels/quant.cu): y gets G's bits. What differs
// afterwards is the copy's workspace bytes alone, no longer written:
// G' does not read them, and by the last condition nothing after it reads
// them before they are rewritten. A launch is taken to read from each of
// its workspace pointers onwards, so any workspace pointer below the
// copy's end counts as a read; that also keeps copies other launches
// reuse (reuseQ8X) and those moved into norms or attentions
// (fuseNormQ8X, fuseAttnQ8X) from being dropped. A later quantisation the
// scan stopped at may be dropped by this pass in turn: its own scan then
// covers this copy too, which lies inside what it writes. The workspace
// holds nothing from one run of a schedule to the next, so the stream's
// end ends the scan.

// fuseQGEMVXIn fuses quantisations of small activations into the qgemv
// reading them.
func fuseQGEMVXIn(steps [][]Launch) {
	fusePairs(steps, true, func(q, g Launch, rest []Launch) (Launch, bool) {
		if q.Kernel != "q8x_quantize" || g.Kernel != "qgemv" {
			return Launch{}, false
		}
		f, cp, ok := qgemvWithQ8X(q, g)
		return f, ok && !laterReadsCopy(rest, cp)
	})
}

// parseQGEMV reads a qgemv launch's arguments; it fails unless QGEMV builds
// exactly that launch from them.
func parseQGEMV(l Launch) (QGEMVArgs, bool) {
	if l.Kernel != "qgemv" || len(l.DTypes) != 1 || len(l.Ints) != 5 ||
		!ArgKinds(l.Args, ArgI32, ArgI32, ArgI64, ArgI64, ArgPtr, ArgPtr, ArgPtr, ArgPtr, ArgI32) {
		return QGEMVArgs{}, false
	}
	g := qgemvArgsOf(l, 7)
	g.XQ = l.Args[5].Ptr()
	want, err := QGEMV(g)
	return g, err == nil && reflect.DeepEqual(want, l)
}

// qgemvArgsOf is the QGEMVArgs of a qgemv or qgemv_xin launch whose
// arguments are N, K, rows, row0, w, then the activations, y at index yAt
// and the accumulate flag after it (the activations left unset).
func qgemvArgsOf(l Launch, yAt int) QGEMVArgs {
	a := l.Args
	return QGEMVArgs{T: int(l.Ints[1]), K: int(a[1].Int), N: int(a[0].Int), W: a[4].Ptr(), Y: a[yAt].Ptr(),
		WType: quant.Type(l.Ints[0]), WRows: int(a[2].Int), Row0: int(a[3].Int), YType: l.DTypes[0], SwiGLU: l.Ints[2] == 1,
		Accumulate: a[yAt+1].Int == 1, RowsPerWarp: int(l.Ints[3]), Split: int(l.Ints[4])}
}

// qgemvWithQ8X returns g (a qgemv launch) quantising its activations
// itself from q's source, and the bytes of the copy g read (its int8
// values, then its scales), when q writes exactly that copy and QGEMVXIn
// takes it.
func qgemvWithQ8X(q, g Launch) (Launch, [2]span, bool) {
	a, ok := parseQGEMV(g)
	if !ok || len(q.Args) != 4 || q.Args[1].Kind != ArgPtr || len(q.DTypes) != 1 {
		return Launch{}, [2]span{}, false
	}
	x, xType := q.Args[1].Ptr(), q.DTypes[0]
	want, err := Q8XQuantize(xType, x, a.XQ, a.T, a.K)
	if err != nil || !reflect.DeepEqual(want, q) {
		return Launch{}, [2]span{}, false
	}
	f, err := QGEMVXIn(a, x, xType)
	return f, q8xCopy(q), err == nil
}

// q8xCopy is what a q8x_quantize launch (groups, x, xq, scales) writes:
// 32 int8 values a group at xq, 16 bytes a group at scales.
func q8xCopy(q Launch) [2]span {
	groups := q.Args[0].Int
	return [2]span{{q.Args[2].Ptr(), 32 * groups}, {q.Args[3].Ptr(), 16 * groups}}
}

// laterReadsCopy reports whether a launch of rest may read a byte of the
// copy c before a launch rewrites all of it (rewritesCopy): whether one has
// a pointer into c's region below c's end.
func laterReadsCopy(rest []Launch, c [2]span) bool {
	end := max(c[0].at.Offset+c[0].n, c[1].at.Offset+c[1].n)
	for _, l := range rest {
		if rewritesCopy(l, c) {
			return false
		}
		for _, a := range l.Args {
			if (a.Kind == ArgPtr || a.Kind == ArgTMap) && a.Base == c[0].at.Base && a.Offset < end {
				return true
			}
		}
	}
	return false
}

// rewritesCopy reports whether l is a quantisation (q8x_quantize, or a
// norm fused with one as RMSNormQ8X builds it) that writes every byte of c
// and reads none.
func rewritesCopy(l Launch, c [2]span) bool {
	q := l
	switch l.Kernel {
	case "q8x_quantize":
	case "rms_norm_block_q8x", "rms_norm_warp_q8x":
		norm, nq, ok := splitNormQ8X(l)
		if !ok {
			return false
		}
		m, _ := parseNorm(norm)
		for _, s := range c {
			if overlaps(m.x, int64(m.rows)*int64(m.n)*int64(dtypeSize(m.xdt)), s.at, s.n) {
				return false
			}
		}
		q = nq
	default:
		return false
	}
	x, xn, ok := q8xSource(q)
	if !ok {
		return false
	}
	w := q8xCopy(q)
	for _, s := range c {
		if overlaps(x, xn, s.at, s.n) || !covered(s, w[:]) {
			return false
		}
	}
	return true
}

// splitNormQ8X splits a norm fused with a quantisation into the norm and
// the quantisation it stands for; it fails unless RMSNormQ8X builds
// exactly l from them.
func splitNormQ8X(l Launch) (norm, q Launch, ok bool) {
	if len(l.Args) != 8 || l.Args[6].Kind != ArgPtr || !strings.HasSuffix(l.Kernel, "_q8x") {
		return Launch{}, Launch{}, false
	}
	norm = l
	norm.Kernel, norm.Args = strings.TrimSuffix(l.Kernel, "_q8x"), l.Args[:6]
	m, ok := parseNorm(norm)
	if !ok {
		return Launch{}, Launch{}, false
	}
	xq := l.Args[6].Ptr()
	f, err := RMSNormQ8X(m.xdt, m.odt, m.out, m.x, m.w, xq, m.rows, m.n, m.eps)
	if err != nil || !reflect.DeepEqual(f, l) {
		return Launch{}, Launch{}, false
	}
	q, err = Q8XQuantize(m.odt, m.out, xq, m.rows, m.n)
	return norm, q, err == nil
}

// covered reports whether every byte of s lies in one of by.
func covered(s span, by []span) bool {
	at, end := s.at.Offset, s.at.Offset+s.n
	for at < end {
		next := at
		for _, b := range by {
			if b.at.Base == s.at.Base && b.at.Offset <= at && at < b.at.Offset+b.n {
				next = max(next, b.at.Offset+b.n)
			}
		}
		if next == at {
			return false
		}
		at = next
	}
	return true
}
