package cuda

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"sort"
)

// Attribute records of a cubin's .nv.info sections (.nv.info, and
// .nv.info.<kernel> for each kernel): a format byte, an attribute byte,
// then a 16-bit value, or for EIFMT_SVAL a 16-bit size and that many bytes.
const (
	eifmtSVal       = 0x04
	eiattrKParamInf = 0x17 // EIATTR_KPARAM_INFO: index u32, ordinal u16, offset u16, flags u32 (size in bits 18-31)
	eiattrFrameSize = 0x11 // EIATTR_FRAME_SIZE: symbol index u32, bytes u32
	eiattrRegCount  = 0x2f // EIATTR_REGCOUNT: symbol index u32, registers u32
)

// CubinParamSizes reads the parameter sizes in bytes, in order, of the
// kernel lowered (its mangled name) from a cubin's .nv.info section: what
// cuFuncGetParamInfo reports once the cubin is loaded, read here without a
// driver so that a launch's arguments can be checked against the kernel on a
// machine with NVRTC alone.
func CubinParamSizes(cubin []byte, lowered string) ([]int, error) {
	f, err := openCubin(cubin)
	if err != nil {
		return nil, err
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
	err = eachAttr(b, name, func(attr byte, v []byte) error {
		if attr != eiattrKParamInf {
			return nil
		}
		if len(v) < 12 {
			return fmt.Errorf("cubin %s: parameter record of %d bytes, want 12", name, len(v))
		}
		ps = append(ps, param{int(binary.LittleEndian.Uint16(v[4:])), int(binary.LittleEndian.Uint32(v[8:]) >> 18)})
		return nil
	})
	if err != nil {
		return nil, err
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

// openCubin parses a cubin as the ELF file it is.
func openCubin(cubin []byte) (*elf.File, error) {
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
	return f, nil
}

// eachAttr calls fn with each EIFMT_SVAL attribute of an .nv.info section
// (b, named name) and its value bytes; other formats carry a 16-bit value
// in the record and are skipped.
func eachAttr(b []byte, name string, fn func(attr byte, v []byte) error) error {
	for i := 0; i+4 <= len(b); {
		format, attr := b[i], b[i+1]
		if format != eifmtSVal {
			i += 4
			continue
		}
		n := int(binary.LittleEndian.Uint16(b[i+2:]))
		if i+4+n > len(b) {
			return fmt.Errorf("cubin %s: attribute at byte %d runs %d bytes past the section's %d", name, i, i+4+n-len(b), len(b))
		}
		if err := fn(attr, b[i+4:i+4+n]); err != nil {
			return err
		}
		i += 4 + n
	}
	return nil
}

// KernelResources is what one kernel of a cubin takes of a multiprocessor:
// registers and local memory a thread, and the size of its static shared
// memory section (dynamic shared memory is the launch's).
type KernelResources struct {
	Registers  int // per thread
	FrameBytes int // local memory per thread: the stack frame (spills, local arrays)
	// SharedSection is the bytes of .nv.shared.<kernel>, 0 where the kernel
	// declares no __shared__ variable. For sm_90a it starts with the 1 KiB
	// every block reserves for the system, so it is ptxas's "bytes smem"
	// plus 1024 (SMLimits.Shape takes the reserve out).
	SharedSection int
}

// CubinKernelResources reads the resources of the kernel lowered (its
// mangled name) from a cubin without a driver: its registers and frame
// from the EIATTR_REGCOUNT and EIATTR_FRAME_SIZE records of .nv.info (the
// records name the kernel by its symbol's index), and the size of its
// section .nv.shared.<lowered> (none: 0).
func CubinKernelResources(cubin []byte, lowered string) (KernelResources, error) {
	f, err := openCubin(cubin)
	if err != nil {
		return KernelResources{}, err
	}
	syms, err := f.Symbols()
	if err != nil {
		return KernelResources{}, fmt.Errorf("cubin symbols: %w", err)
	}
	index := -1
	for i, s := range syms {
		if s.Name == lowered {
			index = i + 1 // Symbols leaves out the null symbol, index 0
			break
		}
	}
	if index < 0 {
		return KernelResources{}, fmt.Errorf("cubin has no symbol %s", lowered)
	}
	info := f.Section(".nv.info")
	if info == nil {
		return KernelResources{}, fmt.Errorf("cubin has no .nv.info section")
	}
	b, err := info.Data()
	if err != nil {
		return KernelResources{}, fmt.Errorf("cubin .nv.info: %w", err)
	}
	var r KernelResources
	regs := false
	err = eachAttr(b, ".nv.info", func(attr byte, v []byte) error {
		if (attr != eiattrRegCount && attr != eiattrFrameSize) || len(v) < 8 || int(binary.LittleEndian.Uint32(v)) != index {
			return nil
		}
		n := int(binary.LittleEndian.Uint32(v[4:]))
		if attr == eiattrRegCount {
			r.Registers, regs = n, true
		} else {
			r.FrameBytes = n
		}
		return nil
	})
	if err != nil {
		return KernelResources{}, err
	}
	if !regs {
		return KernelResources{}, fmt.Errorf("cubin .nv.info has no register count for %s", lowered)
	}
	if s := f.Section(".nv.shared." + lowered); s != nil {
		if s.Size > 1<<30 {
			return KernelResources{}, fmt.Errorf("cubin .nv.shared.%s: %d bytes", lowered, s.Size)
		}
		r.SharedSection = int(s.Size)
	}
	return r, nil
}
