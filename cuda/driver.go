package cuda

import (
	"strconv"
	"unsafe"

	"github.com/ebitengine/purego"
)

// driverAPI holds the driver entry points. Calls go through purego.SyscallN,
// whose go:uintptrescapes keeps pointer arguments alive and in place.
type driverAPI struct {
	name string

	init, driverGetVersion, getErrorName, getErrorString               uintptr
	deviceGet, deviceGetCount, deviceGetName, deviceGetAttribute       uintptr
	deviceTotalMem, primaryCtxRetain, primaryCtxRelease                uintptr
	ctxGetCurrent, ctxSetCurrent, ctxSynchronize                       uintptr
	memGetInfo, memAlloc, memFree, memAllocHost, memFreeHost           uintptr
	memHostGetDevicePointer                                            uintptr // optional
	memcpyHtoDAsync, memcpyDtoHAsync, memcpyDtoDAsync                  uintptr
	memsetD8Async, memsetD32Async                                      uintptr
	streamCreate, streamDestroy, streamSynchronize, streamWaitEvent    uintptr
	eventCreate, eventDestroy, eventRecord, eventSynchronize           uintptr
	eventElapsedTime                                                   uintptr
	moduleLoadData, moduleUnload, moduleGetFunction                    uintptr
	funcGetAttribute, funcSetAttribute, funcGetParamInfo, launchKernel uintptr
	streamBeginCapture, streamEndCapture, graphInstantiate             uintptr
	graphLaunch, graphDestroy, graphExecDestroy, graphExecUpdate       uintptr
	tensorMapEncodeTiled                                               uintptr
	launchKernelEx                                                     uintptr
}

func bindDriver(lib uintptr, name string) (*driverAPI, error) {
	d := &driverAPI{name: name}
	s := &symbols{lib: lib, libName: name}
	s.need(&d.init, "cuInit")
	s.need(&d.driverGetVersion, "cuDriverGetVersion")
	s.need(&d.getErrorName, "cuGetErrorName")
	s.need(&d.getErrorString, "cuGetErrorString")
	s.need(&d.deviceGet, "cuDeviceGet")
	s.need(&d.deviceGetCount, "cuDeviceGetCount")
	s.need(&d.deviceGetName, "cuDeviceGetName")
	s.need(&d.deviceGetAttribute, "cuDeviceGetAttribute")
	s.need(&d.deviceTotalMem, "cuDeviceTotalMem_v2")
	s.need(&d.primaryCtxRetain, "cuDevicePrimaryCtxRetain")
	s.need(&d.primaryCtxRelease, "cuDevicePrimaryCtxRelease_v2")
	s.need(&d.ctxGetCurrent, "cuCtxGetCurrent")
	s.need(&d.ctxSetCurrent, "cuCtxSetCurrent")
	s.need(&d.ctxSynchronize, "cuCtxSynchronize")
	s.need(&d.memGetInfo, "cuMemGetInfo_v2")
	s.need(&d.memAlloc, "cuMemAlloc_v2")
	s.need(&d.memFree, "cuMemFree_v2")
	s.need(&d.memAllocHost, "cuMemAllocHost_v2")
	s.need(&d.memFreeHost, "cuMemFreeHost")
	s.want(&d.memHostGetDevicePointer, "cuMemHostGetDevicePointer_v2")
	s.need(&d.memcpyHtoDAsync, "cuMemcpyHtoDAsync_v2")
	s.need(&d.memcpyDtoHAsync, "cuMemcpyDtoHAsync_v2")
	s.need(&d.memcpyDtoDAsync, "cuMemcpyDtoDAsync_v2")
	s.need(&d.memsetD8Async, "cuMemsetD8Async")
	s.need(&d.memsetD32Async, "cuMemsetD32Async")
	s.need(&d.streamCreate, "cuStreamCreate")
	s.need(&d.streamDestroy, "cuStreamDestroy_v2")
	s.need(&d.streamSynchronize, "cuStreamSynchronize")
	s.need(&d.streamWaitEvent, "cuStreamWaitEvent")
	s.need(&d.eventCreate, "cuEventCreate")
	s.need(&d.eventDestroy, "cuEventDestroy_v2")
	s.need(&d.eventRecord, "cuEventRecord")
	s.need(&d.eventSynchronize, "cuEventSynchronize")
	s.want(&d.eventElapsedTime, "cuEventElapsedTime_v2", "cuEventElapsedTime")
	if d.eventElapsedTime == 0 {
		s.missing = append(s.missing, "cuEventElapsedTime")
	}
	s.need(&d.moduleLoadData, "cuModuleLoadData")
	s.need(&d.moduleUnload, "cuModuleUnload")
	s.need(&d.moduleGetFunction, "cuModuleGetFunction")
	s.need(&d.funcGetAttribute, "cuFuncGetAttribute")
	s.need(&d.funcSetAttribute, "cuFuncSetAttribute")
	s.want(&d.funcGetParamInfo, "cuFuncGetParamInfo") // CUDA 12.4+; launch checks are skipped without it
	s.need(&d.launchKernel, "cuLaunchKernel")
	s.want(&d.launchKernelEx, "cuLaunchKernelEx")             // CUDA 12+; programmatic launches need it
	s.want(&d.tensorMapEncodeTiled, "cuTensorMapEncodeTiled") // CUDA 12+; Hopper TMA kernels need it
	s.need(&d.streamBeginCapture, "cuStreamBeginCapture_v2")
	s.need(&d.streamEndCapture, "cuStreamEndCapture")
	s.need(&d.graphInstantiate, "cuGraphInstantiateWithFlags")
	s.need(&d.graphLaunch, "cuGraphLaunch")
	s.need(&d.graphDestroy, "cuGraphDestroy")
	s.need(&d.graphExecDestroy, "cuGraphExecDestroy")
	s.need(&d.graphExecUpdate, "cuGraphExecUpdate_v2")
	if err := s.err(); err != nil {
		return nil, err
	}
	return d, nil
}

