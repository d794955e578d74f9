// Package cuda is lagc's GPU layer: the CUDA driver API and NVRTC, loaded at
// run time with purego (no cgo), device memory, streams, events, CUDA graphs,
// and a compiled-kernel cache in memory and on disk.
//
// # Loading
//
// libcuda.so.1 and libnvrtc are found on first use (see [Libraries]);
// LAGC_CUDA_LIB and LAGC_NVRTC_LIB name the files explicitly. A machine without
// a driver, a GPU or NVRTC gets an error wrapping [ErrNoDriver], [ErrNoDevice]
// or [ErrNoNVRTC]; [Unavailable] tells those apart from real failures.
//
// # Threads and the context
//
// The driver keeps the current context per OS thread. lagc uses only the
// device's primary context and follows one rule: every driver call is made by
// a goroutine locked to its OS thread (runtime.LockOSThread) after making the
// primary context current on that thread if it is not already (one
// cuCtxGetCurrent, a thread-local read). The lock is held for the duration of
// one method, and for the whole of [Stream.Capture], because CUDA requires a
// capture to end on the thread that began it. This is equivalent to one owner
// thread serving all calls, without the goroutine hand-off such a thread needs
// for every call (tens of microseconds measured on a 2-core machine, more than
// a kernel launch costs).
//
// Device, Kernel, HostBuffer and Graph methods are safe for concurrent use.
// A Stream serialises its own methods with a mutex, since work on one stream is
// ordered anyway.
//
// # Kernels
//
// Kernels are CUDA C++ templates compiled by NVRTC for the device's own
// architecture (sm_90a on an H200). A [KernelSpec] names the template, its
// dtype arguments, its source and options; [Device.Compile] returns the
// instantiation from the cache, keyed by all of those plus the architecture,
// a hash of the source and the NVRTC version (see [CacheKey]).
package cuda
