package cuda

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"unsafe"
)

// EnvArch overrides the NVRTC target architecture (default: the device's
// own, with the "a" suffix from compute capability 9.0 on, e.g. sm_90a).
const EnvArch = "LAGC_CUDA_ARCH"

// Props are a device's properties.
type Props struct {
	Ordinal            int
	Name               string
	Major, Minor       int // compute capability
	SMs                int
	TotalMem           uint64 // bytes
	L2Bytes            int
	MaxThreadsPerBlock int
	MaxSharedPerBlock  int // bytes a block may opt in to (dynamic + static)
	SharedPerSM        int
	WarpSize           int
	ClockKHz           int
	MemClockKHz        int // peak memory clock (0: the driver did not say)
	MemBusBits         int // global memory bus width (0: the driver did not say)
	DriverVersion      int // e.g. 13000 for CUDA 13.0
}

// PeakMemBandwidth is the memory's peak rate in bytes/s from the driver's
// memory clock and bus width (double data rate), 0 where either is unknown.
func (p Props) PeakMemBandwidth() float64 {
	return 2 * float64(p.MemClockKHz) * 1e3 * float64(p.MemBusBits) / 8
}

// Device is one GPU with its primary context retained.
type Device struct {
	api     *driverAPI
	dev     int32
	ctx     uintptr
	props   Props
	arch    string
	kernels kernelCache
	stats   cacheCounters

	diskOnce sync.Once
	disk     *diskCache

	closeOnce sync.Once
}

// Device attribute numbers (CUdevice_attribute).
const (
	attrMaxThreadsPerBlock  = 1
	attrWarpSize            = 10
	attrClockRate           = 13
	attrMemoryClockRate     = 36
	attrGlobalMemoryBusBits = 37
	attrMultiprocessorCount = 16
	attrL2CacheSize         = 38
	attrCCMajor             = 75
	attrCCMinor             = 76
	attrSharedPerSM         = 81
	attrSharedPerBlockOptin = 97
)

// DeviceCount is the number of CUDA devices; an error wrapping ErrNoDriver
// or ErrNoDevice where there are none.
func DeviceCount() (int, error) {
	n, _, err := deviceCount()
	return n, err
}

func deviceCount() (int, *driverAPI, error) {
	api, err := loadDriver()
	if err != nil {
		return 0, nil, err
	}
	var n int32
	if err := api.err("cuDeviceGetCount", call(api.deviceGetCount, uintptr(unsafe.Pointer(&n)))); err != nil {
		return 0, nil, err
	}
	return int(n), api, nil
}

// Open loads the driver (once per process), retains device ordinal's
// primary context and reads its properties.
func Open(ordinal int) (*Device, error) {
	n, api, err := deviceCount()
	if err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, fmt.Errorf("%w: the driver reports 0 devices", ErrNoDevice)
	}
	if ordinal < 0 || ordinal >= n {
		return nil, fmt.Errorf("cuda: device %d does not exist (%d present)", ordinal, n)
	}
	d := &Device{api: api}
	d.kernels.hits = &d.stats.memHits
	if err := api.err("cuDeviceGet", call(api.deviceGet, uintptr(unsafe.Pointer(&d.dev)), uintptr(ordinal))); err != nil {
		return nil, err
	}
	if err := api.err("cuDevicePrimaryCtxRetain", call(api.primaryCtxRetain, uintptr(unsafe.Pointer(&d.ctx)), uintptr(d.dev))); err != nil {
		return nil, err
	}
	if err := d.readProps(ordinal); err != nil {
		_ = d.Close()
		return nil, err
	}
	d.arch = archFor(d.props.Major, d.props.Minor)
	if a := os.Getenv(EnvArch); a != "" {
		d.arch = a
	}
	return d, nil
}

// archFor is NVRTC's architecture for a compute capability: the
// arch-specific "a" variant from Hopper on, so kernels may use wgmma & co.
func archFor(major, minor int) string {
	if major >= 9 {
		return fmt.Sprintf("sm_%d%da", major, minor)
	}
	return fmt.Sprintf("sm_%d%d", major, minor)
}

func (d *Device) readProps(ordinal int) error {
	api := d.api
	p := Props{Ordinal: ordinal}
	name := make([]byte, 256)
	if err := api.err("cuDeviceGetName", call(api.deviceGetName, uintptr(unsafe.Pointer(&name[0])), uintptr(len(name)), uintptr(d.dev))); err != nil {
		return err
	}
	p.Name = cString(&name[0])
	var total uint64
	if err := api.err("cuDeviceTotalMem_v2", call(api.deviceTotalMem, uintptr(unsafe.Pointer(&total)), uintptr(d.dev))); err != nil {
		return err
	}
	p.TotalMem = total
	// attr reads one attribute and returns the driver's result code.
	attr := func(a int) (int, Result) {
		var v int32
		r := call(api.deviceGetAttribute, uintptr(unsafe.Pointer(&v)), uintptr(a), uintptr(d.dev))
		return int(v), r
	}
	type attrDst struct {
		attr int
		dst  *int
	}
	for _, a := range []attrDst{
		{attrCCMajor, &p.Major}, {attrCCMinor, &p.Minor}, {attrMultiprocessorCount, &p.SMs},
		{attrL2CacheSize, &p.L2Bytes}, {attrMaxThreadsPerBlock, &p.MaxThreadsPerBlock},
		{attrSharedPerBlockOptin, &p.MaxSharedPerBlock}, {attrSharedPerSM, &p.SharedPerSM},
		{attrWarpSize, &p.WarpSize},
	} {
		v, r := attr(a.attr)
		if err := api.err("cuDeviceGetAttribute", r); err != nil {
			return fmt.Errorf("attribute %d: %w", a.attr, err)
		}
		*a.dst = v
	}
	// Optional attributes: deprecated in newer drivers, so failures are ignored.
	for _, a := range []attrDst{{attrClockRate, &p.ClockKHz}, {attrMemoryClockRate, &p.MemClockKHz}, {attrGlobalMemoryBusBits, &p.MemBusBits}} {
		if v, r := attr(a.attr); r == resSuccess {
			*a.dst = v
		}
	}
	var ver int32
	if call(api.driverGetVersion, uintptr(unsafe.Pointer(&ver))) == resSuccess {
		p.DriverVersion = int(ver)
	}
	d.props = p
	return nil
}

