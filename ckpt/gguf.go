package ckpt

import (
	"encoding/binary"
	"fmt"
	"math"
)

// GGUFType is the type tag of a GGUF metadata value.
type GGUFType uint32

// GGUF metadata value types.
const (
	GGUFUint8 GGUFType = iota
	GGUFInt8
	GGUFUint16
	GGUFInt16
	GGUFUint32
	GGUFInt32
	GGUFFloat32
	GGUFBool
	GGUFString
	GGUFArray
	GGUFUint64
	GGUFInt64
	GGUFFloat64
)

// ggufMagic is "GGUF" read as a little-endian uint32.
const ggufMagic = 0x46554747

// Limits that keep a hostile header from asking for absurd work.
const (
	ggufMaxDims     = 4 // GGML_MAX_DIMS
	ggufMaxDepth    = 16
	ggufDefaultAlig = 32
)

// ggufTensor is one tensor info of a GGUF header.
type ggufTensor struct {
	name   string
	ne     []uint64 // ggml order: innermost first
	typ    DType
	offset uint64 // relative to the data section
	size   int64
}

// ggufFile is a parsed GGUF header. Metadata values are Go values:
// uint8 ... float64, bool and string for scalars; typed slices ([]uint32,
// []string, ...) for arrays of scalars; []any of such for nested arrays.
type ggufFile struct {
	version   uint32
	kv        map[string]any
	keys      []string
	tensors   []ggufTensor
	alignment int64
	dataStart int64
}

type ggufReader struct {
	data []byte
	pos  int
}

func (r *ggufReader) need(n uint64, what string) error {
	if n > uint64(len(r.data)-r.pos) {
		return fmt.Errorf("%s at byte %d needs %d bytes, but the file ends at byte %d: the file is truncated", what, r.pos, n, len(r.data))
	}
	return nil
}

func (r *ggufReader) u8(what string) (uint8, error) {
	if err := r.need(1, what); err != nil {
		return 0, err
	}
	r.pos++
	return r.data[r.pos-1], nil
}

func (r *ggufReader) u16(what string) (uint16, error) {
	if err := r.need(2, what); err != nil {
		return 0, err
	}
	r.pos += 2
	return binary.LittleEndian.Uint16(r.data[r.pos-2:]), nil
}

func (r *ggufReader) u32(what string) (uint32, error) {
	if err := r.need(4, what); err != nil {
		return 0, err
	}
	r.pos += 4
	return binary.LittleEndian.Uint32(r.data[r.pos-4:]), nil
}

func (r *ggufReader) u64(what string) (uint64, error) {
	if err := r.need(8, what); err != nil {
		return 0, err
	}
	r.pos += 8
	return binary.LittleEndian.Uint64(r.data[r.pos-8:]), nil
}

func (r *ggufReader) str(what string) (string, error) {
	n, err := r.u64(what + " length")
	if err != nil {
		return "", err
	}
	if err := r.need(n, what); err != nil {
		return "", err
	}
	s := string(r.data[r.pos : r.pos+int(n)])
	r.pos += int(n)
	return s, nil
}

// minValueSize is the fewest bytes one value of type t occupies.
func minValueSize(t GGUFType) uint64 {
	switch t {
	case GGUFUint8, GGUFInt8, GGUFBool:
		return 1
	case GGUFUint16, GGUFInt16:
		return 2
	case GGUFUint32, GGUFInt32, GGUFFloat32:
		return 4
	case GGUFArray:
		return 12
	}
	return 8 // string length, 64-bit scalars
}

func (r *ggufReader) value(t GGUFType, key string, depth int) (any, error) {
	switch t {
	case GGUFUint8:
		return r.u8(key)
	case GGUFInt8:
		v, err := r.u8(key)
		return int8(v), err
	case GGUFUint16:
		return r.u16(key)
	case GGUFInt16:
		v, err := r.u16(key)
		return int16(v), err
	case GGUFUint32:
		return r.u32(key)
	case GGUFInt32:
		v, err := r.u32(key)
		return int32(v), err
	case GGUFFloat32:
		v, err := r.u32(key)
		return math.Float32frombits(v), err
	case GGUFBool:
		v, err := r.u8(key)
		if err == nil && v > 1 {
			return nil, fmt.Errorf("%s: bool value %d is neither 0 nor 1", key, v)
		}
		return v == 1, err
	case GGUFString:
		return r.str(key)
	case GGUFUint64:
		return r.u64(key)
	case GGUFInt64:
		v, err := r.u64(key)
		return int64(v), err
	case GGUFFloat64:
		v, err := r.u64(key)
		return math.Float64frombits(v), err
	case GGUFArray:
		return r.array(key, depth)
	}
	return nil, fmt.Errorf("%s: unknown metadata value type %d", key, uint32(t))
}

