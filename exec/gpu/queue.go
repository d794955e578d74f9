package gpu

import "lagc/cuda"

// Queue receives launches and copies in stream order: a *cuda.Stream, or a
// Recorder, which keeps a trace of them (and may pass them on to a stream).
type Queue interface {
	Launch(k *cuda.Kernel, grid, block cuda.Dim3, shmem int, args ...any) error
	CopyDtoD(dst, src cuda.DevicePtr, n int64) error
	CopyHtoD(dst cuda.DevicePtr, src []byte) error
	CopyDtoH(dst []byte, src cuda.DevicePtr) error
	Memset32(dst cuda.DevicePtr, v uint32, n int64) error
	// GEMMLt queues a cuBLASLt GEMM (lower.CublasLtGEMM).
	GEMMLt(l *cuda.Lt, T, N, K int, x, w, y cuda.DevicePtr, yt cuda.DType, accumulate bool) error
}
