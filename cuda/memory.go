package cuda

import (
	"fmt"
	"sync"
	"unsafe"
)

// HostBuffer is page-locked (pinned) host memory: copies from and to it run
// asynchronously at full link speed.
type HostBuffer struct {
	dev *Device
	mu  sync.Mutex
	p   unsafe.Pointer
	n   int
}

// AllocHost allocates n bytes of pinned host memory.
func (d *Device) AllocHost(n int) (*HostBuffer, error) {
	if n <= 0 {
		return nil, fmt.Errorf("cuda: AllocHost of %d bytes", n)
	}
	h := &HostBuffer{dev: d, n: n}
	err := d.do(func() error {
		r := call(d.api.memAllocHost, uintptr(unsafe.Pointer(&h.p)), uintptr(n))
		if r == resOutOfMemory {
			return &OOMError{What: "pinned host memory", Need: uint64(n), Err: d.api.err("cuMemAllocHost_v2", r)}
		}
		return d.api.err("cuMemAllocHost_v2", r)
	})
	if err != nil {
		return nil, err
	}
	return h, nil
}

// Bytes is the buffer's memory; invalid after Free.
func (h *HostBuffer) Bytes() []byte {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.p == nil {
		return nil
	}
	return unsafe.Slice((*byte)(h.p), h.n)
}

// Len is the buffer's size in bytes.
func (h *HostBuffer) Len() int { return h.n }

func (h *HostBuffer) span(off, n int) (unsafe.Pointer, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.p == nil {
		return nil, fmt.Errorf("cuda: pinned buffer used after Free")
	}
	if off < 0 || n <= 0 || off > h.n-n {
		return nil, fmt.Errorf("cuda: range [%d, %d) outside pinned buffer of %d bytes", off, off+n, h.n)
	}
	return unsafe.Add(h.p, off), nil
}

// DevicePtr is the buffer's address for kernels (pinned memory is mapped
// into the device's address space): a kernel's stores to it land in host
// memory with no copy queued after the kernel.
func (h *HostBuffer) DevicePtr() (DevicePtr, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.p == nil {
		return 0, fmt.Errorf("cuda: pinned buffer used after Free")
	}
	if h.dev.api.memHostGetDevicePointer == 0 {
		return 0, fmt.Errorf("cuda: the driver has no cuMemHostGetDevicePointer")
	}
	var d DevicePtr
	err := h.dev.do(func() error {
		return h.dev.api.err("cuMemHostGetDevicePointer_v2", call(h.dev.api.memHostGetDevicePointer, uintptr(unsafe.Pointer(&d)), uintptr(h.p), 0))
	})
	return d, err
}

// Free releases the buffer.
func (h *HostBuffer) Free() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.p == nil {
		return nil
	}
	err := h.dev.do(func() error { return h.dev.api.err("cuMemFreeHost", call(h.dev.api.memFreeHost, uintptr(h.p))) })
	h.p = nil
	return err
}

// Elem is a fixed-size element type that may be copied to the device as is.
type Elem interface {
	~float32 | ~float64 | ~int8 | ~uint8 | ~int16 | ~uint16 | ~int32 | ~uint32 | ~int64 | ~uint64
}

// AsBytes views a slice of elements as bytes, without copying.
func AsBytes[T Elem](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(s)*int(unsafe.Sizeof(s[0])))
}

// Copier is what Upload and Download need of a stream: a *Stream, or a
// wrapper around one (recording, for example).
type Copier interface {
	CopyHtoD(dst DevicePtr, src []byte) error
	CopyDtoH(dst []byte, src DevicePtr) error
}

// Upload copies src to dst on s and waits for the copy.
func Upload[T Elem](s Copier, dst DevicePtr, src []T) error { return s.CopyHtoD(dst, AsBytes(src)) }

// Download copies len(dst) elements from src on s and waits for them.
func Download[T Elem](s Copier, dst []T, src DevicePtr) error {
	return s.CopyDtoH(AsBytes(dst), src)
}

// ArenaAlign is the alignment of arena allocations: enough for any vector
// access and for TMA descriptors' 128-byte requirement, twice over.
const ArenaAlign = 256

// Arena hands out pieces of one device allocation for activations and
// workspace: bump allocation, released all at once with Reset or back to a
// Mark. Safe for concurrent use.
type Arena struct {
	dev  *Device // nil for an arena over memory it does not own
	mu   sync.Mutex
	base DevicePtr
	size int64
	off  int64
	peak int64
}

// NewArena allocates size bytes of device memory as an arena.
func (d *Device) NewArena(size int64) (*Arena, error) {
	p, err := d.Alloc(size)
	if err != nil {
		return nil, err
	}
	return &Arena{dev: d, base: p, size: size}, nil
}

// ArenaOver makes an arena over [base, base+size) owned by the caller.
func ArenaOver(base DevicePtr, size int64) *Arena { return &Arena{base: base, size: size} }

// Alloc returns n bytes aligned to ArenaAlign, or an *OOMError saying how
// many bytes were needed and how many are left.
func (a *Arena) Alloc(n int64) (DevicePtr, error) {
	if n <= 0 {
		return 0, fmt.Errorf("cuda: arena Alloc of %d bytes", n)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	start := (int64(a.base)+a.off+ArenaAlign-1)&^(ArenaAlign-1) - int64(a.base)
	if start > a.size || n > a.size-start {
		free := a.size - start
		if free < 0 {
			free = 0
		}
		return 0, &OOMError{What: "arena", Need: uint64(n), Free: uint64(free), Total: uint64(a.size)}
	}
	a.off = start + n
	if a.off > a.peak {
		a.peak = a.off
	}
	return a.base.Add(start), nil
}

// Mark returns the current fill level, for Rewind.
func (a *Arena) Mark() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.off
}

// Rewind frees everything allocated after Mark returned m.
func (a *Arena) Rewind(m int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if m >= 0 && m < a.off {
		a.off = m
	}
}

// Reset frees every allocation.
func (a *Arena) Reset() { a.Rewind(0) }

// Used, Peak and Cap report bytes in use, the most ever in use, and the size.
func (a *Arena) Used() int64 { return a.Mark() }

// Peak is the high-water mark of Used.
func (a *Arena) Peak() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.peak
}

// Cap is the arena's size in bytes.
func (a *Arena) Cap() int64 { return a.size }

// Base is the arena's first byte.
func (a *Arena) Base() DevicePtr { return a.base }

// Close frees the arena's memory if NewArena allocated it.
func (a *Arena) Close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.dev == nil || a.base == 0 {
		return nil
	}
	err := a.dev.Free(a.base)
	a.base, a.size, a.off = 0, 0, 0
	return err
}