func (r *ggufReader) array(key string, depth int) (any, error) {
	if depth >= ggufMaxDepth {
		return nil, fmt.Errorf("%s: arrays nested deeper than %d", key, ggufMaxDepth)
	}
	et, err := r.u32(key + " array type")
	if err != nil {
		return nil, err
	}
	n, err := r.u64(key + " array length")
	if err != nil {
		return nil, err
	}
	t := GGUFType(et)
	if t > GGUFFloat64 {
		return nil, fmt.Errorf("%s: unknown array element type %d", key, et)
	}
	if n > uint64(len(r.data)-r.pos)/minValueSize(t) {
		return nil, fmt.Errorf("%s: array of %d elements cannot fit in the %d bytes left in the file: the file is truncated or corrupt", key, n, len(r.data)-r.pos)
	}
	switch t {
	case GGUFArray:
		out := make([]any, n)
		for i := range out {
			if out[i], err = r.array(key, depth+1); err != nil {
				return nil, err
			}
		}
		return out, nil
	case GGUFString:
		out := make([]string, n)
		for i := range out {
			if out[i], err = r.str(key); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	return readScalars(r, t, key, int(n))
}

func readScalars(r *ggufReader, t GGUFType, key string, n int) (any, error) {
	var err error
	get := func() any {
		var v any
		if err == nil {
			v, err = r.value(t, key, 0)
		}
		return v
	}
	switch t {
	case GGUFUint8:
		return fill[uint8](n, get, &err)
	case GGUFInt8:
		return fill[int8](n, get, &err)
	case GGUFUint16:
		return fill[uint16](n, get, &err)
	case GGUFInt16:
		return fill[int16](n, get, &err)
	case GGUFUint32:
		return fill[uint32](n, get, &err)
	case GGUFInt32:
		return fill[int32](n, get, &err)
	case GGUFFloat32:
		return fill[float32](n, get, &err)
	case GGUFBool:
		return fill[bool](n, get, &err)
	case GGUFUint64:
		return fill[uint64](n, get, &err)
	case GGUFInt64:
		return fill[int64](n, get, &err)
	default:
		return fill[float64](n, get, &err)
	}
}

func fill[T any](n int, get func() any, err *error) (any, error) {
	out := make([]T, n)
	for i := range out {
		v := get()
		if *err != nil {
			return nil, *err
		}
		out[i] = v.(T)
	}
	return out, nil
}

// parseGGUF parses the header of a GGUF file held in data and checks every
// tensor's byte range against the file.
func parseGGUF(data []byte) (*ggufFile, error) {
	r := &ggufReader{data: data}
	magic, err := r.u32("magic")
	if err != nil {
		return nil, fmt.Errorf("not a GGUF file: %w", err)
	}
	if magic != ggufMagic {
		return nil, fmt.Errorf("not a GGUF file: magic is %q, want \"GGUF\"", data[:4])
	}
	g := &ggufFile{kv: map[string]any{}, alignment: ggufDefaultAlig}
	if g.version, err = r.u32("version"); err != nil {
		return nil, err
	}
	switch {
	case g.version == 2 || g.version == 3:
	case g.version == 3<<24 || g.version == 2<<24:
		return nil, fmt.Errorf("big-endian GGUF files are not supported")
	default:
		return nil, fmt.Errorf("GGUF version %d is not supported (lagc reads versions 2 and 3)", g.version)
	}
	nt, err := r.u64("tensor count")
	if err != nil {
		return nil, err
	}
	nkv, err := r.u64("metadata count")
	if err != nil {
		return nil, err
	}
	left := uint64(len(data) - r.pos)
	if nkv > left/13 {
		return nil, fmt.Errorf("header claims %d metadata entries, more than the file can hold", nkv)
	}
	for i := uint64(0); i < nkv; i++ {
		key, err := r.str(fmt.Sprintf("metadata key %d", i))
		if err != nil {
			return nil, err
		}
		t, err := r.u32(key + " type")
		if err != nil {
			return nil, err
		}
		v, err := r.value(GGUFType(t), key, 0)
		if err != nil {
			return nil, err
		}
		if _, dup := g.kv[key]; dup {
			return nil, fmt.Errorf("metadata key %q appears twice", key)
		}
		g.kv[key] = v
		g.keys = append(g.keys, key)
	}
	if v, ok := g.kv["general.alignment"]; ok {
		a, ok := asInt(v)
		if !ok || a <= 0 || a > 1<<30 || a&(a-1) != 0 {
			return nil, fmt.Errorf("general.alignment = %v: want a power of two", v)
		}
		g.alignment = a
	}
	left = uint64(len(data) - r.pos)
	if nt > left/24 {
		return nil, fmt.Errorf("header claims %d tensors, more than the file can hold", nt)
	}
	seen := map[string]bool{}
	for i := uint64(0); i < nt; i++ {
		var t ggufTensor
		if t.name, err = r.str(fmt.Sprintf("tensor %d name", i)); err != nil {
			return nil, err
		}
		if seen[t.name] {
			return nil, fmt.Errorf("tensor %q appears twice", t.name)
		}
		seen[t.name] = true
		nd, err := r.u32(t.name + " dimension count")
		if err != nil {
			return nil, err
		}
		if nd > ggufMaxDims {
			return nil, fmt.Errorf("tensor %s has %d dimensions; ggml allows at most %d", t.name, nd, ggufMaxDims)
		}
		t.ne = make([]uint64, nd)
		for j := range t.ne {
			if t.ne[j], err = r.u64(t.name + " dimension"); err != nil {
				return nil, err
			}
			if t.ne[j] > 1<<40 {
				return nil, fmt.Errorf("tensor %s: dimension %d is implausibly large", t.name, t.ne[j])
			}
		}
		typ, err := r.u32(t.name + " type")
		if err != nil {
			return nil, err
		}
		t.typ = DType(typ)
		if t.offset, err = r.u64(t.name + " offset"); err != nil {
			return nil, err
		}
		g.tensors = append(g.tensors, t)
	}
	g.dataStart = alignUp(int64(r.pos), g.alignment)
	spans := make([]byteSpan, 0, len(g.tensors))
	for i := range g.tensors {
		t := &g.tensors[i]
		if !t.typ.Known() {
			return nil, fmt.Errorf("tensor %s has ggml type %d, which lagc does not know", t.name, uint32(t.typ))
		}
		n, err := numElements(t.shape())
		if err != nil {
			return nil, fmt.Errorf("tensor %s: %w", t.name, err)
		}
		if err := checkRows(t.shape(), t.typ); err != nil {
			return nil, fmt.Errorf("tensor %s: %w", t.name, err)
		}
		if t.size, err = t.typ.Bytes(n); err != nil {
			return nil, fmt.Errorf("tensor %s: %w", t.name, err)
		}
		if t.offset%uint64(g.alignment) != 0 {
			return nil, fmt.Errorf("tensor %s: offset %d is not a multiple of the alignment %d", t.name, t.offset, g.alignment)
		}
		if t.offset > uint64(len(data)) || g.dataStart+int64(t.offset)+t.size > int64(len(data)) {
			return nil, ggufPastEnd(t.name, g.dataStart, t.offset, t.size, len(data))
		}
		spans = append(spans, byteSpan{t.name, g.dataStart + int64(t.offset), g.dataStart + int64(t.offset) + t.size})
	}
	if err := checkOverlaps(spans); err != nil {
		return nil, err
	}
	return g, nil
}

// shape returns the PyTorch-order shape (ggml's ne reversed).
func (t *ggufTensor) shape() []int {
	s := make([]int, len(t.ne))
	for i, d := range t.ne {
		s[len(s)-1-i] = int(d)
	}
	return s
}

func alignUp(x, a int64) int64 { return (x + a - 1) / a * a }

// asInt converts any integer metadata value to int64.
func asInt(v any) (int64, bool) {
	switch x := v.(type) {
	case uint8:
		return int64(x), true
	case int8:
		return int64(x), true
	case uint16:
		return int64(x), true
	case int16:
		return int64(x), true
	case uint32:
		return int64(x), true
	case int32:
		return int64(x), true
	case uint64:
		if x > math.MaxInt64 {
			return 0, false
		}
		return int64(x), true
	case int64:
		return x, true
	}
	return 0, false
}
