// Package quant implements ggml's tensor element types: the block layouts of
// ggml-common.h, dequantisation bitwise equal to gguf-py's reference
// (gguf.quants.dequantize), and quantisation following ggml's reference
// quantisers (ggml-quants.c, without an importance matrix). The plain types
// F32, F16 and BF16 go through the same functions, so callers need no special
// case for them.
package quant

import (
	"fmt"
	"math"
	"strings"
)

// Type is a tensor element type, numbered as ggml's enum ggml_type so GGUF
// tensor infos map onto it directly.
type Type uint32

// The ggml types. Known reports which of them this package knows the layout
// of; Supported which of them it can convert.
const (
	F32     Type = 0
	F16     Type = 1
	Q4_0    Type = 2
	Q4_1    Type = 3
	Q5_0    Type = 6
	Q5_1    Type = 7
	Q8_0    Type = 8
	Q8_1    Type = 9
	Q2_K    Type = 10
	Q3_K    Type = 11
	Q4_K    Type = 12
	Q5_K    Type = 13
	Q6_K    Type = 14
	Q8_K    Type = 15
	IQ2_XXS Type = 16
	IQ2_XS  Type = 17
	IQ3_XXS Type = 18
	IQ1_S   Type = 19
	IQ4_NL  Type = 20
	IQ3_S   Type = 21
	IQ2_S   Type = 22
	IQ4_XS  Type = 23
	I8      Type = 24
	I16     Type = 25
	I32     Type = 26
	I64     Type = 27
	F64     Type = 28
	IQ1_M   Type = 29
	BF16    Type = 30
	TQ1_0   Type = 34
	TQ2_0   Type = 35
	MXFP4   Type = 39
	NVFP4   Type = 40
)

// QK is the number of weights in a k-quant or IQ4_XS super-block.
const QK = 256

type traits struct {
	name       string
	blockElems int // elements per block
	blockBytes int // bytes per block
	dequant    func(dst []float32, src []byte)
	quant      func(dst []byte, src []float32)
}

// table lists every type ggml defines, with the block and byte sizes of
// gguf-py's GGML_QUANT_SIZES. dequant and quant are set, for the types this
// package converts, by the files that implement them.
var table = map[Type]*traits{
	F32: {name: "f32", blockElems: 1, blockBytes: 4}, F16: {name: "f16", blockElems: 1, blockBytes: 2},
	BF16: {name: "bf16", blockElems: 1, blockBytes: 2},
	Q4_0: {name: "q4_0", blockElems: 32, blockBytes: 18}, Q4_1: {name: "q4_1", blockElems: 32, blockBytes: 20},
	Q5_0: {name: "q5_0", blockElems: 32, blockBytes: 22}, Q5_1: {name: "q5_1", blockElems: 32, blockBytes: 24},
	Q8_0: {name: "q8_0", blockElems: 32, blockBytes: 34}, Q8_1: {name: "q8_1", blockElems: 32, blockBytes: 36},
	Q2_K: {name: "q2_k", blockElems: QK, blockBytes: 84}, Q3_K: {name: "q3_k", blockElems: QK, blockBytes: 110},
	Q4_K: {name: "q4_k", blockElems: QK, blockBytes: 144}, Q5_K: {name: "q5_k", blockElems: QK, blockBytes: 176},
	Q6_K: {name: "q6_k", blockElems: QK, blockBytes: 210}, Q8_K: {name: "q8_k", blockElems: QK, blockBytes: 292},
	IQ2_XXS: {name: "iq2_xxs", blockElems: QK, blockBytes: 66}, IQ2_XS: {name: "iq2_xs", blockElems: QK, blockBytes: 74},
	IQ3_XXS: {name: "iq3_xxs", blockElems: QK, blockBytes: 98}, IQ1_S: {name: "iq1_s", blockElems: QK, blockBytes: 50},
	IQ4_NL: {name: "iq4_nl", blockElems: 32, blockBytes: 18}, IQ3_S: {name: "iq3_s", blockElems: QK, blockBytes: 110},
	IQ2_S: {name: "iq2_s", blockElems: QK, blockBytes: 82}, IQ4_XS: {name: "iq4_xs", blockElems: QK, blockBytes: 136},
	IQ1_M: {name: "iq1_m", blockElems: QK, blockBytes: 56},
	I8:    {name: "i8", blockElems: 1, blockBytes: 1}, I16: {name: "i16", blockElems: 1, blockBytes: 2},
	I32: {name: "i32", blockElems: 1, blockBytes: 4}, I64: {name: "i64", blockElems: 1, blockBytes: 8},
	F64:   {name: "f64", blockElems: 1, blockBytes: 8},
	TQ1_0: {name: "tq1_0", blockElems: QK, blockBytes: 54}, TQ2_0: {name: "tq2_0", blockElems: QK, blockBytes: 66},
	MXFP4: {name: "mxfp4", blockElems: 32, blockBytes: 17}, NVFP4: {name: "nvfp4", blockElems: 64, blockBytes: 36},
}

// String returns the type's name as gguf-py spells it, in lower case
// ("q4_k").
func (t Type) String() string {
	if tr, ok := table[t]; ok {
		return tr.name
	}
	return fmt.Sprintf("ggml_type(%d)", uint32(t))
}

