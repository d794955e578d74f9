// Command _asm generates the assembly kernels of package vec with avo:
//
//	go run -C _asm . -out ../vec_amd64.s -stubs ../stubs_amd64.go -pkg vec
//
// It is a module of its own so that the main module does not depend on avo.
package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// tailMask holds eight all-ones words then eight zero words: the eight
// words from word 8-t on select the first t lanes of a vector.
var tailMask Mem

func main() {
	tailMask = GLOBL("tailmask", RODATA|NOPTR)
	for i := 0; i < 16; i++ {
		v := uint32(0)
		if i < 8 {
			v = 0xffffffff
		}
		DATA(4*i, U32(v))
	}
	dots("dotsFMA", avx2, false)
	dots("dotsBF16", avx2, true)
	dots("dotsAVX512", avx512, false)
	dots("dotsBF16AVX512", avx512, true)
	addScaled()
	expKernels()
	Generate()
}

// vreg is a vector register, virtual or physical.
type vreg interface {
	Register
	Vec
}

// isa is the vector width a dots kernel is written for.
type isa struct {
	lanes int // float32 lanes per vector: 8 (AVX2) or 16 (AVX-512)
}

var (
	avx2   = isa{8}
	avx512 = isa{16}
)

// regs hands out the vector registers of one group of rows. The AVX2
// kernels take virtual ones. The AVX-512 kernels name physical ones: the
// allocator would also hand out Y16-Y31, which the VEX-encoded
// reduction (VHADDPS) cannot address, so the accumulators live in
// Z16-Z25 and the reduction in Y0-Y15.
type regs struct {
	wide func() vreg // accumulators, x and scratch
	ymm  func() vreg // the reduction's
}

func (v isa) regs() regs {
	if v.lanes == 8 {
		return regs{func() vreg { return YMM() }, func() vreg { return YMM() }}
	}
	z, y := 16, 0
	return regs{
		func() vreg { z++; return phys(Z16, z-1-16).(vreg) },
		func() vreg { y++; return phys(Y0, y-1).(vreg) },
	}
}

// phys is the vector register i places after r.
func phys(r VecPhysical, i int) Register {
	switch r {
	case Z16:
		return [...]VecPhysical{Z16, Z17, Z18, Z19, Z20, Z21, Z22, Z23, Z24, Z25, Z26, Z27, Z28, Z29, Z30, Z31}[i]
	default:
		return [...]VecPhysical{Y0, Y1, Y2, Y3, Y4, Y5, Y6, Y7, Y8, Y9, Y10, Y11, Y12, Y13, Y14, Y15}[i]
	}
}

