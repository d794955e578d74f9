package cuda

import "fmt"

// DType is an element type a kernel template is instantiated for.
type DType uint8

// The dtypes kernels are instantiated for. Their C++ spellings (CType) are
// defined by kernels/prelude.cuh.
const (
	F32 DType = iota + 1
	F16
	BF16
	F64
	I8
	U8
	I16
	U16
	I32
	U32
	I64
	U64
)

var dtypeInfo = [...]struct {
	name, ctype string
	size        int
}{
	F32:  {"f32", "float", 4},
	F16:  {"f16", "half_t", 2},
	BF16: {"bf16", "bf16_t", 2},
	F64:  {"f64", "double", 8},
	I8:   {"i8", "signed char", 1},
	U8:   {"u8", "unsigned char", 1},
	I16:  {"i16", "short", 2},
	U16:  {"u16", "unsigned short", 2},
	I32:  {"i32", "int", 4},
	U32:  {"u32", "unsigned int", 4},
	I64:  {"i64", "long long", 8},
	U64:  {"u64", "unsigned long long", 8},
}

func (d DType) valid() bool { return d >= F32 && int(d) < len(dtypeInfo) }

// String is the short name: "f32", "f16", "bf16", "i32"...
func (d DType) String() string {
	if !d.valid() {
		return fmt.Sprintf("dtype(%d)", uint8(d))
	}
	return dtypeInfo[d].name
}

// CType is the C++ type a kernel template is instantiated with.
func (d DType) CType() string {
	if !d.valid() {
		return ""
	}
	return dtypeInfo[d].ctype
}

// Size is the element size in bytes.
func (d DType) Size() int {
	if !d.valid() {
		return 0
	}
	return dtypeInfo[d].size
}

// ParseDType reads a short name as printed by String.
func ParseDType(s string) (DType, error) {
	for i := range dtypeInfo {
		if d := DType(i); d.valid() && dtypeInfo[i].name == s {
			return d, nil
		}
	}
	return 0, fmt.Errorf("cuda: unknown dtype %q", s)
}
