package lower

import (
	"fmt"
	"reflect"
	"strings"
)

// In decode, a layer's o_proj GEMV accumulates into the residual and the
// MLP norm reads it; the shared expert's down GEMV accumulates into the
// routed sum and the next layer's norm (with the residual add) reads it:
// two 1-block norm launches a layer of about 2 us each. fuseGEMVNorm lets
// the GEMV's last block run the norm (QGEMVNorm). Its invariant:
//
//	a qgemv or qgemv_xin launch G of one activation row and the norm
//	launch N right after it (no launch between; steps between may launch
//	nothing) become one launch at G's place, QGEMVNorm of the two with
//	its counter at sync+0, and N is dropped, only when G is as QGEMV or
//	QGEMVXIn builds it, N as RMSNorm, RMSNormQ8X, AddRMSNorm or
//	AddRMSNormQ8X builds it, of one row of G's N values in G's output
//	dtype, N reads G's y whole (its x, or its a or b, the other apart
//	from y or y itself) and N's weight lies apart from y.
//
// The last block runs N's code when every block of G has stored its y
// and read its inputs, so it sees the memory N would see and leaves what
// N leaves: the same bits (norm_tail, cuda/kernels/norm.cu, reads what
// other blocks wrote through L2). N's outputs may therefore lie over G's
// inputs (the quantised activations). G's place rather than N's, as in
// fuseAddNorm. The counter: every launch leaves sync's counters zero
// (the last block resets it), and each kernel's first act is
// griddepcontrol.wait, which waits for the launch before it to complete:
// launches of one stream never use sync+0 at once, so they share it with
// the split decode attention's. The rms_norm rule reserves it
// (GEMVNormCounter) in every schedule that has a norm of one row.

// GEMVNormCounter is the sync bytes QGEMVNorm's counter takes.
const GEMVNormCounter = 4

// fuseGEMVNorm fuses one-row norms into the quantised GEMV before them,
// in place.
func fuseGEMVNorm(steps [][]Launch) {
	fusePairs(steps, false, func(g, n Launch, _ []Launch) (Launch, bool) {
		if g.Kernel != "qgemv" && g.Kernel != "qgemv_xin" {
			return Launch{}, false
		}
		f, err := QGEMVNorm(g, n, Ptr{BaseSync, 0})
		return f, err == nil
	})
}

// normOf is a norm launch read back: RMSNorm or AddRMSNorm (add: x is
// null, the norm of sum = a + b), with Q8X its quantised copy at xq.
type normOf struct {
	normLaunch
	add, q8x  bool
	a, b, sum Ptr
	xq        Ptr
	lanes     int // the threads a row: the warp kernels 32, the block kernels the block
}

// parseNormOf reads any of the rms_norm launches; it fails unless their
// builder makes exactly that launch.
func parseNormOf(l Launch) (normOf, bool) {
	var m normOf
	name := strings.TrimPrefix(l.Kernel, "add_")
	m.add = name != l.Kernel
	name, m.q8x = strings.CutSuffix(name, "_q8x")
	if name != "rms_norm_block" && name != "rms_norm_warp" {
		return normOf{}, false
	}
	a := l.Args
	want := 6
	if m.add {
		want += 2
	}
	if m.q8x {
		want += 2
	}
	if len(a) != want || len(l.DTypes) != 2 {
		return normOf{}, false
	}
	for _, x := range a[3:] {
		if x.Kind != ArgPtr {
			return normOf{}, false
		}
	}
	plain := Launch{Kernel: name, File: l.File, DTypes: l.DTypes, Ints: l.Ints, Grid: l.Grid, Block: l.Block, Shmem: l.Shmem}
	if m.add {
		m.a, m.b, m.sum = a[3].Ptr(), a[4].Ptr(), a[5].Ptr()
		plain.Args = []Arg{a[0], a[1], a[2], ptrArg(m.sum), a[6], a[7]}
	} else {
		plain.Args = a[:6]
	}
	var ok bool
	if m.normLaunch, ok = parseNorm(plain); !ok {
		return normOf{}, false
	}
	if m.q8x {
		m.xq = a[len(a)-2].Ptr()
	}
	var f Launch
	var err error
	switch {
	case m.add && m.q8x:
		f, err = AddRMSNormQ8X(m.xdt, m.odt, m.sum, m.out, m.a, m.b, m.w, m.xq, m.rows, m.n, m.eps)
	case m.add:
		f, err = AddRMSNorm(m.xdt, m.odt, m.sum, m.out, m.a, m.b, m.w, m.rows, m.n, m.eps)
	case m.q8x:
		f, err = RMSNormQ8X(m.xdt, m.odt, m.out, m.x, m.w, m.xq, m.rows, m.n, m.eps)
	default:
		f = plain
	}
	if err != nil || !reflect.DeepEqual(f, l) {
		return normOf{}, false
	}
	m.lanes = l.Block[0]
	if name == "rms_norm_warp" {
		m.lanes = 32
	}
	if m.add {
		m.x = Ptr{}
	}
	return m, true
}

// parseQGEMVXIn reads a qgemv_xin launch's arguments (and its x and x's
// dtype); it fails unless QGEMVXIn builds exactly that launch from them.
func parseQGEMVXIn(l Launch) (QGEMVArgs, Ptr, string, bool) {
	if l.Kernel != "qgemv_xin" || len(l.DTypes) != 2 || len(l.Ints) != 5 ||
		!ArgKinds(l.Args, ArgI32, ArgI32, ArgI64, ArgI64, ArgPtr, ArgPtr, ArgPtr, ArgI32) {
		return QGEMVArgs{}, Ptr{}, "", false
	}
	g := qgemvArgsOf(l, 6)
	x := l.Args[5].Ptr()
	want, err := QGEMVXIn(g, x, l.DTypes[1])
	return g, x, l.DTypes[1], err == nil && reflect.DeepEqual(want, l)
}

