package ckpt

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"sort"
)

// stTensor is one entry of a safetensors header, with absolute file offsets.
type stTensor struct {
	name       string
	dtype      DType
	shape      []int
	begin, end int64 // byte range in the file
}

// maxSTHeader bounds the JSON header, as the safetensors format does.
const maxSTHeader = 100 << 20

var stDTypes = map[string]DType{"F32": F32, "F16": F16, "BF16": BF16}

// parseSafetensors parses a whole safetensors file (header and data) and
// checks every tensor's offsets and size against the file.
func parseSafetensors(data []byte) ([]stTensor, error) {
	if len(data) < 8 {
		return nil, fmt.Errorf("file of %d bytes is too short for a safetensors header", len(data))
	}
	hlen := binary.LittleEndian.Uint64(data)
	if hlen > maxSTHeader {
		return nil, fmt.Errorf("header length %d exceeds the %d-byte limit: not a safetensors file?", hlen, maxSTHeader)
	}
	if hlen > uint64(len(data)-8) {
		return nil, fmt.Errorf("header length %d runs past the end of the %d-byte file: the file is truncated", hlen, len(data))
	}
	header := data[8 : 8+hlen]
	base := int64(8 + hlen)
	var raw map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(header))
	dec.UseNumber()
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("header is not a JSON object: %w", err)
	}
	if raw == nil {
		return nil, fmt.Errorf("header is not a JSON object")
	}
	// Writers pad the header with spaces; anything else after the object is
	// garbage, which the safetensors library rejects too.
	end := dec.InputOffset()
	if rest := bytes.TrimLeft(header[end:], " \t\r\n"); len(rest) > 0 {
		return nil, fmt.Errorf("header has %d bytes after its JSON object (at byte %d of the %d-byte header), not only space padding", len(header)-int(end), end, hlen)
	}
	out := make([]stTensor, 0, len(raw))
	for name, msg := range raw {
		if name == "__metadata__" {
			continue
		}
		var t struct {
			DType       string  `json:"dtype"`
			Shape       []int64 `json:"shape"`
			DataOffsets []int64 `json:"data_offsets"`
		}
		if err := json.Unmarshal(msg, &t); err != nil {
			return nil, fmt.Errorf("tensor %q: bad header entry: %w", name, err)
		}
		dt, ok := stDTypes[t.DType]
		if !ok {
			return nil, fmt.Errorf("tensor %q has dtype %q: lagc reads F32, F16 and BF16", name, t.DType)
		}
		if len(t.DataOffsets) != 2 {
			return nil, fmt.Errorf("tensor %q: data_offsets must have 2 entries, has %d", name, len(t.DataOffsets))
		}
		shape := make([]int, len(t.Shape))
		for i, d := range t.Shape {
			if d < 0 || d > 1<<40 {
				return nil, fmt.Errorf("tensor %q: bad dimension %d in shape %v", name, d, t.Shape)
			}
			shape[i] = int(d)
		}
		n, err := numElements(shape)
		if err != nil {
			return nil, fmt.Errorf("tensor %q: %w", name, err)
		}
		size, _ := dt.Bytes(n)
		b, e := t.DataOffsets[0], t.DataOffsets[1]
		if b < 0 || e < b {
			return nil, fmt.Errorf("tensor %q: bad data_offsets [%d, %d]", name, b, e)
		}
		if e-b != size {
			return nil, fmt.Errorf("tensor %q: data_offsets [%d, %d] hold %d bytes, but %s %v needs %d",
				name, b, e, e-b, t.DType, t.Shape, size)
		}
		if e > math.MaxInt64-base {
			// base+e would overflow; such a tensor cannot lie in the file.
			return nil, fmt.Errorf("tensor %q: data_offsets [%d, %d] lie past the end of the file (%d bytes): the file is truncated or corrupt",
				name, b, e, len(data))
		}
		out = append(out, stTensor{name: name, dtype: dt, shape: shape, begin: base + b, end: base + e})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].begin != out[j].begin {
			return out[i].begin < out[j].begin
		}
		return out[i].name < out[j].name
	})
	// Report the first tensor (by offset) that the file does not hold.
	for i, t := range out {
		if t.end > int64(len(data)) {
			more := ""
			if n := len(out) - i - 1; n > 0 {
				more = fmt.Sprintf(" (and %d more after it)", n)
			}
			return nil, fmt.Errorf("tensor %q: its bytes [%d, %d) of the file lie past the end of the file (%d bytes)%s: the file is truncated",
				t.name, t.begin, t.end, len(data), more)
		}
	}
	spans := make([]byteSpan, len(out))
	for i, t := range out {
		spans[i] = byteSpan{t.name, t.begin, t.end}
	}
	if err := checkOverlaps(spans); err != nil {
		return nil, err
	}
	return out, nil
}
