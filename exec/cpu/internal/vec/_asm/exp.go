package main

import (
	"math"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// The AVX-512 kernels built on exp64, eight float64 lanes at a time. exp64
// performs, lane by lane, the operations of Go's math.Exp on amd64 (the
// FMA branch of math/exp_amd64.s, which math takes wherever AVX and FMA
// exist), so the kernels' float32 results are those of their scalar Go
// definitions with math.Exp (the tests hold them to it bit for bit, NaN
// payloads aside).

// expConst is the constant table of exp64 (offsets below).
var expConst Mem

const (
	cLog2E     = 0   // 1/ln 2
	cLn2U      = 8   // ln 2, upper part
	cLn2L      = 16  // ln 2, lower part
	cSixteenth = 24  // the argument is reduced by 1/16
	cPoly      = 32  // Taylor coefficients 1/8! ... 1/3!, 1/2, 1: eight of them
	cTwo       = 96  // 2
	cOverflow  = 104 // above this, +Inf
	cTiny      = 112 // 2^-1022
	cPosInf    = 120
	cNegInf    = 128
	cSign      = 136 // the sign bit
	cBias      = 144 // int32 1023
	cBias1     = 148 // int32 1022
	cMinExp    = 152 // int32 -52: below, the result underflows to 0
	cMaxExp    = 156 // int32 2047: from here, +Inf
	cZero32    = 160 // int32 0
)

// expConstants writes the table: the literals of math/exp_amd64.s.
func expConstants() {
	expConst = GLOBL("expconst", RODATA|NOPTR)
	f := func(off int, v float64) { DATA(off, U64(math.Float64bits(v))) }
	f(cLog2E, 1.4426950408889634073599246810018920)
	f(cLn2U, 0.69314718055966295651160180568695068359375)
	f(cLn2L, 0.28235290563031577122588448175013436025525412068e-12)
	f(cSixteenth, 0.0625)
	for i, c := range []float64{
		2.4801587301587301587e-5, 1.9841269841269841270e-4, 1.3888888888888888889e-3,
		8.3333333333333333333e-3, 4.1666666666666666667e-2, 1.6666666666666666667e-1, 0.5, 1.0,
	} {
		f(cPoly+8*i, c)
	}
	f(cTwo, 2)
	f(cOverflow, 7.09782712893384e+02)
	DATA(cTiny, U64(1<<52))
	DATA(cPosInf, U64(0x7FF0000000000000))
	DATA(cNegInf, U64(0xFFF0000000000000))
	DATA(cSign, U64(1<<63))
	for _, c := range []struct{ off, v int32 }{{cBias, 1023}, {cBias1, 1022}, {cMinExp, -52}, {cMaxExp, 2047}, {cZero32, 0}} {
		DATA(int(c.off), U32(uint32(c.v)))
	}
}

// paramAddr is the memory operand of a scalar argument.
func paramAddr(name string) Mem {
	b, err := Param(name).Resolve()
	if err != nil {
		panic(err)
	}
	return b.Addr
}

func ec(off int) Mem { return expConst.Offset(off) }

// exp64 returns a ZMM holding math.Exp of each lane of x.
func exp64(x VecVirtual) VecVirtual {
	// n = round(x / ln 2), x0 = (x - n ln 2) / 16.
	t := ZMM()
	VMULPD_BCST(ec(cLog2E), x, t)
	n := YMM()
	VCVTPD2DQ(t, n) // rounds to nearest; out of range: 0x80000000
	nd := ZMM()
	VCVTDQ2PD(n, nd)
	x0 := ZMM()
	VMOVAPD(x, x0)
	VFNMADD231PD_BCST(ec(cLn2U), nd, x0)
	VFNMADD231PD_BCST(ec(cLn2L), nd, x0)
	VMULPD_BCST(ec(cSixteenth), x0, x0)
	// Taylor series of e^x0 - 1 in x0, then squared up four times.
	x1 := ZMM()
	VBROADCASTSD(ec(cPoly), x1)
	for i := 1; i < 8; i++ {
		VFMADD213PD_BCST(ec(cPoly+8*i), x0, x1) // x1 = x1*x0 + c
	}
	VMULPD(x1, x0, x0)
	for i := 0; i < 3; i++ {
		VADDPD_BCST(ec(cTwo), x0, x1)
		VMULPD(x1, x0, x0)
	}
	VADDPD_BCST(ec(cTwo), x0, x1)
	VFMADD213PD_BCST(ec(cPoly+56), x1, x0) // x0 = x0*x1 + 1
	// Times 2^n: the biased exponent n+1023 into the exponent bits.
	bx := YMM()
	VPADDD_BCST(ec(cBias), n, bx)
	r := timesPow2(x0, bx)
	// A subnormal result: times 2^(n+1022), then 2^-1022.
	sub := K()
	VPCMPD_BCST(U8(2), ec(cZero32), bx, sub) // bx <= 0
	bd := YMM()
	VPADDD_BCST(ec(cBias1), bx, bd)
	d := timesPow2(x0, bd)
	VMULPD_BCST(ec(cTiny), d, d)
	VBLENDMPD(d, r, sub, r)
	// Underflow to 0, overflow to +Inf, and the special arguments.
	zero := ZMM()
	VPXORQ(zero, zero, zero)
	inf := ZMM()
	VBROADCASTSD(ec(cPosInf), inf)
	k := K()
	VPCMPD_BCST(U8(1), ec(cMinExp), bx, k) // bx < -52
	VBLENDMPD(zero, r, k, r)
	VPCMPD_BCST(U8(5), ec(cMaxExp), bx, k) // bx >= 2047
	VBLENDMPD(inf, r, k, r)
	VCMPPD_BCST(U8(0x1e), ec(cOverflow), x, k) // x > overflow (ordered)
	VBLENDMPD(inf, r, k, r)
	VCMPPD_BCST(U8(0), ec(cNegInf), x, k) // x == -Inf
	VBLENDMPD(zero, r, k, r)
	VCMPPD(U8(3), x, x, k) // NaN: x itself
	VBLENDMPD(x, r, k, r)
	return r
}

// timesPow2 returns x times the float64 whose exponent bits are e (int32
// lanes; mantissa zero).
func timesPow2(x, e VecVirtual) VecVirtual {
	r := ZMM()
	VPMOVSXDQ(e, r)
	VPSLLQ(U8(52), r, r)
	VMULPD(r, x, r)
	return r
}

// elementwise writes a kernel over float32 slices, eight elements at a
// time and the last n%8 under a mask: body gets the pointers (advanced
// by 32 bytes a step) and the mask (nil for whole vectors) and does one
// step.
func elementwise(name, sig, doc string, ptrs []string, body func(p []Register, k Op)) {
	TEXT(name, NOSPLIT, sig)
	Doc(doc)
	p := make([]Register, len(ptrs))
	for i, s := range ptrs {
		p[i] = Load(Param(s).Base(), GP64())
	}
	n := Load(Param(ptrs[0]).Len(), GP64())
	Label(name + "_loop")
	CMPQ(n, U8(8))
	JL(LabelRef(name + "_tail"))
	body(p, nil)
	for _, r := range p {
		ADDQ(U8(32), r)
	}
	SUBQ(U8(8), n)
	JMP(LabelRef(name + "_loop"))
	Label(name + "_tail")
	TESTQ(n, n)
	JZ(LabelRef(name + "_done"))
	bits := GP64()
	MOVQ(U32(1), bits)
	SHLXQ(n, bits, bits)
	DECQ(bits)
	k := K()
	KMOVW(bits.As32(), k)
	body(p, k)
	Label(name + "_done")
	VZEROUPPER()
	RET()
}

// load8 reads eight floats at p (under mask k if not nil, zeros elsewhere).
func load8(p Register, k Op) VecVirtual {
	v := YMM()
	if k != nil {
		VMOVUPS_Z(Mem{Base: p}, k, v)
	} else {
		VMOVUPS(Mem{Base: p}, v)
	}
	return v
}

// store8 writes eight floats at p (under mask k if not nil).
func store8(v VecVirtual, p Register, k Op) {
	if k != nil {
		VMOVUPS(v, k, Mem{Base: p})
	} else {
		VMOVUPS(v, Mem{Base: p})
	}
}

// expKernels writes the kernels built on exp64.
func expKernels() {
	expConstants()

	elementwise("expShiftedAVX512", "func(s []float32, m float32)",
		"expShiftedAVX512 sets s[i] = float32(math.Exp(float64(s[i] - m))).",
		[]string{"s"}, func(p []Register, k Op) {
			mv := YMM()
			VBROADCASTSS(paramAddr("m"), mv)
			x := load8(p[0], k)
			VSUBPS(mv, x, x) // x - m in float32
			xd := ZMM()
			VCVTPS2PD(x, xd)
			out := YMM()
			VCVTPD2PS(exp64(xd), out)
			store8(out, p[0], k)
		})

	elementwise("siluMulAVX512", "func(y, g, u []float32)",
		"siluMulAVX512 sets y[i] = float32(v / (1 + math.Exp(-v))) * u[i], v = float64(g[i]); g and u hold len(y) floats.",
		[]string{"y", "g", "u"}, func(p []Register, k Op) {
			v := ZMM()
			VCVTPS2PD(load8(p[1], k), v)
			nv := ZMM()
			VPXORQ_BCST(ec(cSign), v, nv) // -v
			den := ZMM()
			VADDPD_BCST(ec(cPoly+56), exp64(nv), den) // 1 + e^-v
			VDIVPD(den, v, den)                       // v / (1 + e^-v)
			out := YMM()
			VCVTPD2PS(den, out)
			VMULPS(load8(p[2], k), out, out)
			store8(out, p[0], k)
		})

	elementwise("divideAVX512", "func(s []float32, d float64)",
		"divideAVX512 sets s[i] = float32(float64(s[i]) / d).",
		[]string{"s"}, func(p []Register, k Op) {
			dv := ZMM()
			VBROADCASTSD(paramAddr("d"), dv)
			x := ZMM()
			VCVTPS2PD(load8(p[0], k), x)
			VDIVPD(dv, x, x)
			out := YMM()
			VCVTPD2PS(x, out)
			store8(out, p[0], k)
		})
}