// QGEMVNorm is g (a qgemv or qgemv_xin launch of one activation row, as
// QGEMV or QGEMVXIn builds it) then n (a norm launch of that row, as
// RMSNorm, RMSNormQ8X, AddRMSNorm or AddRMSNormQ8X builds it, reading g's
// y as its x, a or b) in one launch of g's geometry, with the bits of the
// two: the block of g that finishes last runs n (qgemv_norm,
// cuda/kernels/quant.cu). counter is GEMVNormCounter bytes, zero before
// the launch; the launch leaves it zero.
func QGEMVNorm(g, n Launch, counter Ptr) (Launch, error) {
	const op = "QGEMVNorm"
	var a QGEMVArgs
	var ok bool
	switch g.Kernel {
	case "qgemv":
		a, ok = parseQGEMV(g)
	case "qgemv_xin":
		a, _, _, ok = parseQGEMVXIn(g)
	}
	if !ok {
		return Launch{}, fmt.Errorf("%s: %s is not a qgemv or qgemv_xin launch", op, g.Kernel)
	}
	m, ok := parseNormOf(n)
	if !ok {
		return Launch{}, fmt.Errorf("%s: %s is not a norm launch", op, n.Kernel)
	}
	ysize := int64(a.N) * int64(dtypeSize(a.YType))
	other := m.x // the norm's input besides y
	reads := m.x == a.Y
	if m.add {
		reads = m.a == a.Y || m.b == a.Y
		if other = m.a; m.a == a.Y {
			other = m.b
		}
	}
	switch {
	case a.T != 1 || m.rows != 1 || m.n != a.N || m.xdt != a.YType:
		return Launch{}, fmt.Errorf("%s: %d rows of %d %s, a norm of %d rows of %d %s", op, a.T, a.N, a.YType, m.rows, m.n, m.xdt)
	case !reads:
		return Launch{}, fmt.Errorf("%s: the norm does not read y %s", op, a.Y)
	case other != a.Y && overlaps(other, ysize, a.Y, ysize), overlaps(m.w, 4*int64(m.n), a.Y, ysize):
		return Launch{}, fmt.Errorf("%s: the norm's other operands overlap y %s", op, a.Y)
	case m.lanes%32 != 0 || m.lanes < 32 || m.lanes > 1024:
		return Launch{}, fmt.Errorf("%s: a norm of %d threads", op, m.lanes)
	case counter.Null() || !counter.Aligned(4):
		return Launch{}, fmt.Errorf("%s: counter %s", op, counter)
	}
	tail := int64(b2i(m.q8x) | b2i(m.add)<<1)
	xs := Ptr{}
	if m.q8x {
		xs = q8xScales(m.xq, 1, m.n)
	}
	f := g
	f.Kernel += "_norm"
	f.DTypes = append(append([]string(nil), g.DTypes...), m.odt)
	f.Ints = append(append([]int64(nil), g.Ints...), tail)
	f.Args = append(append([]Arg(nil), g.Args...), ptrArg(counter), i32(m.n), i32(m.lanes), f32(m.eps), ptrArg(m.x),
		ptrArg(m.a), ptrArg(m.b), ptrArg(m.sum), ptrArg(m.w), ptrArg(m.out), ptrArg(m.xq), ptrArg(xs))
	return f, nil
}

// SplitQGEMVNorm is the GEMV and the norm a QGEMVNorm launch stands for;
// it fails unless QGEMVNorm builds exactly f from them.
func SplitQGEMVNorm(f Launch) (g, n Launch, ok bool) {
	kernel, fused := strings.CutSuffix(f.Kernel, "_norm")
	const tailArgs = 12
	if !fused || (kernel != "qgemv" && kernel != "qgemv_xin") || len(f.DTypes) < 2 || len(f.Ints) != 6 || len(f.Args) < tailArgs {
		return Launch{}, Launch{}, false
	}
	g = f
	g.Kernel, g.DTypes, g.Ints, g.Args = kernel, f.DTypes[:len(f.DTypes)-1], f.Ints[:5], f.Args[:len(f.Args)-tailArgs]
	t := f.Args[len(f.Args)-tailArgs:]
	for i, k := range []string{ArgPtr, ArgI32, ArgI32, ArgF32, ArgPtr, ArgPtr, ArgPtr, ArgPtr, ArgPtr, ArgPtr, ArgPtr, ArgPtr} {
		if t[i].Kind != k {
			return Launch{}, Launch{}, false
		}
	}
	nv, eps, tail := int(t[1].Int), t[3].Float, f.Ints[5]
	xdt, odt := g.DTypes[0], f.DTypes[len(f.DTypes)-1]
	x, a, b, sum, w, out, xq := t[4].Ptr(), t[5].Ptr(), t[6].Ptr(), t[7].Ptr(), t[8].Ptr(), t[9].Ptr(), t[10].Ptr()
	var err error
	switch tail {
	case 0:
		n, err = RMSNorm(xdt, odt, out, x, w, 1, nv, eps)
	case 1:
		n, err = RMSNormQ8X(xdt, odt, out, x, w, xq, 1, nv, eps)
	case 2:
		n, err = AddRMSNorm(xdt, odt, sum, out, a, b, w, 1, nv, eps)
	case 3:
		n, err = AddRMSNormQ8X(xdt, odt, sum, out, a, b, w, xq, 1, nv, eps)
	default:
		return Launch{}, Launch{}, false
	}
	if err != nil {
		return Launch{}, Launch{}, false
	}
	again, err := QGEMVNorm(g, n, t[0].Ptr())
	return g, n, err == nil && reflect.DeepEqual(again, f)
}
