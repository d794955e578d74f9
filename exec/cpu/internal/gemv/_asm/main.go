// Command _asm generates the AVX+FMA kernels of package gemv with avo:
//
//	go run -C _asm . -out ../gemv_amd64.s -stubs ../stubs_amd64.go -pkg gemv
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
	dots()
	addScaled()
	Generate()
}

// dots: y[r] = a[r*lda : r*lda+k] . x for every row r < len(y), k = len(x).
//
// Every row is summed the same way, whichever group of rows it falls in:
// element i goes to lane i%8 of the row's accumulator by a fused
// multiply-add, in ascending i (the last k%8 elements through masked loads,
// which read nothing past them), and the eight lanes are added as
// ((l0+l1)+(l2+l3)) + ((l4+l5)+(l6+l7)). Groups of 8 rows share each load of
// x; the rows left over go 4 and then 1 at a time.
func dots() {
	TEXT("dotsFMA", NOSPLIT, "func(y, a []float32, lda int, x []float32)")
	Doc("dotsFMA sets y[r] to the dot product of row r of a (rows lda apart) with x.")
	y := Load(Param("y").Base(), GP64())
	n := Load(Param("y").Len(), GP64())
	a := Load(Param("a").Base(), GP64())
	lda := Load(Param("lda"), GP64())
	x := Load(Param("x").Base(), GP64())
	k := Load(Param("x").Len(), GP64())
	SHLQ(U8(2), lda) // row stride in bytes

	// The mask of the last k%8 elements (tail of them).
	tail := GP64()
	MOVQ(k, tail)
	ANDQ(U8(7), tail)
	off, lea := GP64(), GP64()
	MOVQ(U32(8), off)
	SUBQ(tail, off)
	LEAQ(tailMask, lea)
	mask := YMM()
	VMOVDQU(Mem{Base: lea, Index: off, Scale: 4}, mask)
	SHRQ(U8(3), k) // whole vectors per row

	lda3 := GP64()
	LEAQ(Mem{Base: lda, Index: lda, Scale: 2}, lda3)

	groups := []int{8, 4, 1}
	for i, g := range groups {
		name := fmt.Sprintf("rows%d", g)
		Label(name)
		CMPQ(n, U8(g))
		if i+1 == len(groups) {
			JL(LabelRef("done"))
		} else {
			JL(LabelRef(fmt.Sprintf("rows%d", groups[i+1])))
		}
		dotGroup(g, y, a, lda, lda3, x, k, tail, mask)
		ADDQ(U8(4*g), y)
		LEAQ(Mem{Base: a, Index: lda, Scale: uint8(g)}, a)
		SUBQ(U8(g), n)
		JMP(LabelRef(name))
	}
	Label("done")
	VZEROUPPER()
	RET()
}

// dotGroup computes the dot products of rows a, a+lda, ... (g of them) with
// x and stores them at y. k is the number of whole vectors per row; tail
// elements follow them, selected by mask.
func dotGroup(g int, y, a, lda, lda3, x, k, tail Register, mask VecVirtual) {
	p, p3, xp, cnt := GP64(), GP64(), GP64(), GP64()
	MOVQ(a, p)
	LEAQ(Mem{Base: a, Index: lda3, Scale: 1}, p3)
	MOVQ(x, xp)
	MOVQ(k, cnt)
	// Row r of the group, relative to p (p3 = p + 3 rows).
	row := func(r int) Mem {
		switch r {
		case 0:
			return Mem{Base: p}
		case 1:
			return Mem{Base: p, Index: lda, Scale: 1}
		case 2:
			return Mem{Base: p, Index: lda, Scale: 2}
		case 3:
			return Mem{Base: p3}
		case 4:
			return Mem{Base: p, Index: lda, Scale: 4}
		case 5:
			return Mem{Base: p3, Index: lda, Scale: 2}
		case 6:
			return Mem{Base: p, Index: lda3, Scale: 2}
		default:
			return Mem{Base: p3, Index: lda, Scale: 4}
		}
	}
	acc := make([]VecVirtual, g)
	for r := range acc {
		acc[r] = YMM()
		VXORPS(acc[r], acc[r], acc[r])
	}
	xv := YMM()
	loop, rest, sum := fmt.Sprintf("dots%d_loop", g), fmt.Sprintf("dots%d_tail", g), fmt.Sprintf("dots%d_sum", g)
	TESTQ(cnt, cnt)
	JZ(LabelRef(rest))
	Label(loop)
	VMOVUPS(Mem{Base: xp}, xv)
	for r := range acc {
		VFMADD231PS(row(r), xv, acc[r])
	}
	ADDQ(U8(32), p)
	ADDQ(U8(32), p3)
	ADDQ(U8(32), xp)
	DECQ(cnt)
	JNZ(LabelRef(loop))
	Label(rest)
	// The last k%8 elements: masked-off lanes load zeros and read nothing.
	TESTQ(tail, tail)
	JZ(LabelRef(sum))
	VMASKMOVPS(Mem{Base: xp}, mask, xv)
	w := YMM()
	for r := range acc {
		VMASKMOVPS(row(r), mask, w)
		VFMADD231PS(w, xv, acc[r])
	}
	Label(sum)
	reduce(g, acc, y)
}

// reduce adds the eight lanes of each of the g accumulators as
// ((l0+l1)+(l2+l3)) + ((l4+l5)+(l6+l7)) and stores the g sums at y.
func reduce(g int, acc []VecVirtual, y Register) {
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
		top := XMM()
		VEXTRACTF128(U8(1), q, top)
		VADDPS(top, q.AsX(), top)
		VMOVUPS(top, Mem{Base: y})
	default:
		h, q := YMM(), YMM()
		VHADDPS(acc[0], acc[0], h)
		VHADDPS(h, h, q)
		top := XMM()
		VEXTRACTF128(U8(1), q, top)
		VADDSS(top, q.AsX(), top)
		VMOVSS(top, Mem{Base: y})
	}
}

// addScaled: y[c] += sum over i of x[i]*a[i*lda+c] for every c < len(y),
// i < len(x), one fused multiply-add per (i, c) in ascending i. Columns go
// 32 and then 8 at a time and the last len(y)%8 one at a time, each with
// the arithmetic of a vector lane.
func addScaled() {
	TEXT("addScaledFMA", NOSPLIT, "func(y, a []float32, lda int, x []float32)")
	Doc("addScaledFMA adds x[i] times row i of a (rows lda apart) to y, for ascending i.")
	y := Load(Param("y").Base(), GP64())
	n := Load(Param("y").Len(), GP64())
	a := Load(Param("a").Base(), GP64())
	lda := Load(Param("lda"), GP64())
	x := Load(Param("x").Base(), GP64())
	m := Load(Param("x").Len(), GP64())
	SHLQ(U8(2), lda)
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
