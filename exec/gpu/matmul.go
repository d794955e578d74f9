package gpu

import (
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
	// Tile forces the tensor-core tile; zero fields choose automatically.
	Tile MMATile
}

// MMATile is a tensor-core GEMM tile: Rows (64 or 128) of x per CTA and K
// (32 or 64) per pipeline stage. Zero fields choose automatically.
type MMATile struct{ Rows, K int }

// DefaultMMAK is the K step of the tensor-core tiles when MMATile.K is 0.
var DefaultMMAK = 64

func (t MMATile) check() error {
	if (t.Rows != 0 && t.Rows != 64 && t.Rows != 128) || (t.K != 0 && t.K != 32 && t.K != 64) {
		return fmt.Errorf("tensor-core tile %dx%d: rows must be 64 or 128, K 32 or 64", t.Rows, t.K)
	}
	return nil
}

// bk is the tile's K step.
func (t MMATile) bk() int {
	if t.K != 0 {
		return t.K
	}
	return DefaultMMAK
}

// GEMVMaxRows is the largest T the decode GEMV serves; larger T runs a GEMM.
const GEMVMaxRows = 8

// KernelLaunch is one kernel launch of an op: what the executor queues or
// captures, and what a profiler times and names.
type KernelLaunch struct {
	Name        string // the instantiation, e.g. "gemv<bf16_t, bf16_t, bf16_t, 1, 0, 1>"
	Kernel      *cuda.Kernel
	Grid, Block cuda.Dim3
	Shmem       int // dynamic shared memory, bytes
	Args        []any
}

// Launch queues l on s.
func (l KernelLaunch) Launch(s Queue) error {
	if err := s.Launch(l.Kernel, l.Grid, l.Block, l.Shmem, l.Args...); err != nil {
		return fmt.Errorf("%s: %w", l.Name, err)
	}
	return nil
}

// mmaBN is the tensor-core tile's width (matmul.cu's MMA_BN).
const mmaBN = 128

// mmaSmemBytes mirrors matmul.cu's MmaCfg<MI, BK>::SMEM.
func mmaSmemBytes(mi, bk int) int {
	stages := 3
	if bk == 32 {
		stages = 4
	}
	return stages * (32*mi + mmaBN) * (bk + 8) * 2
}

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

// MatMulLaunch returns the launch MatMul queues for a: the GEMV for T <=
// GEMVMaxRows, the bf16 tensor-core GEMM where x and w are bf16 with K a
// multiple of 8, else the FFMA GEMM. It compiles the kernel if needed.
func (k *Kernels) MatMulLaunch(a MatMulArgs) (KernelLaunch, error) {
	if err := a.validate(); err != nil {
		return KernelLaunch{}, err
	}
	if err := a.Tile.check(); err != nil {
		return KernelLaunch{}, fmt.Errorf("matmul: %w", err)
	}
	sms := 132 // an H200's, where no device is open
	if k.props().SMs > 0 {
		sms = k.props().SMs
	}
	var (
		l      KernelLaunch
		name   string
		dtypes []cuda.DType
		ints   []int64
	)
	sw := int64(b2i(a.SwiGLU))
	acc := b2i(a.Accumulate)
	l.Block = cuda.Dim(256)
	switch {
	case a.T <= GEMVMaxRows:
		vec := int64(b2i(gemvVec(a.K, a.WType, a.X, a.W)))
		split := gemvSplit(a.N, a.K, a.WType, sms)
		name, dtypes, ints = "gemv", []cuda.DType{a.XType, a.WType, a.YType}, []int64{int64(a.T), sw, vec}
		l.Grid = cuda.Dim(uint32(ceilDiv(a.N, 8/split)))
		l.Args = []any{int32(a.N), int32(a.K), int32(split), a.X, a.W, a.Y, acc}
	case a.XType == cuda.BF16 && a.WType == cuda.BF16 && a.K%8 == 0 && aligned16(a.X, a.W):
		bn := mmaBN
		if a.SwiGLU {
			bn = 64
		}
		// 128-row tiles where they still give two CTAs per SM, else 64.
		mi := a.Tile.Rows / 32
		if mi == 0 {
			mi = 4
			if ceilDiv(a.T, 128)*ceilDiv(a.N, bn) < 2*sms {
				mi = 2
			}
		}
		bk := a.Tile.bk()
		name, dtypes, ints = "gemm_bf16", []cuda.DType{a.YType}, []int64{int64(mi), sw, int64(bk)}
		l.Grid, l.Shmem = cuda.Dim(uint32(ceilDiv(a.T, 32*mi)), uint32(ceilDiv(a.N, bn))), mmaSmemBytes(mi, bk)
		l.Args = []any{int32(a.T), int32(a.N), int32(a.K), a.X, a.W, a.Y, acc}
	default:
		name, dtypes, ints = "gemm_simple", []cuda.DType{a.XType, a.WType, a.YType}, []int64{sw}
		l.Grid = cuda.Dim(uint32(ceilDiv(a.T, 64)), uint32(ceilDiv(a.N, 64)))
		l.Args = []any{int32(a.T), int32(a.N), int32(a.K), a.X, a.W, a.Y, acc}
	}
	if l.Grid.Y > 65535 {
		return KernelLaunch{}, fmt.Errorf("matmul: N=%d needs %d column tiles (limit 65535)", a.N, l.Grid.Y)
	}
	var err error
	if l.Kernel, err = k.mmKernel("matmul.cu", name, dtypes, ints, l.Shmem); err != nil {
		return KernelLaunch{}, err
	}
	l.Name = l.Kernel.NameExpr
	return l, nil
}

