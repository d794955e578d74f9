package cudaexec

import (
	"context"
	"fmt"
	"sync"

	"lagc/cuda"
)

// MatMulArgs is one matmul op, y = x w^T, with weights in HF layout.
type MatMulArgs struct {
	T, K, N int // x [T,K], w [N,K] ([2N,K] with SwiGLU), y [T,N]
	X, W, Y cuda.DevicePtr
	// Element types: F32 or BF16 each, in any combination.
	XType, WType, YType cuda.DType
	// Accumulate adds into y (y += x w^T): the residual folded into the
	// epilogue.
	Accumulate bool
	// SwiGLU: w is [gate; up] ([2N,K], gate rows first) and
	// y = silu(x gate^T) * (x up^T).
	SwiGLU bool
}

// GEMVMaxRows is the largest T the decode GEMV serves; larger T runs a GEMM.
const GEMVMaxRows = 8

// MatMulPlan is the kernel and launch geometry MatMul uses for a shape.
type MatMulPlan struct {
	Kernel cuda.KernelSpec
	Grid   cuda.Dim3
	Block  cuda.Dim3
	Shmem  int // dynamic shared memory, bytes
	args   []any
}

// Shared-memory geometry of the tensor-core tiles (matmul.cu's MMA_*).
const (
	mmaBN     = 128
	mmaPitch  = 40
	mmaStages = 4
)

func mmaSmemBytes(mi int) int { return mmaStages * (32*mi + mmaBN) * mmaPitch * 2 }

func (a MatMulArgs) validate() error {
	if a.T <= 0 || a.K <= 0 || a.N <= 0 {
		return fmt.Errorf("matmul: T, K, N must be positive (got %d, %d, %d)", a.T, a.K, a.N)
	}
	for _, d := range []struct {
		name string
		dt   cuda.DType
	}{{"x", a.XType}, {"w", a.WType}, {"y", a.YType}} {
		if d.dt != cuda.F32 && d.dt != cuda.BF16 {
			return fmt.Errorf("matmul: %s dtype %v (want f32 or bf16)", d.name, d.dt)
		}
	}
	if a.X == 0 || a.W == 0 || a.Y == 0 {
		return fmt.Errorf("matmul: nil device pointer")
	}
	const maxDim = 1 << 30
	if a.T > maxDim || a.K > maxDim || a.N > maxDim/2 {
		return fmt.Errorf("matmul: dimension too large (T %d, K %d, N %d)", a.T, a.K, a.N)
	}
	return nil
}

func b2i(b bool) int32 {
	if b {
		return 1
	}
	return 0
}

// aligned16 reports whether every pointer is 16-byte aligned.
func aligned16(ps ...cuda.DevicePtr) bool {
	for _, p := range ps {
		if p%16 != 0 {
			return false
		}
	}
	return true
}

// gemvVec reports whether 16-byte vector loads apply: K a multiple of the
// elements a 16-byte weight load holds, and the base pointers aligned.
func gemvVec(k int, wt cuda.DType, ps ...cuda.DevicePtr) bool {
	return k%(16/wt.Size()) == 0 && aligned16(ps...)
}

// gemvSplit is how many warps share an output row: enough warps to fill
// the GPU (about 32 per SM), never so many that a warp gets no 512-byte
// stretch of the row.
func gemvSplit(n, k int, wt cuda.DType, sms int) int {
	vecs := k / (16 / wt.Size()) // 16-byte vectors per row
	split := 1
	for split < 8 && n*split < 32*sms && vecs/(32*split*2) >= 1 {
		split *= 2
	}
	return split
}

// PlanMatMul chooses the kernel for a: the GEMV for T <= GEMVMaxRows, the
// bf16 tensor-core GEMM where x and w are bf16 with K % 8 == 0, else the
// FFMA GEMM.
func (k *Kernels) PlanMatMul(a MatMulArgs) (MatMulPlan, error) { return k.planMatMul(a, 0) }

