package cuda

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Dim3 is a grid or block shape; zero Y or Z count as 1.
type Dim3 struct{ X, Y, Z uint32 }

// Dim builds a Dim3; missing dimensions are 1: Dim(256), Dim(64, 8).
func Dim(xyz ...uint32) Dim3 {
	d := Dim3{1, 1, 1}
	for i, v := range xyz {
		switch i {
		case 0:
			d.X = v
		case 1:
			d.Y = v
		case 2:
			d.Z = v
		}
	}
	return d
}

func (d Dim3) norm() Dim3 {
	if d.Y == 0 {
		d.Y = 1
	}
	if d.Z == 0 {
		d.Z = 1
	}
	return d
}

// RawArg passes a by-value struct parameter; its bytes must match the
// kernel's struct layout exactly.
type RawArg []byte

// maxParamBytes is CUDA's classic kernel parameter limit.
const maxParamBytes = 4096

// packArgs packs launch arguments: each at an 8-byte-aligned offset of buf,
// appending the offsets to offs. Go int, uint and uintptr are refused: their width
// would silently decide the parameter's.
func packArgs(buf []byte, offs []int, args []any, params []int, kernel string) ([]int, error) {
	if params != nil && len(args) != len(params) {
		return nil, fmt.Errorf("cuda: %s takes %d parameters, launch passed %d", kernel, len(params), len(args))
	}
	offs = offs[:0]
	off := 0
	for i, a := range args {
		off = (off + 7) &^ 7
		var n int
		put := func(size int) []byte {
			n = size
			if off+size > len(buf) {
				return nil
			}
			return buf[off : off+size]
		}
		var b []byte
		switch v := a.(type) {
		case DevicePtr:
			if b = put(8); b != nil {
				binary.LittleEndian.PutUint64(b, uint64(v))
			}
		case int64:
			if b = put(8); b != nil {
				binary.LittleEndian.PutUint64(b, uint64(v))
			}
		case uint64:
			if b = put(8); b != nil {
				binary.LittleEndian.PutUint64(b, v)
			}
		case float64:
			if b = put(8); b != nil {
				binary.LittleEndian.PutUint64(b, math.Float64bits(v))
			}
		case int32:
			if b = put(4); b != nil {
				binary.LittleEndian.PutUint32(b, uint32(v))
			}
		case uint32:
			if b = put(4); b != nil {
				binary.LittleEndian.PutUint32(b, v)
			}
		case float32:
			if b = put(4); b != nil {
				binary.LittleEndian.PutUint32(b, math.Float32bits(v))
			}
		case int16:
			if b = put(2); b != nil {
				binary.LittleEndian.PutUint16(b, uint16(v))
			}
		case uint16:
			if b = put(2); b != nil {
				binary.LittleEndian.PutUint16(b, v)
			}
		case int8:
			if b = put(1); b != nil {
				b[0] = byte(v)
			}
		case uint8:
			if b = put(1); b != nil {
				b[0] = v
			}
		case bool:
			if b = put(1); b != nil {
				b[0] = 0
				if v {
					b[0] = 1
				}
			}
		case RawArg:
			if b = put(len(v)); b != nil {
				copy(b, v)
			}
		case TensorMapArg:
			if b = put(len(v.Map)); b != nil {
				copy(b, v.Map[:])
			}
		case int, uint, uintptr:
			return nil, fmt.Errorf("cuda: %s argument %d is a Go %T; pass int32 or int64 (uint32 or uint64) to match the kernel", kernel, i, a)
		default:
			return nil, fmt.Errorf("cuda: %s argument %d has unsupported type %T", kernel, i, a)
		}
		if b == nil {
			return nil, fmt.Errorf("cuda: %s arguments exceed %d bytes", kernel, len(buf))
		}
		if params != nil && params[i] != n {
			return nil, fmt.Errorf("cuda: %s argument %d is a %T of %d bytes, the kernel's parameter has %d", kernel, i, a, n, params[i])
		}
		offs = append(offs, off)
		off += n
	}
	return offs, nil
}