// ParseType parses a type name ("q4_k", "Q4_K", "f32"; "float32",
// "float16" and "bfloat16" too).
func ParseType(s string) (Type, error) {
	l := strings.ToLower(strings.TrimSpace(s))
	switch l {
	case "float32":
		return F32, nil
	case "float16":
		return F16, nil
	case "bfloat16":
		return BF16, nil
	}
	for t, tr := range table {
		if tr.name == l {
			return t, nil
		}
	}
	return 0, fmt.Errorf("unknown type %q: want one of %s", s, strings.Join(Names(), ", "))
}

// Names lists the types Dequantize supports, in ggml's order.
func Names() []string {
	var out []string
	for t := Type(0); t <= NVFP4; t++ {
		if t.Supported() {
			out = append(out, t.String())
		}
	}
	return out
}

// Known reports whether t is a ggml type whose block size this package
// knows (so sizes of tensors of t can be checked).
func (t Type) Known() bool { _, ok := table[t]; return ok }

// Supported reports whether Dequantize converts t.
func (t Type) Supported() bool { tr, ok := table[t]; return ok && tr.dequant != nil }

// CanQuantize reports whether Quantize produces t.
func (t Type) CanQuantize() bool { tr, ok := table[t]; return ok && tr.quant != nil }

// Float reports whether t is one of the plain float types f32, f16, bf16.
func (t Type) Float() bool { return t == F32 || t == F16 || t == BF16 }

// Quantized reports whether t stores blocks of several weights.
func (t Type) Quantized() bool { tr, ok := table[t]; return ok && tr.blockElems > 1 }

// BlockElems is the number of weights in one block (1 for plain types, 0
// for an unknown type).
func (t Type) BlockElems() int {
	if tr, ok := table[t]; ok {
		return tr.blockElems
	}
	return 0
}

// BlockBytes is the size of one block in bytes (0 for an unknown type).
func (t Type) BlockBytes() int {
	if tr, ok := table[t]; ok {
		return tr.blockBytes
	}
	return 0
}

// BitsPerWeight is the storage cost of one weight.
func (t Type) BitsPerWeight() float64 {
	tr, ok := table[t]
	if !ok {
		return 0
	}
	return 8 * float64(tr.blockBytes) / float64(tr.blockElems)
}

// RowBytes returns the size of n elements of t: an error if t is unknown, n
// is negative or not a whole number of blocks, or the size overflows.
func (t Type) RowBytes(n int) (int64, error) { return t.Bytes(int64(n)) }

// Bytes is RowBytes for an element count that may exceed int.
func (t Type) Bytes(n int64) (int64, error) {
	tr, ok := table[t]
	if !ok {
		return 0, fmt.Errorf("unknown ggml type %d", uint32(t))
	}
	if n < 0 {
		return 0, fmt.Errorf("negative element count %d", n)
	}
	be := int64(tr.blockElems)
	if n%be != 0 {
		return 0, fmt.Errorf("%d elements are not a whole number of %s blocks of %d", n, tr.name, be)
	}
	blocks := n / be
	if blocks > math.MaxInt64/int64(tr.blockBytes) {
		return 0, fmt.Errorf("%d elements of %s are too large", n, tr.name)
	}
	return blocks * int64(tr.blockBytes), nil
}

// checkSizes validates the lengths of a conversion between n elements and
// b bytes of t and returns its traits.
func checkSizes(t Type, n, b int, op string) (*traits, error) {
	tr, ok := table[t]
	if !ok {
		return nil, fmt.Errorf("%s: unknown ggml type %d", op, uint32(t))
	}
	want, err := t.RowBytes(n)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	if int64(b) != want {
		return nil, fmt.Errorf("%s: %d %s elements take %d bytes, got %d", op, n, tr.name, want, b)
	}
	return tr, nil
}

// Dequantize converts len(dst) elements of type t from src into dst.
// len(dst) must be a multiple of t.BlockElems() and len(src) must be
// t.RowBytes(len(dst)). The results are bitwise those of gguf-py's
// gguf.quants.dequantize (and of ggml's dequantize_row_* functions).
func Dequantize(t Type, dst []float32, src []byte) error {
	tr, err := checkSizes(t, len(dst), len(src), "dequantize")
	if err != nil {
		return err
	}
	if tr.dequant == nil {
		return fmt.Errorf("dequantize: type %s is not supported (supported: %s)", tr.name, strings.Join(Names(), ", "))
	}
	tr.dequant(dst, src)
	return nil
}

// Quantize converts src into len(src) elements of type t in dst, with
// ggml's reference quantiser for t (no importance matrix). len(src) must be
// a multiple of t.BlockElems() and len(dst) must be t.RowBytes(len(src)).
// Rows are independent: quantising a tensor row by row or all at once gives
// the same bytes.
func Quantize(t Type, dst []byte, src []float32) error {
	tr, err := checkSizes(t, len(src), len(dst), "quantize")
	if err != nil {
		return err
	}
	if tr.quant == nil {
		return fmt.Errorf("quantize: lagc cannot produce type %s", tr.name)
	}
	tr.quant(dst, src)
	return nil
}