// dots: y[r] = a[r*lda : r*lda+k] . x for every row r < len(y), k = len(x).
//
// Every row is summed the same way, whichever group of rows it falls in:
// element i goes to lane i%L of the row's accumulator (L lanes) by a fused
// multiply-add, in ascending i (the last k%L elements through masked loads,
// which read nothing past them). With 16 lanes, lane l+8 is then added to
// lane l; the eight lanes are added as ((l0+l1)+(l2+l3)) + ((l4+l5)+(l6+l7)).
// Groups of 8 rows share each load of x; the rows left over go 4 and then 1
// at a time.
//
// With bf16 rows (a holds bfloat16 bits) each element is widened to float32
// exactly (its bits shifted up by 16) before the same multiply-add, so the
// result is bitwise that of the float32 rows. The AVX2 bf16 kernel has no
// masked 16-bit loads: k must be a multiple of 8.
func dots(name string, v isa, bf16 bool) {
	sig := "func(y, a []float32, lda int, x []float32)"
	doc := name + " sets y[r] to the dot product of row r of a (rows lda apart) with x."
	rt := f32Rows
	if bf16 {
		sig = "func(y []float32, a []uint16, lda int, x []float32)"
		doc = name + " sets y[r] to the dot product of bfloat16 row r of a (rows lda apart) with x."
		if v.lanes == 8 {
			doc += " len(x) must be a multiple of 8."
		}
		rt = bf16Rows
	}
	TEXT(name, NOSPLIT, sig)
	Doc(doc)
	y, n, a, lda, x, k := matrixArgs(rt.shift)

	// The mask of the last k%L elements (tail of them).
	tail := GP64()
	MOVQ(k, tail)
	ANDQ(U8(v.lanes-1), tail)
	var m mask
	if v.lanes == 8 {
		off, lea := GP64(), GP64()
		MOVQ(U32(8), off)
		SUBQ(tail, off)
		LEAQ(tailMask, lea)
		m.v = YMM()
		VMOVDQU(Mem{Base: lea, Index: off, Scale: 4}, m.v)
	} else {
		bitsReg := GP64()
		MOVQ(U32(1), bitsReg)
		SHLXQ(tail, bitsReg, bitsReg)
		DECQ(bitsReg)
		m.k = K()
		KMOVW(bitsReg.As32(), m.k)
	}
	SHRQ(U8(log2(v.lanes)), k) // whole vectors per row

	lda3 := GP64()
	LEAQ(Mem{Base: lda, Index: lda, Scale: 2}, lda3)

	groups := []int{8, 4, 1}
	for i, g := range groups {
		label := fmt.Sprintf("%s_rows%d", name, g)
		Label(label)
		CMPQ(n, U8(g))
		if i+1 == len(groups) {
			JL(LabelRef(name + "_done"))
		} else {
			JL(LabelRef(fmt.Sprintf("%s_rows%d", name, groups[i+1])))
		}
		dotGroup(name, v, rt, g, y, a, lda, lda3, x, k, tail, m)
		ADDQ(U8(4*g), y)
		LEAQ(Mem{Base: a, Index: lda, Scale: uint8(g)}, a)
		SUBQ(U8(g), n)
		JMP(LabelRef(label))
	}
	Label(name + "_done")
	VZEROUPPER()
	RET()
}

// mask selects the tail elements: a vector of all-ones lanes (AVX2) or an
// opmask (AVX-512).
type mask struct {
	v VecVirtual
	k OpmaskVirtual
}

func log2(n int) int {
	l := 0
	for ; n > 1; n >>= 1 {
		l++
	}
	return l
}

// rowType is how a kernel reads a vector of a row's elements as float32.
type rowType struct {
	shift int // log2 of the element size
	// fma adds the elements at m times xv to acc; tmp is scratch.
	fma func(m Mem, xv, acc, tmp vreg)
	// load reads the elements at m that the mask selects into tmp, zeros
	// elsewhere, reading nothing past them.
	load func(m Mem, mk mask, tmp vreg)
}

var (
	f32Rows = rowType{
		shift: 2,
		fma:   func(m Mem, xv, acc, _ vreg) { VFMADD231PS(m, xv, acc) },
		load: func(m Mem, mk mask, tmp vreg) {
			if mk.k != nil {
				VMOVUPS_Z(m, mk.k, tmp)
			} else {
				VMASKMOVPS(m, mk.v, tmp)
			}
		},
	}
	// bfloat16 widens exactly: its bits are the high half of a float32's.
	bf16Rows = rowType{
		shift: 1,
		fma: func(m Mem, xv, acc, tmp vreg) {
			VPMOVZXWD(m, tmp)
			VPSLLD(U8(16), tmp, tmp)
			VFMADD231PS(tmp, xv, acc)
		},
		load: func(m Mem, mk mask, tmp vreg) {
			VPMOVZXWD_Z(m, mk.k, tmp) // AVX-512 only
			VPSLLD(U8(16), tmp, tmp)
		},
	}
)