// call invokes a driver function and returns its CUresult. CUresult is a C
// enum (32 bits); the upper half of the return register is undefined.
// uintptrescapes moves pointed-to arguments to the heap and keeps them alive
// for the call: a goroutine stack may move while C holds the address.
//
//go:uintptrescapes
func call(fn uintptr, args ...uintptr) Result {
	r, _, _ := purego.SyscallN(fn, args...)
	return Result(int32(r))
}

// err turns a CUresult into an *Error naming the function (nil on success).
func (d *driverAPI) err(fn string, r Result) error {
	if r == resSuccess {
		return nil
	}
	e := &Error{Func: fn, Code: r, Name: d.errorName(r), Desc: d.errorString(r)}
	return e
}

func (d *driverAPI) errorName(r Result) string {
	var p *byte
	if d.getErrorName != 0 && call(d.getErrorName, uintptr(r), uintptr(unsafe.Pointer(&p))) == resSuccess && p != nil {
		return cString(p)
	}
	return "CUresult " + strconv.Itoa(int(r))
}

func (d *driverAPI) errorString(r Result) string {
	var p *byte
	if d.getErrorString != 0 && call(d.getErrorString, uintptr(r), uintptr(unsafe.Pointer(&p))) == resSuccess && p != nil {
		return cString(p)
	}
	return ""
}

func (d *driverAPI) cuInit(flags uint32) Result { return call(d.init, uintptr(flags)) }

// cString copies a NUL-terminated C string (at most 64 KiB).
func cString(p *byte) string {
	if p == nil {
		return ""
	}
	var b []byte
	for i := 0; i < 1<<16; i++ {
		c := *(*byte)(unsafe.Add(unsafe.Pointer(p), i))
		if c == 0 {
			break
		}
		b = append(b, c)
	}
	return string(b)
}

// cBytes returns s as a NUL-terminated byte slice for C.
func cBytes(s string) []byte {
	b := make([]byte, len(s)+1)
	copy(b, s)
	return b
}
