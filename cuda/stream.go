package cuda

import (
	"fmt"
	"os"
	"runtime"
	"sync"
	"time"
	"unsafe"
)

// Stream is a CUDA stream (non-blocking: no implicit sync with stream 0).
type Stream struct {
	dev *Device
	h   uintptr
	mu  sync.Mutex

	// Launch scratch. The argument buffer is pinned only for the duration
	// of each launch, so that the parameter pointer array (Go memory holding
	// Go pointers) may be handed to the driver, and a stream that is never
	// closed is simply collected rather than leaking a pinned pointer.
	argBuf  []uint64 // maxParamBytes, 8-byte aligned
	argPtrs []unsafe.Pointer
	argOffs []int

	// pdl: launches carry the programmatic stream serialization
	// attribute (SetProgrammaticLaunch); cfg and attr are its
	// cuLaunchKernelEx arguments, heap memory that does not move.
	pdl  bool
	cfg  *launchConfig
	attr *launchAttr
}

// launchConfig is CUlaunchConfig (cuda.h): grid, block, dynamic shared
// memory, stream, and a pointer to numAttrs attributes.
type launchConfig struct {
	gridX, gridY, gridZ, blockX, blockY, blockZ, shmem uint32
	_                                                  uint32
	stream                                             uintptr
	attrs                                              *launchAttr
	numAttrs                                           uint32
	_                                                  uint32
}

// launchAttr is CUlaunchAttribute: an id, padding to 8 bytes, and a
// 64-byte value union (here its first int).
type launchAttr struct {
	id    uint32
	_     uint32
	value [16]uint32
}

// The first programmatic launch leaves the driver's handlers of SIGINT,
// SIGTERM and SIGXFSZ without SA_ONSTACK (TestGPUProgrammaticLaunch, CUDA
// 13 on the H200), and Go's runtime then dies of the next interrupt
// ("non-Go code set up signal handler without SA_ONSTACK flag"):
// repairSignals adds the flag, once, after that launch (and after every
// NVRTC compile, which installs the same handlers: nvrtc.go).
var signalsOnce sync.Once

func repairSignals() {
	if _, err := SignalsWithoutOnStack(true); err != nil {
		fmt.Fprintf(os.Stderr, "lagc: warning: could not repair the signal handlers the CUDA driver installed: %v\n", err)
	}
}

// attrProgrammaticStreamSerialization is
// CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION.
const attrProgrammaticStreamSerialization = 6

// SetProgrammaticLaunch makes s's kernel launches programmatic dependent
// launches (Hopper and later, with cuLaunchKernelEx): a kernel may start
// while the one before it in the stream still runs, and must not touch
// memory before griddepcontrol.wait (every lagc kernel calls pdl_wait()
// first), so a launch's start-up overlaps its predecessor's tail, in
// captured graphs too. It reports whether the launches are programmatic:
// false where the device or driver cannot.
func (s *Stream) SetProgrammaticLaunch(on bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pdl = on && s.dev.props.Major >= 9 && s.dev.api.launchKernelEx != 0
	if s.pdl && s.cfg == nil {
		s.attr = &launchAttr{id: attrProgrammaticStreamSerialization}
		s.attr.value[0] = 1
		s.cfg = &launchConfig{attrs: s.attr, numAttrs: 1}
	}
	return s.pdl
}

const streamNonBlocking = 1

// NewStream creates a stream on d.
func (d *Device) NewStream() (*Stream, error) {
	s := &Stream{dev: d}
	err := d.do(func() error {
		return d.api.err("cuStreamCreate", call(d.api.streamCreate, uintptr(unsafe.Pointer(&s.h)), streamNonBlocking))
	})
	if err != nil {
		return nil, err
	}
	s.argBuf = make([]uint64, maxParamBytes/8)
	s.argPtrs = make([]unsafe.Pointer, maxParamBytes/4)
	return s, nil
}

// Device is the stream's device.
func (s *Stream) Device() *Device { return s.dev }

// Close destroys the stream (pending work still completes).
func (s *Stream) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.h == 0 {
		return nil
	}
	err := s.dev.do(func() error { return s.dev.api.err("cuStreamDestroy_v2", call(s.dev.api.streamDestroy, s.h)) })
	s.h = 0
	return err
}

func (s *Stream) lockedDo(f func(api *driverAPI) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.h == 0 {
		return fmt.Errorf("cuda: stream is closed")
	}
	return s.dev.do(func() error { return f(s.dev.api) })
}