// planMatMul is PlanMatMul with the tensor-core tile height forced to
// 32*mi rows when mi is 2 or 4 (tests reach both with small shapes).
func (k *Kernels) planMatMul(a MatMulArgs, mi int) (MatMulPlan, error) {
	if err := a.validate(); err != nil {
		return MatMulPlan{}, err
	}
	src, err := cuda.Source("matmul.cu")
	if err != nil {
		return MatMulPlan{}, err
	}
	sms := 132 // an H200's, where no device is open
	if k.Dev != nil && k.Dev.Props().SMs > 0 {
		sms = k.Dev.Props().SMs
	}
	spec := cuda.KernelSpec{Source: src, File: "matmul.cu"}
	var p MatMulPlan
	sw := int64(b2i(a.SwiGLU))
	acc := b2i(a.Accumulate)
	switch {
	case a.T <= GEMVMaxRows:
		vec := int64(b2i(gemvVec(a.K, a.WType, a.X, a.W)))
		split := gemvSplit(a.N, a.K, a.WType, sms)
		spec.Name, spec.DTypes, spec.Ints = "gemv", []cuda.DType{a.XType, a.WType, a.YType}, []int64{int64(a.T), sw, vec}
		p.Grid, p.Block = cuda.Dim(uint32(ceilDiv(a.N, 8/split))), cuda.Dim(256)
		p.args = []any{int32(a.N), int32(a.K), int32(split), a.X, a.W, a.Y, acc}
	case a.XType == cuda.BF16 && a.WType == cuda.BF16 && a.K%8 == 0 && aligned16(a.X, a.W):
		bn := 128
		if a.SwiGLU {
			bn = 64
		}
		// 128-row tiles where they still give two CTAs per SM, else 64.
		if mi != 2 && mi != 4 {
			mi = 4
			if ceilDiv(a.T, 128)*ceilDiv(a.N, bn) < 2*sms {
				mi = 2
			}
		}
		spec.Name, spec.DTypes, spec.Ints = "gemm_bf16", []cuda.DType{a.YType}, []int64{int64(mi), sw}
		p.Grid, p.Block, p.Shmem = cuda.Dim(uint32(ceilDiv(a.T, 32*mi)), uint32(ceilDiv(a.N, bn))), cuda.Dim(256), mmaSmemBytes(mi)
		p.args = []any{int32(a.T), int32(a.N), int32(a.K), a.X, a.W, a.Y, acc}
	default:
		spec.Name, spec.DTypes, spec.Ints = "gemm_simple", []cuda.DType{a.XType, a.WType, a.YType}, []int64{sw}
		p.Grid, p.Block = cuda.Dim(uint32(ceilDiv(a.T, 64)), uint32(ceilDiv(a.N, 64))), cuda.Dim(256)
		p.args = []any{int32(a.T), int32(a.N), int32(a.K), a.X, a.W, a.Y, acc}
	}
	if p.Grid.Y > 65535 {
		return MatMulPlan{}, fmt.Errorf("matmul: N=%d needs %d column tiles (limit 65535)", a.N, p.Grid.Y)
	}
	p.Kernel = spec
	return p, nil
}

// MatMul queues y = x w^T (see MatMulArgs) on s.
func (k *Kernels) MatMul(s *cuda.Stream, a MatMulArgs) error {
	p, err := k.PlanMatMul(a)
	if err != nil {
		return err
	}
	return k.launchPlan(s, a, p)
}

func (k *Kernels) launchPlan(s *cuda.Stream, a MatMulArgs, p MatMulPlan) error {
	kn, err := k.compiled(p.Kernel, p.Shmem)
	if err != nil {
		return err
	}
	if err := s.Launch(kn, p.Grid, p.Block, p.Shmem, p.args...); err != nil {
		return fmt.Errorf("matmul T=%d K=%d N=%d: %w", a.T, a.K, a.N, err)
	}
	return nil
}

// mmKernels memoises compiled kernels by device and instantiation: Compile
// hashes the whole source for its cache key, too slow for every launch.
var mmKernels sync.Map // mmKey -> *cuda.Kernel

type mmKey struct {
	dev  *cuda.Device
	file string
	expr string
	size int // source length: two sources with one file name stay apart
}

// compiled returns spec's kernel, compiled once per device, allowing
// shmem bytes of dynamic shared memory when that is above the 48 KiB default.
func (k *Kernels) compiled(spec cuda.KernelSpec, shmem int) (*cuda.Kernel, error) {
	key := mmKey{k.Dev, spec.File, spec.NameExpr(), len(spec.Source)}
	if v, ok := mmKernels.Load(key); ok {
		return v.(*cuda.Kernel), nil
	}
	kn, err := k.Dev.Compile(context.Background(), spec)
	if err != nil {
		return nil, fmt.Errorf("kernel %s in %s: %w", spec.NameExpr(), spec.File, err)
	}
	if shmem > 48<<10 {
		if err := kn.SetMaxDynamicShared(shmem); err != nil {
			return nil, fmt.Errorf("kernel %s: allowing %d bytes of shared memory: %w", spec.NameExpr(), shmem, err)
		}
	}
	mmKernels.Store(key, kn)
	return kn, nil
}