// MatMul queues y = x w^T (see MatMulArgs) on s.
func (k *Kernels) MatMul(s Queue, a MatMulArgs) error {
	l, err := k.MatMulLaunch(a)
	if err != nil {
		return err
	}
	if err := l.Launch(s); err != nil {
		return fmt.Errorf("matmul T=%d K=%d N=%d: %w", a.T, a.K, a.N, err)
	}
	return nil
}

// mmKernels memoises compiled kernels by device and instantiation, keyed
// without formatting: Compile hashes the whole source for its cache key,
// too slow for every launch.
var mmKernels sync.Map // mmKey -> *cuda.Kernel

type mmKey struct {
	dev    *cuda.Device
	fake   bool
	file   string
	name   string
	dtypes [3]cuda.DType
	ints   [4]int64
}

// mmSources are the kernel sources, read once: matmul.cu, and moe.cu with
// matmul.cu in front of it (it uses that file's pieces).
var mmSources = sync.OnceValues(func() (map[string]string, error) {
	mm, err := cuda.Source("matmul.cu")
	if err != nil {
		return nil, err
	}
	moe, err := cuda.Source("moe.cu")
	if err != nil {
		return nil, err
	}
	return map[string]string{
		"matmul.cu": mm,
		// Each file keeps its own line numbers in diagnostics.
		"moe.cu": "#line 1 \"matmul.cu\"\n" + mm + "\n#line 1 \"moe.cu\"\n" + moe,
	}, nil
})

// mmKernel returns kernel name of file instantiated for dtypes and ints,
// compiled once per device, allowing shmem bytes of dynamic shared memory
// when that is above the 48 KiB default.
func (k *Kernels) mmKernel(file, name string, dtypes []cuda.DType, ints []int64, shmem int) (*cuda.Kernel, error) {
	if k.Dev == nil && !k.fake {
		return nil, fmt.Errorf("kernel %s: no device", name)
	}
	key := mmKey{dev: k.Dev, fake: k.fake, file: file, name: name}
	if len(dtypes) > len(key.dtypes) || len(ints) > len(key.ints) {
		return nil, fmt.Errorf("kernel %s: too many template arguments", name)
	}
	copy(key.dtypes[:], dtypes)
	copy(key.ints[:], ints)
	if v, ok := mmKernels.Load(key); ok {
		return v.(*cuda.Kernel), nil
	}
	srcs, err := mmSources()
	if err != nil {
		return nil, err
	}
	spec := cuda.KernelSpec{Name: name, File: file, Source: srcs[file], DTypes: dtypes, Ints: ints}
	kn, err := k.compile(spec)
	if err != nil {
		return nil, fmt.Errorf("kernel %s in %s: %w", spec.NameExpr(), file, err)
	}
	if shmem > 48<<10 && !k.fake {
		if err := kn.SetMaxDynamicShared(shmem); err != nil {
			return nil, fmt.Errorf("kernel %s: allowing %d bytes of shared memory: %w", spec.NameExpr(), shmem, err)
		}
	}
	mmKernels.Store(key, kn)
	return kn, nil
}