// Synchronize waits for all work queued on s.
func (s *Stream) Synchronize() error {
	return s.lockedDo(func(api *driverAPI) error {
		return api.err("cuStreamSynchronize", call(api.streamSynchronize, s.h))
	})
}

// Launch queues k on s with the given grid, block, dynamic shared memory
// and arguments. Arguments are Go values matching the kernel's parameters:
// DevicePtr, int32, uint32, int64, uint64, float32, float64, int16, uint16,
// int8, uint8, bool, or RawArg for a struct. Counts and sizes are checked
// against the kernel where the driver reports them (CUDA 12.4+). Launch errors
// (bad geometry, too much shared memory) are returned, not fatal.
func (s *Stream) Launch(k *Kernel, grid, block Dim3, shmem int, args ...any) error {
	if k == nil {
		return fmt.Errorf("cuda: Launch of a nil kernel")
	}
	if k.dev != s.dev {
		return fmt.Errorf("cuda: kernel %s belongs to another device", k.NameExpr)
	}
	grid, block = grid.norm(), block.norm()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.h == 0 {
		return fmt.Errorf("cuda: stream is closed")
	}
	buf := unsafe.Slice((*byte)(unsafe.Pointer(&s.argBuf[0])), maxParamBytes)
	offs, err := packArgs(buf, s.argOffs, args, k.params, k.NameExpr)
	s.argOffs = offs
	if err != nil {
		return err
	}
	for i, o := range offs {
		s.argPtrs[i] = unsafe.Pointer(&buf[o])
	}
	var params uintptr
	if len(offs) > 0 {
		params = uintptr(unsafe.Pointer(&s.argPtrs[0]))
	}
	unbind, err := s.dev.bind()
	if err != nil {
		return err
	}
	var pin runtime.Pinner
	pin.Pin(&s.argBuf[0])
	defer pin.Unpin()
	var r Result
	fn := "cuLaunchKernel"
	if s.pdl {
		fn = "cuLaunchKernelEx"
		*s.cfg = launchConfig{gridX: uint32(grid.X), gridY: uint32(grid.Y), gridZ: uint32(grid.Z),
			blockX: uint32(block.X), blockY: uint32(block.Y), blockZ: uint32(block.Z), shmem: uint32(shmem),
			stream: s.h, attrs: s.attr, numAttrs: 1}
		r = call(s.dev.api.launchKernelEx, uintptr(unsafe.Pointer(s.cfg)), k.fn, params, 0)
		if r == resSuccess {
			signalsOnce.Do(repairSignals)
		}
	} else {
		r = call(s.dev.api.launchKernel, k.fn,
			uintptr(grid.X), uintptr(grid.Y), uintptr(grid.Z),
			uintptr(block.X), uintptr(block.Y), uintptr(block.Z),
			uintptr(shmem), s.h, params, 0)
	}
	unbind()
	runtime.KeepAlive(s.argPtrs)
	runtime.KeepAlive(s.cfg)
	if r != resSuccess {
		return fmt.Errorf("launching %s grid %v block %v shmem %d: %w", k.NameExpr, grid, block, shmem, s.dev.api.err(fn, r))
	}
	return nil
}

// CopyHtoD copies src to dst and returns once src may be reused (it waits
// for the copy, so src may be any Go memory).
func (s *Stream) CopyHtoD(dst DevicePtr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	return s.lockedDo(func(api *driverAPI) error {
		if err := api.err("cuMemcpyHtoDAsync_v2", call(api.memcpyHtoDAsync, uintptr(dst), uintptr(unsafe.Pointer(&src[0])), uintptr(len(src)), s.h)); err != nil {
			return err
		}
		return api.err("cuStreamSynchronize", call(api.streamSynchronize, s.h))
	})
}

// CopyDtoH copies from src into dst, waiting for the copy and all work
// queued before it.
func (s *Stream) CopyDtoH(dst []byte, src DevicePtr) error {
	if len(dst) == 0 {
		return nil
	}
	return s.lockedDo(func(api *driverAPI) error {
		if err := api.err("cuMemcpyDtoHAsync_v2", call(api.memcpyDtoHAsync, uintptr(unsafe.Pointer(&dst[0])), uintptr(src), uintptr(len(dst)), s.h)); err != nil {
			return err
		}
		return api.err("cuStreamSynchronize", call(api.streamSynchronize, s.h))
	})
}

