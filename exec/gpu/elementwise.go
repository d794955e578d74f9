package gpu

import (
	"fmt"
	"math"
	"sync"

	"lagc/cuda"
)

// This file has the element-wise launchers (silu, mul, add, swiglu) and the
// small helpers every op launcher in this package shares.

// opKey identifies one compiled kernel instantiation on one device.
type opKey struct {
	dev        *cuda.Device
	fake       bool
	file, name string
	dts        [2]cuda.DType
	ints       [2]int64
}

// opKernels memoises instantiations: k.kernel hashes the whole source on
// every call (the cache key), which would cost an eager launch more than
// the launch itself.
var opKernels sync.Map // opKey -> *cuda.Kernel

// op returns the instantiation of kernel name in file for up to two dtypes
// and two integer template arguments.
func (k *Kernels) op(file, name string, dts []cuda.DType, ints ...int64) (*cuda.Kernel, error) {
	if len(dts) > 2 || len(ints) > 2 {
		return nil, fmt.Errorf("gpu: kernel %s: too many template arguments", name)
	}
	key := opKey{dev: k.Dev, fake: k.fake, file: file, name: name}
	copy(key.dts[:], dts)
	copy(key.ints[:], ints)
	if v, ok := opKernels.Load(key); ok {
		return v.(*cuda.Kernel), nil
	}
	kn, err := k.kernel(file, name, dts, ints...)
	if err != nil {
		return nil, err
	}
	opKernels.Store(key, kn)
	return kn, nil
}

// sharedSet remembers the dynamic shared memory each kernel was allowed.
var sharedSet sync.Map // *cuda.Kernel -> int

// allowShared lets kn launch with bytes of dynamic shared memory (the
// driver wants an opt-in above 48 KiB).
func (k *Kernels) allowShared(kn *cuda.Kernel, bytes int) error {
	if bytes <= 48<<10 || k.fake {
		return nil
	}
	if v, ok := sharedSet.Load(kn); ok && v.(int) >= bytes {
		return nil
	}
	if err := kn.SetMaxDynamicShared(bytes); err != nil {
		return fmt.Errorf("allowing %d bytes of shared memory to %s: %w", bytes, kn.NameExpr, err)
	}
	sharedSet.Store(kn, bytes)
	return nil
}

// checkDT accepts the storage dtypes the op kernels are written for.
func checkDT(op string, dt cuda.DType) error {
	switch dt {
	case cuda.F32, cuda.BF16, cuda.F16:
		return nil
	}
	return fmt.Errorf("gpu.%s: dtype %v is not supported (f32, bf16, f16)", op, dt)
}

// checkPos fails unless every named value is positive and fits an int32
// kernel argument.
func checkPos(op string, kv ...any) error {
	for i := 0; i+1 < len(kv); i += 2 {
		name, _ := kv[i].(string)
		v, _ := kv[i+1].(int)
		if v <= 0 || v > math.MaxInt32 {
			return fmt.Errorf("gpu.%s: %s = %d must be in [1, %d]", op, name, v, math.MaxInt32)
		}
	}
	return nil
}

// checkPtrs fails on a null device pointer.
func checkPtrs(op string, kv ...any) error {
	for i := 0; i+1 < len(kv); i += 2 {
		name, _ := kv[i].(string)
		if p, _ := kv[i+1].(cuda.DevicePtr); p == 0 {
			return fmt.Errorf("gpu.%s: %s is a null device pointer", op, name)
		}
	}
	return nil
}

// grid1D is the launch geometry of a grid-stride loop over n elements.
func grid1D(n int64) (cuda.Dim3, cuda.Dim3) {
	const threads = 256
	blocks := (n + threads - 1) / threads
	blocks = max(1, min(blocks, 8192))
	return cuda.Dim(uint32(blocks)), cuda.Dim(threads)
}

// elementwise launches one of the n-element kernels of elementwise_ops.cu.
func (k *Kernels) elementwise(op, name string, s Queue, dt cuda.DType, n int, ptrs ...cuda.DevicePtr) error {
	if err := checkDT(op, dt); err != nil {
		return err
	}
	if n <= 0 {
		return fmt.Errorf("gpu.%s: n = %d must be positive", op, n)
	}
	for i, p := range ptrs {
		if p == 0 {
			return fmt.Errorf("gpu.%s: pointer %d is null", op, i)
		}
	}
	kn, err := k.op("elementwise_ops.cu", name, []cuda.DType{dt})
	if err != nil {
		return fmt.Errorf("gpu.%s: %w", op, err)
	}
	args := []any{int64(n)}
	for _, p := range ptrs {
		args = append(args, p)
	}
	g, b := grid1D(int64(n))
	if err := s.Launch(kn, g, b, 0, args...); err != nil {
		return fmt.Errorf("gpu.%s: %w", op, err)
	}
	return nil
}

// SiLU computes out = x * sigmoid(x) over n elements of dtype dt (float32
// math). out may alias x.
func (k *Kernels) SiLU(s Queue, dt cuda.DType, out, x cuda.DevicePtr, n int) error {
	return k.elementwise("SiLU", "silu", s, dt, n, x, out)
}

// Mul computes out = a * b over n elements. out may alias a or b.
func (k *Kernels) Mul(s Queue, dt cuda.DType, out, a, b cuda.DevicePtr, n int) error {
	return k.elementwise("Mul", "mul", s, dt, n, a, b, out)
}

// Add computes out = a + b over n elements (the residual adds). out may
// alias a or b.
func (k *Kernels) Add(s Queue, dt cuda.DType, out, a, b cuda.DevicePtr, n int) error {
	return k.elementwise("Add", "add", s, dt, n, a, b, out)
}

// SwiGLU computes out[r, c] = silu(a[r, c]) * b[r, c] for out [rows, n]
// (contiguous); rows of a and b are ld elements apart (0: n). For a fused
// gate|up output g [rows, 2n]: a = g, b = g + n elements, ld = 2n.
func (k *Kernels) SwiGLU(s Queue, dt cuda.DType, out, a, b cuda.DevicePtr, rows, n, ld int) error {
	const op = "SwiGLU"
	if err := checkDT(op, dt); err != nil {
		return err
	}
	if ld == 0 {
		ld = n
	}
	if err := checkPos(op, "rows", rows, "n", n); err != nil {
		return err
	}
	if ld < n {
		return fmt.Errorf("gpu.%s: row stride %d is below the row length %d", op, ld, n)
	}
	if err := checkPtrs(op, "out", out, "a", a, "b", b); err != nil {
		return err
	}
	kn, err := k.op("elementwise_ops.cu", "swiglu", []cuda.DType{dt})
	if err != nil {
		return fmt.Errorf("gpu.%s: %w", op, err)
	}
	g, bl := grid1D(int64(rows) * int64(n))
	if err := s.Launch(kn, g, bl, 0, int32(rows), int32(n), a, b, int64(ld), out); err != nil {
		return fmt.Errorf("gpu.%s: %w", op, err)
	}
	return nil
}