// dotGroup computes the dot products of rows a, a+lda, ... (g of them) with
// x and stores them at y. k is the number of whole vectors per row; tail
// elements follow them, selected by m.
func dotGroup(name string, v isa, rt rowType, g int, y, a, lda, lda3, x, k, tail Register, m mask) {
	p, p3, xp, cnt := GP64(), GP64(), GP64(), GP64()
	MOVQ(a, p)
	LEAQ(Mem{Base: a, Index: lda3, Scale: 1}, p3)
	MOVQ(x, xp)
	MOVQ(k, cnt)
	// Row r of the group, relative to p (p3 = p + 3 rows): the addressing
	// modes reach rows 0-7 from p and p3 with strides lda and 3*lda.
	rows := [8]struct {
		base, index Register
		scale       uint8
	}{{p, nil, 0}, {p, lda, 1}, {p, lda, 2}, {p3, nil, 0}, {p, lda, 4}, {p3, lda, 2}, {p, lda3, 2}, {p3, lda, 4}}
	row := func(r int) Mem { return Mem{Base: rows[r].base, Index: rows[r].index, Scale: rows[r].scale} }
	rg := v.regs()
	acc := make([]vreg, g)
	for r := range acc {
		acc[r] = rg.wide()
		if v.lanes == 16 {
			VPXORD(acc[r], acc[r], acc[r]) // VXORPS on a ZMM needs AVX512DQ
		} else {
			VXORPS(acc[r], acc[r], acc[r])
		}
	}
	xv, tmp := rg.wide(), rg.wide()
	loop := fmt.Sprintf("%s_loop%d", name, g)
	rest := fmt.Sprintf("%s_tail%d", name, g)
	sum := fmt.Sprintf("%s_sum%d", name, g)
	TESTQ(cnt, cnt)
	JZ(LabelRef(rest))
	Label(loop)
	VMOVUPS(Mem{Base: xp}, xv)
	for r := range acc {
		rt.fma(row(r), xv, acc[r], tmp)
	}
	step := U8(v.lanes << rt.shift)
	ADDQ(step, p)
	ADDQ(step, p3)
	ADDQ(U8(4*v.lanes), xp)
	DECQ(cnt)
	JNZ(LabelRef(loop))
	Label(rest)
	if rt.shift == 2 || v.lanes == 16 {
		// The last k%L elements: masked-off lanes load zeros and read
		// nothing.
		TESTQ(tail, tail)
		JZ(LabelRef(sum))
		f32Rows.load(Mem{Base: xp}, m, xv)
		for r := range acc {
			rt.load(row(r), m, tmp)
			VFMADD231PS(tmp, xv, acc[r])
		}
	}
	Label(sum)
	if v.lanes == 16 {
		// Lane l+8 onto lane l.
		for r, z := range acc {
			hi := rg.ymm()
			VEXTRACTF64X4(U8(1), z, hi)
			VADDPS(hi, z.AsY(), hi)
			acc[r] = hi
		}
	}
	reduce(g, acc, y, rg.ymm)
}

// reduce adds the eight lanes of each of the g accumulators as
// ((l0+l1)+(l2+l3)) + ((l4+l5)+(l6+l7)) and stores the g sums at y.
func reduce(g int, acc []vreg, y Register, YMM func() vreg) {
	switch g {
	case 8:
		h01, h23, h45, h67 := YMM(), YMM(), YMM(), YMM()
		VHADDPS(acc[1], acc[0], h01) // a01 a23 b01 b23 | a45 a67 b45 b67
		VHADDPS(acc[3], acc[2], h23)
		VHADDPS(acc[5], acc[4], h45)
		VHADDPS(acc[7], acc[6], h67)
		lo, hi := YMM(), YMM()
		VHADDPS(h23, h01, lo) // rows 0-3: low halves | high halves
		VHADDPS(h67, h45, hi) // rows 4-7
		s1, s2 := YMM(), YMM()
		VPERM2F128(U8(0x20), hi, lo, s1) // low halves of rows 0-7
		VPERM2F128(U8(0x31), hi, lo, s2) // high halves of rows 0-7
		VADDPS(s2, s1, s1)
		VMOVUPS(s1, Mem{Base: y})
	case 4:
		h01, h23, q := YMM(), YMM(), YMM()
		VHADDPS(acc[1], acc[0], h01)
		VHADDPS(acc[3], acc[2], h23)
		VHADDPS(h23, h01, q)
		top := YMM().AsX()
		VEXTRACTF128(U8(1), q, top)
		VADDPS(top, q.AsX(), top)
		VMOVUPS(top, Mem{Base: y})
	default:
		h, q := YMM(), YMM()
		VHADDPS(acc[0], acc[0], h)
		VHADDPS(h, h, q)
		top := YMM().AsX()
		VEXTRACTF128(U8(1), q, top)
		VADDSS(top, q.AsX(), top)
		VMOVSS(top, Mem{Base: y})
	}
}