// CopyHtoDAsync queues a copy of n bytes at off in pinned src to dst.
func (s *Stream) CopyHtoDAsync(dst DevicePtr, src *HostBuffer, off, n int) error {
	p, err := src.span(off, n)
	if err != nil {
		return err
	}
	return s.lockedDo(func(api *driverAPI) error {
		return api.err("cuMemcpyHtoDAsync_v2", call(api.memcpyHtoDAsync, uintptr(dst), uintptr(p), uintptr(n), s.h))
	})
}

// CopyDtoHAsync queues a copy of n bytes from src into pinned dst at off.
func (s *Stream) CopyDtoHAsync(dst *HostBuffer, off int, src DevicePtr, n int) error {
	p, err := dst.span(off, n)
	if err != nil {
		return err
	}
	return s.lockedDo(func(api *driverAPI) error {
		return api.err("cuMemcpyDtoHAsync_v2", call(api.memcpyDtoHAsync, uintptr(p), uintptr(src), uintptr(n), s.h))
	})
}

// CopyDtoD queues a device-to-device copy of n bytes.
func (s *Stream) CopyDtoD(dst, src DevicePtr, n int64) error {
	if n <= 0 {
		return nil
	}
	return s.lockedDo(func(api *driverAPI) error {
		return api.err("cuMemcpyDtoDAsync_v2", call(api.memcpyDtoDAsync, uintptr(dst), uintptr(src), uintptr(n), s.h))
	})
}

// Memset8 queues setting n bytes at dst to v.
func (s *Stream) Memset8(dst DevicePtr, v uint8, n int64) error {
	return s.lockedDo(func(api *driverAPI) error {
		return api.err("cuMemsetD8Async", call(api.memsetD8Async, uintptr(dst), uintptr(v), uintptr(n), s.h))
	})
}

// Memset32 queues setting n 32-bit words at dst (4-byte aligned) to v.
func (s *Stream) Memset32(dst DevicePtr, v uint32, n int64) error {
	return s.lockedDo(func(api *driverAPI) error {
		return api.err("cuMemsetD32Async", call(api.memsetD32Async, uintptr(dst), uintptr(v), uintptr(n), s.h))
	})
}

// Event marks a point in a stream; events time the work between them.
type Event struct {
	dev *Device
	h   uintptr
}

// NewEvent creates an event with timing enabled.
func (d *Device) NewEvent() (*Event, error) { return d.newEvent(0) }

// NewSyncEvent creates an event without timing (CU_EVENT_DISABLE_TIMING),
// for ordering streams: cheaper to record and wait on; Elapsed refuses it.
func (d *Device) NewSyncEvent() (*Event, error) { return d.newEvent(eventDisableTiming) }

const eventDisableTiming = 2

func (d *Device) newEvent(flags uintptr) (*Event, error) {
	e := &Event{dev: d}
	err := d.do(func() error {
		return d.api.err("cuEventCreate", call(d.api.eventCreate, uintptr(unsafe.Pointer(&e.h)), flags))
	})
	if err != nil {
		return nil, err
	}
	return e, nil
}

// Record queues the event on s.
func (s *Stream) Record(e *Event) error {
	return s.lockedDo(func(api *driverAPI) error {
		return api.err("cuEventRecord", call(api.eventRecord, e.h, s.h))
	})
}

// WaitEvent makes later work on s wait for e.
func (s *Stream) WaitEvent(e *Event) error {
	return s.lockedDo(func(api *driverAPI) error {
		return api.err("cuStreamWaitEvent", call(api.streamWaitEvent, s.h, e.h, 0))
	})
}

// Synchronize waits until the event has happened.
func (e *Event) Synchronize() error {
	return e.dev.do(func() error { return e.dev.api.err("cuEventSynchronize", call(e.dev.api.eventSynchronize, e.h)) })
}

// Close destroys the event.
func (e *Event) Close() error {
	if e.h == 0 {
		return nil
	}
	err := e.dev.do(func() error { return e.dev.api.err("cuEventDestroy_v2", call(e.dev.api.eventDestroy, e.h)) })
	e.h = 0
	return err
}

// Elapsed is the GPU time between two recorded events (about 0.5 us
// resolution). Both must have completed.
func Elapsed(start, end *Event) (time.Duration, error) {
	var ms float32
	err := start.dev.do(func() error {
		return start.dev.api.err("cuEventElapsedTime", call(start.dev.api.eventElapsedTime, uintptr(unsafe.Pointer(&ms)), start.h, end.h))
	})
	return time.Duration(float64(ms) * float64(time.Millisecond)), err
}
