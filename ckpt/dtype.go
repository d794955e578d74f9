package ckpt

import (
	"encoding/binary"
	"fmt"
	"math"
	"runtime"
	"sync"
)

// DType is a tensor element type, numbered as ggml numbers its types so
// GGUF tensor infos map onto it directly. Safetensors dtypes map onto the
// three float types.
type DType uint32

// The ggml types lagc knows. Only F32, F16 and BF16 can be read today; the
// quantised ones are parsed (so sizes and offsets are checked) and reported
// as unsupported on read.
const (
	F32     DType = 0
	F16     DType = 1
	Q4_0    DType = 2
	Q4_1    DType = 3
	Q5_0    DType = 6
	Q5_1    DType = 7
	Q8_0    DType = 8
	Q8_1    DType = 9
	Q2_K    DType = 10
	Q3_K    DType = 11
	Q4_K    DType = 12
	Q5_K    DType = 13
	Q6_K    DType = 14
	Q8_K    DType = 15
	IQ2_XXS DType = 16
	IQ2_XS  DType = 17
	IQ3_XXS DType = 18
	IQ1_S   DType = 19
	IQ4_NL  DType = 20
	IQ3_S   DType = 21
	IQ2_S   DType = 22
	IQ4_XS  DType = 23
	I8      DType = 24
	I16     DType = 25
	I32     DType = 26
	I64     DType = 27
	F64     DType = 28
	IQ1_M   DType = 29
	BF16    DType = 30
	TQ1_0   DType = 34
	TQ2_0   DType = 35
	MXFP4   DType = 39
)

type dtypeTraits struct {
	name      string
	blockSize int64 // elements per block
	typeSize  int64 // bytes per block
}

// Block and type sizes as gguf-py's GGML_QUANT_SIZES lists them.
var dtypes = map[DType]dtypeTraits{
	F32: {"f32", 1, 4}, F16: {"f16", 1, 2}, BF16: {"bf16", 1, 2},
	Q4_0: {"q4_0", 32, 18}, Q4_1: {"q4_1", 32, 20}, Q5_0: {"q5_0", 32, 22}, Q5_1: {"q5_1", 32, 24},
	Q8_0: {"q8_0", 32, 34}, Q8_1: {"q8_1", 32, 36},
	Q2_K: {"q2_k", 256, 84}, Q3_K: {"q3_k", 256, 110}, Q4_K: {"q4_k", 256, 144}, Q5_K: {"q5_k", 256, 176},
	Q6_K: {"q6_k", 256, 210}, Q8_K: {"q8_k", 256, 292},
	IQ2_XXS: {"iq2_xxs", 256, 66}, IQ2_XS: {"iq2_xs", 256, 74}, IQ3_XXS: {"iq3_xxs", 256, 98},
	IQ1_S: {"iq1_s", 256, 50}, IQ4_NL: {"iq4_nl", 32, 18}, IQ3_S: {"iq3_s", 256, 110},
	IQ2_S: {"iq2_s", 256, 82}, IQ4_XS: {"iq4_xs", 256, 136}, IQ1_M: {"iq1_m", 256, 56},
	I8: {"i8", 1, 1}, I16: {"i16", 1, 2}, I32: {"i32", 1, 4}, I64: {"i64", 1, 8}, F64: {"f64", 1, 8},
	TQ1_0: {"tq1_0", 256, 54}, TQ2_0: {"tq2_0", 256, 66}, MXFP4: {"mxfp4", 32, 17},
}

func (d DType) String() string {
	if t, ok := dtypes[d]; ok {
		return t.name
	}
	return fmt.Sprintf("ggml_type(%d)", uint32(d))
}

// Known reports whether d is a ggml type lagc knows the layout of.
func (d DType) Known() bool { _, ok := dtypes[d]; return ok }

// Float reports whether d is one of the float types lagc reads (f32, f16, bf16).
func (d DType) Float() bool { return d == F32 || d == F16 || d == BF16 }

// ParseDType parses "f32", "f16" or "bf16" (the float types a writer can emit).
func ParseDType(s string) (DType, error) {
	switch s {
	case "f32", "F32", "float32":
		return F32, nil
	case "f16", "F16", "float16":
		return F16, nil
	case "bf16", "BF16", "bfloat16":
		return BF16, nil
	}
	return 0, fmt.Errorf("unknown dtype %q: want f32, f16 or bf16", s)
}

// byteSize returns the number of bytes n elements of d occupy, or an error
// if n is not a whole number of blocks or d is unknown.
func (d DType) byteSize(n int64) (int64, error) {
	t, ok := dtypes[d]
	if !ok {
		return 0, fmt.Errorf("unknown ggml type %d", uint32(d))
	}
	if n%t.blockSize != 0 {
		return 0, fmt.Errorf("%d elements are not a whole number of %s blocks of %d", n, t.name, t.blockSize)
	}
	blocks := n / t.blockSize
	if blocks > math.MaxInt64/t.typeSize {
		return 0, fmt.Errorf("tensor of %d elements is too large", n)
	}
	return blocks * t.typeSize, nil
}

