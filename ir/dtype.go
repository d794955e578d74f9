package ir

import (
	"fmt"
	"strings"

	"lagc/quant"
)

// DType is the element type of a value.
type DType uint8

// Element types. The plain ones are constants; the block-quantised weight
// types follow them, one per block type the quant package converts (in
// ggml's order), named as gguf-py names them: Q8_0, Q4_K and so on.
const (
	Invalid DType = iota
	F32
	F16
	BF16
	I32
)

// Q8_0 is the quantised type tests name directly.
var Q8_0 = mustQuant(quant.Q8_0)

type dtypeTraits struct {
	name       string
	blockSize  int // elements per block
	blockBytes int // bytes per block
	float      bool
	q          quant.Type // the storage type; quant.F32 etc. for plain floats
}

var dtypeInfo = func() []dtypeTraits {
	info := []dtypeTraits{
		Invalid: {"invalid", 1, 0, false, 0},
		F32:     {"f32", 1, 4, true, quant.F32},
		F16:     {"f16", 1, 2, true, quant.F16},
		BF16:    {"bf16", 1, 2, true, quant.BF16},
		I32:     {"i32", 1, 4, false, quant.I32},
	}
	for t := range quant.Type(256) {
		if t.Quantized() && t.Supported() {
			info = append(info, dtypeTraits{t.String(), t.BlockElems(), t.BlockBytes(), true, t})
		}
	}
	return info
}()

func mustQuant(t quant.Type) DType {
	d, ok := FromQuant(t)
	if !ok {
		// quant is linked into every binary with the types it converts;
		// a type named here that it lacks is a build error in disguise.
		panic(fmt.Sprintf("ir: quant does not convert %s", t))
	}
	return d
}

// FromQuant returns the dtype of a ggml storage type, if the IR has one.
func FromQuant(t quant.Type) (DType, bool) {
	for i, d := range dtypeInfo {
		if i != int(Invalid) && d.q == t {
			return DType(i), true
		}
	}
	return Invalid, false
}

func (t DType) valid() bool { return t > Invalid && int(t) < len(dtypeInfo) }

// String returns the name used in YAML and the IR text form.
func (t DType) String() string {
	if int(t) < len(dtypeInfo) {
		return dtypeInfo[t].name
	}
	return fmt.Sprintf("dtype(%d)", int(t))
}

// Quant returns the ggml storage type of t (quant.F32 for f32, and so on).
func (t DType) Quant() quant.Type {
	if !t.valid() {
		return quant.Type(^uint32(0))
	}
	return dtypeInfo[t].q
}

// IsFloat reports whether t holds real numbers (plain or quantised).
func (t DType) IsFloat() bool { return t.valid() && dtypeInfo[t].float }

// IsQuantized reports whether t is a block-quantised weight type.
func (t DType) IsQuantized() bool { return t.valid() && dtypeInfo[t].blockSize > 1 }

// BlockSize is the number of elements stored together (1 for plain types).
func (t DType) BlockSize() int {
	if !t.valid() {
		return 1
	}
	return dtypeInfo[t].blockSize
}

// Bytes returns the storage size of n elements of type t; n must be a
// multiple of the block size for quantised types (rounded up otherwise).
func (t DType) Bytes(n int64) int64 {
	if !t.valid() {
		return 0
	}
	bs := int64(dtypeInfo[t].blockSize)
	return (n + bs - 1) / bs * int64(dtypeInfo[t].blockBytes)
}

// ParseDType parses a dtype name such as "bf16" or "q4_k".
func ParseDType(s string) (DType, error) {
	for i := range dtypeInfo {
		if i != int(Invalid) && dtypeInfo[i].name == s {
			return DType(i), nil
		}
	}
	return Invalid, fmt.Errorf("unknown dtype %q (want one of %s)", s, strings.Join(DTypeNames(), ", "))
}

// DTypeNames lists every valid dtype name.
func DTypeNames() []string {
	var out []string
	for i := range dtypeInfo {
		if i != int(Invalid) {
			out = append(out, dtypeInfo[i].name)
		}
	}
	return out
}
