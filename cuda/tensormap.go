package cuda

import (
	"fmt"
	"unsafe"
)

// TensorMap is a CUtensorMap: the 128-byte descriptor a Hopper kernel's
// bulk tensor copies (TMA) read, passed by value as a __grid_constant__
// parameter.
type TensorMap [128]byte

// TensorMapArg is a tensor map as a launch argument, with the description
// traces and messages show for it.
type TensorMapArg struct {
	Map  TensorMap
	Desc string
}

func (a TensorMapArg) String() string { return a.Desc }

// TMA element types and swizzle modes (CUtensorMapDataType,
// CUtensorMapSwizzle).
const (
	tmaU8         = 0
	tmaBF16       = 9
	tmaSwizzleOff = 0
	tmaSwizzle128 = 3
	tmaL2Promo256 = 3
)

// TensorMapBF16 describes a row-major bf16 matrix of rows x cols at ptr,
// rows `ld` elements apart, read in boxes of boxRows x boxCols with the
// 128-byte swizzle wgmma expects (boxCols*2 must be at most 128). Reads
// past the matrix fill zeros.
func (d *Device) TensorMapBF16(ptr DevicePtr, rows, cols, ld int64, boxRows, boxCols int) (TensorMap, error) {
	return d.tensorMap2D(tmaBF16, 2, tmaSwizzle128, ptr, rows, cols, ld, boxRows, boxCols)
}

// TensorMapBytes describes a row-major byte matrix (block-quantised
// weights seen as bytes) of rows x cols, rows ld bytes apart, read in
// unswizzled boxes of boxRows x boxCols bytes (boxCols a multiple of 16).
func (d *Device) TensorMapBytes(ptr DevicePtr, rows, cols, ld int64, boxRows, boxCols int) (TensorMap, error) {
	if boxCols%16 != 0 {
		return TensorMap{}, fmt.Errorf("cuda: tensor map box of %d bytes: must be a multiple of 16", boxCols)
	}
	return d.tensorMap2D(tmaU8, 1, tmaSwizzleOff, ptr, rows, cols, ld, boxRows, boxCols)
}

func (d *Device) tensorMap2D(dtype, esize, swizzle int, ptr DevicePtr, rows, cols, ld int64, boxRows, boxCols int) (TensorMap, error) {
	var m TensorMap
	if d.api.tensorMapEncodeTiled == 0 {
		return m, fmt.Errorf("cuda: the driver has no cuTensorMapEncodeTiled (CUDA 12 or newer needed)")
	}
	switch {
	case rows <= 0 || cols <= 0 || ld < cols:
		return m, fmt.Errorf("cuda: tensor map of %d x %d (row stride %d): bad shape", rows, cols, ld)
	case ptr%16 != 0 || (ld*int64(esize))%16 != 0:
		return m, fmt.Errorf("cuda: tensor map: address %#x and row stride %d bytes must be multiples of 16", uint64(ptr), ld*int64(esize))
	case boxCols <= 0 || (swizzle == tmaSwizzle128 && boxCols*esize > 128) || boxCols > 256 || boxRows <= 0 || boxRows > 256:
		return m, fmt.Errorf("cuda: tensor map box %d x %d: at most 256 rows of 128 bytes", boxRows, boxCols)
	}
	dims := [2]uint64{uint64(cols), uint64(rows)}
	strides := [1]uint64{uint64(ld * int64(esize))}
	box := [2]uint32{uint32(boxCols), uint32(boxRows)}
	elem := [2]uint32{1, 1}
	// CUtensorMap is 64-byte aligned in C: encode into aligned scratch.
	scratch := make([]byte, len(m)+64)
	off := (64 - int(uintptr(unsafe.Pointer(&scratch[0]))%64)) % 64
	dst := scratch[off : off+len(m)]
	err := d.do(func() error {
		return d.api.err("cuTensorMapEncodeTiled", call(d.api.tensorMapEncodeTiled,
			uintptr(unsafe.Pointer(&dst[0])), uintptr(dtype), 2, uintptr(ptr),
			uintptr(unsafe.Pointer(&dims[0])), uintptr(unsafe.Pointer(&strides[0])),
			uintptr(unsafe.Pointer(&box[0])), uintptr(unsafe.Pointer(&elem[0])),
			0, uintptr(swizzle), tmaL2Promo256, 0))
	})
	copy(m[:], dst)
	return m, err
}