// numElements multiplies dims, rejecting negative dims and overflow.
func numElements(shape []int) (int64, error) {
	n := int64(1)
	for _, d := range shape {
		if d < 0 {
			return 0, fmt.Errorf("negative dimension in shape %v", shape)
		}
		if d != 0 && n > math.MaxInt64/4/int64(d) {
			return 0, fmt.Errorf("shape %v is too large", shape)
		}
		n *= int64(d)
	}
	return n, nil
}

// F16ToF32 converts an IEEE binary16 value exactly.
func F16ToF32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f: // inf or NaN; keep the payload
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case exp != 0:
		return math.Float32frombits(sign | (exp+112)<<23 | mant<<13)
	case mant == 0:
		return math.Float32frombits(sign)
	}
	// Subnormal: normalise. value = mant * 2^-24.
	e := uint32(113)
	for mant&0x400 == 0 {
		mant <<= 1
		e--
	}
	return math.Float32frombits(sign | e<<23 | (mant&0x3ff)<<13)
}

// F32ToF16 converts to binary16 with round-to-nearest-even; out-of-range
// values become infinities and NaNs stay NaN.
func F32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23) & 0xff
	mant := b & 0x7fffff
	if exp == 0xff {
		if mant != 0 {
			return sign | 0x7e00 | uint16(mant>>13) // quiet NaN
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 {
		// Subnormal half (or zero): shift the full significand into place.
		if e < -10 {
			return sign
		}
		m := mant | 0x800000
		shift := uint32(14 - e)
		half := m >> shift
		rem := m & (1<<shift - 1)
		mid := uint32(1) << (shift - 1)
		if rem > mid || (rem == mid && half&1 == 1) {
			half++
		}
		return sign | uint16(half)
	}
	half := uint32(e)<<10 | mant>>13
	rem := mant & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && half&1 == 1) {
		half++ // may carry into the exponent, up to infinity: correct
	}
	return sign | uint16(half)
}

// BF16ToF32 converts a bfloat16 value exactly.
func BF16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// F32ToBF16 converts to bfloat16 with round-to-nearest-even.
func F32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x40 // quiet NaN
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// decodeInto converts raw little-endian elements of dtype d into dst.
func decodeInto(dst []float32, raw []byte, d DType) error {
	switch d {
	case F32:
		parallelFor(len(dst), func(lo, hi int) {
			for i := lo; i < hi; i++ {
				dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
			}
		})
	case F16:
		parallelFor(len(dst), func(lo, hi int) {
			for i := lo; i < hi; i++ {
				dst[i] = F16ToF32(binary.LittleEndian.Uint16(raw[2*i:]))
			}
		})
	case BF16:
		parallelFor(len(dst), func(lo, hi int) {
			for i := lo; i < hi; i++ {
				dst[i] = BF16ToF32(binary.LittleEndian.Uint16(raw[2*i:]))
			}
		})
	default:
		if d.Known() && d != I8 && d != I16 && d != I32 && d != I64 && d != F64 {
			return fmt.Errorf("quantised type %s not supported yet", d)
		}
		return fmt.Errorf("element type %s is not supported (lagc reads f32, f16 and bf16)", d)
	}
	return nil
}

// encode converts float32 values to dtype d, appending to dst.
func encode(dst []byte, src []float32, d DType) []byte {
	es := 4
	if d != F32 {
		es = 2
	}
	off := len(dst)
	dst = append(dst, make([]byte, es*len(src))...)
	out := dst[off:]
	switch d {
	case F32:
		parallelFor(len(src), func(lo, hi int) {
			for i := lo; i < hi; i++ {
				binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(src[i]))
			}
		})
	case F16:
		parallelFor(len(src), func(lo, hi int) {
			for i := lo; i < hi; i++ {
				binary.LittleEndian.PutUint16(out[2*i:], F32ToF16(src[i]))
			}
		})
	default:
		parallelFor(len(src), func(lo, hi int) {
			for i := lo; i < hi; i++ {
				binary.LittleEndian.PutUint16(out[2*i:], F32ToBF16(src[i]))
			}
		})
	}
	return dst
}

// parallelFor splits [0, n) across cores when n is large enough to pay for it.
func parallelFor(n int, f func(lo, hi int)) {
	const grain = 1 << 16
	workers := runtime.GOMAXPROCS(0)
	if n < 2*grain || workers < 2 {
		f(0, n)
		return
	}
	if w := n / grain; w < workers {
		workers = w
	}
	var wg sync.WaitGroup
	step := (n + workers - 1) / workers
	for lo := 0; lo < n; lo += step {
		hi := min(lo+step, n)
		wg.Add(1)
		go func() { defer wg.Done(); f(lo, hi) }()
	}
	wg.Wait()
}
