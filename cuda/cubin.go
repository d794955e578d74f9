package cuda

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"sort"
)

// Attribute records of a cubin's .nv.info.<kernel> section: a format byte,
// an attribute byte, then a 16-bit value, or for EIFMT_SVAL a 16-bit size
// and that many bytes.
const (
	eifmtSVal       = 0x04
	eiattrKParamInf = 0x17 // EIATTR_KPARAM_INFO: index u32, ordinal u16, offset u16, flags u32 (size in bits 18-31)
)

// CubinParamSizes reads the parameter sizes in bytes, in order, of the
// kernel lowered (its mangled name) from a cubin's .nv.info section: what
// cuFuncGetParamInfo reports once the cubin is loaded, read here without a
// driver so that a launch's arguments can be checked against the kernel on a
// machine with NVRTC alone.
func CubinParamSizes(cubin []byte, lowered string) ([]int, error) {
	raw := append([]byte(nil), cubin...)
	if len(raw) < 0x18 {
		return nil, fmt.Errorf("cubin of %d bytes is not an ELF file", len(raw))
	}
	// CUDA keeps its ABI version in e_version, which debug/elf insists is 1.
	binary.LittleEndian.PutUint32(raw[0x14:], 1)
	f, err := elf.NewFile(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("cubin: %w", err)
	}
	name := ".nv.info." + lowered
	s := f.Section(name)
	if s == nil {
		return nil, fmt.Errorf("cubin has no %s section", name)
	}
	b, err := s.Data()
	if err != nil {
		return nil, fmt.Errorf("cubin %s: %w", name, err)
	}
	type param struct{ ordinal, size int }
	var ps []param
	for i := 0; i+4 <= len(b); {
		format, attr := b[i], b[i+1]
		if format != eifmtSVal {
			i += 4
			continue
		}
		n := int(binary.LittleEndian.Uint16(b[i+2:]))
		if i+4+n > len(b) {
			return nil, fmt.Errorf("cubin %s: attribute at byte %d runs %d bytes past the section's %d", name, i, i+4+n-len(b), len(b))
		}
		if attr == eiattrKParamInf {
			if n < 12 {
				return nil, fmt.Errorf("cubin %s: parameter record of %d bytes, want 12", name, n)
			}
			p := b[i+4 : i+4+n]
			ps = append(ps, param{int(binary.LittleEndian.Uint16(p[4:])), int(binary.LittleEndian.Uint32(p[8:]) >> 18)})
		}
		i += 4 + n
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i].ordinal < ps[j].ordinal })
	sizes := make([]int, len(ps))
	for i, p := range ps {
		if p.ordinal != i {
			return nil, fmt.Errorf("cubin %s: parameter ordinals skip %d", name, i)
		}
		sizes[i] = p.size
	}
	return sizes, nil
}