// Props returns the device's properties.
func (d *Device) Props() Props { return d.props }

// Arch is the NVRTC target, e.g. "sm_90a".
func (d *Device) Arch() string { return d.arch }

// CacheStats reports how Compile calls were served so far.
func (d *Device) CacheStats() CacheStats { return d.stats.snapshot() }

// CacheDir is the on-disk kernel cache this device uses ("" if none).
func (d *Device) CacheDir() string {
	if dc := d.diskCache(); dc != nil {
		return dc.dir
	}
	return ""
}

func (d *Device) diskCache() *diskCache {
	d.diskOnce.Do(func() {
		if dir, err := CacheDir(); err == nil {
			d.disk = &diskCache{dir: dir}
		}
	})
	return d.disk
}

// bind locks the calling goroutine to its OS thread and makes the primary
// context current there; the returned func undoes the lock. See the package
// documentation for why this is the threading discipline.
func (d *Device) bind() (func(), error) {
	runtime.LockOSThread()
	var cur uintptr
	if call(d.api.ctxGetCurrent, uintptr(unsafe.Pointer(&cur))) != resSuccess || cur != d.ctx {
		if err := d.api.err("cuCtxSetCurrent", call(d.api.ctxSetCurrent, d.ctx)); err != nil {
			runtime.UnlockOSThread()
			return nil, err
		}
	}
	return runtime.UnlockOSThread, nil
}

// do runs f with the context bound.
func (d *Device) do(f func() error) error {
	unbind, err := d.bind()
	if err != nil {
		return err
	}
	defer unbind()
	return f()
}

// Synchronize waits for all work on the device (cuCtxSynchronize).
func (d *Device) Synchronize() error {
	return d.do(func() error { return d.api.err("cuCtxSynchronize", call(d.api.ctxSynchronize)) })
}

// MemInfo returns the device memory free and in total, in bytes.
func (d *Device) MemInfo() (free, total uint64, err error) {
	err = d.do(func() error {
		return d.api.err("cuMemGetInfo_v2", call(d.api.memGetInfo, uintptr(unsafe.Pointer(&free)), uintptr(unsafe.Pointer(&total))))
	})
	return free, total, err
}

// DevicePtr is a device address.
type DevicePtr uint64

// Add offsets p by n bytes.
func (p DevicePtr) Add(n int64) DevicePtr { return DevicePtr(int64(p) + n) }

// Alloc allocates n bytes of device memory. When the device has too little,
// the error is an *OOMError with the bytes needed and free.
func (d *Device) Alloc(n int64) (DevicePtr, error) {
	if n <= 0 {
		return 0, fmt.Errorf("cuda: Alloc of %d bytes", n)
	}
	var p DevicePtr
	err := d.do(func() error {
		r := call(d.api.memAlloc, uintptr(unsafe.Pointer(&p)), uintptr(n))
		if r == resOutOfMemory {
			oom := &OOMError{What: "device memory", Need: uint64(n), Err: d.api.err("cuMemAlloc_v2", r)}
			_ = call(d.api.memGetInfo, uintptr(unsafe.Pointer(&oom.Free)), uintptr(unsafe.Pointer(&oom.Total)))
			return oom
		}
		return d.api.err("cuMemAlloc_v2", r)
	})
	return p, err
}

// Free releases memory from Alloc.
func (d *Device) Free(p DevicePtr) error {
	if p == 0 {
		return nil
	}
	return d.do(func() error { return d.api.err("cuMemFree_v2", call(d.api.memFree, uintptr(p))) })
}

// Close unloads the device's kernels and releases the primary context.
// Memory, streams and graphs should be released first.
func (d *Device) Close() error {
	var errs []error
	d.closeOnce.Do(func() {
		unbind, err := d.bind()
		if err != nil {
			errs = append(errs, err)
		} else {
			for _, k := range d.kernels.all() {
				errs = append(errs, d.api.err("cuModuleUnload", call(d.api.moduleUnload, k.mod)))
			}
			unbind()
		}
		d.kernels.reset()
		errs = append(errs, d.api.err("cuDevicePrimaryCtxRelease_v2", call(d.api.primaryCtxRelease, uintptr(d.dev))))
	})
	return errors.Join(errs...)
}
