package ir

import (
	"fmt"
	"strings"
)

// DType is the element type of a value.
type DType uint8

// Element types. Quantised weight types are stored in blocks: BlockSize
// elements take BlockBytes bytes.
const (
	Invalid DType = iota
	F32
	F16
	BF16
	I32
	Q8_0 // GGML q8_0: blocks of 32 int8 with one f16 scale
	Q4_0 // GGML q4_0: blocks of 32 4-bit values with one f16 scale
	Q4_K // GGML k-quants: super-blocks of 256
	Q5_K
	Q6_K
)

var dtypeInfo = [...]struct {
	name       string
	blockSize  int // elements per block
	blockBytes int // bytes per block
	float      bool
}{
	Invalid: {"invalid", 1, 0, false},
	F32:     {"f32", 1, 4, true},
	F16:     {"f16", 1, 2, true},
	BF16:    {"bf16", 1, 2, true},
	I32:     {"i32", 1, 4, false},
	Q8_0:    {"q8_0", 32, 34, true},
	Q4_0:    {"q4_0", 32, 18, true},
	Q4_K:    {"q4_k", 256, 144, true},
	Q5_K:    {"q5_k", 256, 176, true},
	Q6_K:    {"q6_k", 256, 210, true},
}

func (t DType) valid() bool { return t > Invalid && int(t) < len(dtypeInfo) }

// String returns the name used in YAML and the IR text form.
func (t DType) String() string {
	if int(t) < len(dtypeInfo) {
		return dtypeInfo[t].name
	}
	return fmt.Sprintf("dtype(%d)", int(t))
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

// ParseDType parses a dtype name such as "bf16".
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
