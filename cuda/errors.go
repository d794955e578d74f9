package cuda

import (
	"errors"
	"fmt"
)

// Sentinel errors for a machine that cannot run CUDA at all. Errors returned
// by this package wrap at most one of them; use errors.Is or [Unavailable].
var (
	ErrNoDriver = errors.New("no NVIDIA driver (libcuda.so.1) could be loaded")
	ErrNoDevice = errors.New("no CUDA GPU is visible")
	ErrNoNVRTC  = errors.New("no NVRTC library (libnvrtc.so) could be loaded")
)

// Unavailable reports whether err means CUDA cannot be used on this machine
// (no driver, no GPU or no NVRTC), as opposed to a failure of a working setup.
func Unavailable(err error) bool {
	return errors.Is(err, ErrNoDriver) || errors.Is(err, ErrNoDevice) || errors.Is(err, ErrNoNVRTC)
}

// Result is a driver API CUresult.
type Result int32

// CUresult values this package looks at.
const (
	resSuccess            Result = 0
	resInvalidValue       Result = 1
	resOutOfMemory        Result = 2
	resNotInitialized     Result = 3
	resNoDevice           Result = 100
	resInvalidDevice      Result = 101
	resNotFound           Result = 500
	resNotReady           Result = 600
	resInsufficientDriver Result = 35
	resGraphUpdateFailure Result = 910
)

// Error is a failed driver API call.
type Error struct {
	Func string // driver entry point, e.g. "cuMemAlloc_v2"
	Code Result
	Name string // e.g. "CUDA_ERROR_OUT_OF_MEMORY"
	Desc string // the driver's description
}

func (e *Error) Error() string {
	if e.Desc != "" {
		return fmt.Sprintf("cuda: %s: %s (%s)", e.Func, e.Name, e.Desc)
	}
	return fmt.Sprintf("cuda: %s: %s", e.Func, e.Name)
}

// Unwrap maps the codes that mean "no GPU here" onto ErrNoDevice.
func (e *Error) Unwrap() error {
	switch e.Code {
	case resNoDevice, resInvalidDevice, resInsufficientDriver:
		return ErrNoDevice
	}
	return nil
}

// NVRTCError is a failed NVRTC call other than a compile error.
type NVRTCError struct {
	Func string
	Code int32
	Name string
}

func (e *NVRTCError) Error() string {
	return fmt.Sprintf("cuda: %s: %s (nvrtcResult %d)", e.Func, e.Name, e.Code)
}

// CompileError is NVRTC's refusal of a kernel: its log, and the source lines
// the log refers to.
type CompileError struct {
	Kernel  string // name expression, e.g. "axpy<half_t>"
	Arch    string
	Log     string
	Excerpt string // numbered source lines around each error location
}

func (e *CompileError) Error() string {
	s := fmt.Sprintf("cuda: NVRTC could not compile %s for %s:\n%s", e.Kernel, e.Arch, e.Log)
	if e.Excerpt != "" {
		s += "\nsource:\n" + e.Excerpt
	}
	return s
}

// OOMError is an allocation the device could not satisfy.
type OOMError struct {
	What        string // "device memory", "pinned host memory", "arena"
	Need        uint64 // bytes requested
	Free, Total uint64 // bytes free and in total when it failed (0 if unknown)
	Err         error  // the driver's error, if any
}

func (e *OOMError) Error() string {
	s := fmt.Sprintf("cuda: out of %s: %d bytes (%s) needed, %d bytes (%s) free", e.What, e.Need, humanBytes(e.Need), e.Free, humanBytes(e.Free))
	if e.Total > 0 {
		s += fmt.Sprintf(" of %s", humanBytes(e.Total))
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *OOMError) Unwrap() error { return e.Err }

func humanBytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTP"[exp])
}