// matrixArgs loads the arguments (y, a, lda, x) of a matrix kernel: y's
// base and length, a's base, the row stride in bytes (lda elements of
// 1<<shift bytes), x's base and length.
func matrixArgs(shift int) (y, n, a, lda, x, k Register) {
	y = Load(Param("y").Base(), GP64())
	n = Load(Param("y").Len(), GP64())
	a = Load(Param("a").Base(), GP64())
	lda = Load(Param("lda"), GP64())
	x = Load(Param("x").Base(), GP64())
	k = Load(Param("x").Len(), GP64())
	SHLQ(U8(shift), lda)
	return y, n, a, lda, x, k
}

// addScaled: y[c] += sum over i of x[i]*a[i*lda+c] for every c < len(y),
// i < len(x), one fused multiply-add per (i, c) in ascending i. Columns go
// 32 and then 8 at a time and the last len(y)%8 one at a time, each with
// the arithmetic of a vector lane.
func addScaled() {
	TEXT("addScaledFMA", NOSPLIT, "func(y, a []float32, lda int, x []float32)")
	Doc("addScaledFMA adds x[i] times row i of a (rows lda apart) to y, for ascending i.")
	y, n, a, lda, x, m := matrixArgs(2)
	widths := []int{32, 8, 1}
	for i, width := range widths {
		cols := fmt.Sprintf("cols%d", width)
		Label(cols)
		CMPQ(n, U8(width))
		if i+1 == len(widths) {
			JL(LabelRef("axdone"))
		} else {
			JL(LabelRef(fmt.Sprintf("cols%d", widths[i+1])))
		}
		axpyColumns(width, y, a, lda, x, m)
		ADDQ(U8(4*width), y)
		ADDQ(U8(4*width), a)
		SUBQ(U8(width), n)
		JMP(LabelRef(cols))
	}
	Label("axdone")
	VZEROUPPER()
	RET()
}

// axpyColumns accumulates width columns of y (32, 8 or 1) over the m rows.
func axpyColumns(width int, y, a, lda, x, m Register) {
	nv := max(width/8, 1)
	acc := make([]VecVirtual, nv)
	for j := range acc {
		if width == 1 {
			acc[j] = XMM()
			VMOVSS(Mem{Base: y}, acc[j])
		} else {
			acc[j] = YMM()
			VMOVUPS(Mem{Base: y, Disp: 32 * j}, acc[j])
		}
	}
	p, xp, cnt := GP64(), GP64(), GP64()
	MOVQ(a, p)
	MOVQ(x, xp)
	MOVQ(m, cnt)
	loop, end := fmt.Sprintf("ax%d_loop", width), fmt.Sprintf("ax%d_end", width)
	TESTQ(cnt, cnt)
	JZ(LabelRef(end))
	Label(loop)
	if width == 1 {
		b := XMM()
		VMOVSS(Mem{Base: xp}, b)
		VFMADD231SS(Mem{Base: p}, b, acc[0])
	} else {
		b := YMM()
		VBROADCASTSS(Mem{Base: xp}, b)
		for j := range acc {
			VFMADD231PS(Mem{Base: p, Disp: 32 * j}, b, acc[j])
		}
	}
	ADDQ(lda, p)
	ADDQ(U8(4), xp)
	DECQ(cnt)
	JNZ(LabelRef(loop))
	Label(end)
	for j := range acc {
		if width == 1 {
			VMOVSS(acc[j], Mem{Base: y})
		} else {
			VMOVUPS(acc[j], Mem{Base: y, Disp: 32 * j})
		}
	}
}
