// Package gpu runs Laguna on NVIDIA GPUs: the executor that runs a lowered
// plan eagerly or as a captured CUDA graph, and launchers for every op's
// kernels (checked against exec/cpu by the tests in this package).
//
// Every decision of what to launch is lower's: a lower.Launch names the
// instantiation, geometry and arguments. This package compiles the
// instantiation (cached by its full signature), binds the arguments'
// regions to device memory and queues the launch. The launchers
// (Kernels.MatMul, MoEExperts, AttentionDecode, ...) take device pointers,
// ask lower's kernel functions for the launch and bind it, so the kernel
// tests exercise the same rules the plan uses.
//
// Kernel sources live in cuda/kernels/ (one file per op family, named after
// the op: rms_norm in norm.cu, attention in attention.cu, ...). Activations
// are bf16 (or f32 for exact testing); every kernel accumulates in f32.
package gpu

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"lagc/cuda"
	"lagc/lower"
)

// Kernels compiles (through the cuda package's memory and disk caches) and
// launches the Laguna kernels on one device.
type Kernels struct {
	Dev *cuda.Device
	// Lt runs the plan's cuBLASLt launches (lower.CublasLtGEMM); nil where
	// the plan has none.
	Lt *cuda.Lt
	// fake stands in for the device: kernels are not compiled but only
	// name their instantiation, so launches can be recorded without a GPU.
	fake bool
}

// NewKernels returns the launchers for dev.
func NewKernels(dev *cuda.Device) *Kernels { return &Kernels{Dev: dev} }

// DTypes lists the activation/weight dtypes the kernels are built for.
var DTypes = []cuda.DType{cuda.F32, cuda.BF16}

// fakeProps are the properties a fake device reports: an H200's.
var fakeProps = cuda.Props{Name: "recorder", SMs: 132, Major: 9}

// props returns the device's properties.
func (k *Kernels) props() cuda.Props {
	if k.Dev == nil {
		return fakeProps
	}
	return k.Dev.Props()
}

// SMs is the device's multiprocessor count, which lower's rules size
// grids and splits by.
func (k *Kernels) SMs() int { return k.props().SMs }

// CC is the device's compute capability, major*10+minor.
func (k *Kernels) CC() int { p := k.props(); return p.Major*10 + p.Minor }

// kernelKey identifies one instantiation on one device.
type kernelKey struct {
	dev        *cuda.Device
	fake       bool
	file, name string
	dts        [4]cuda.DType
	ints       [9]int64 // qgemv_pair has 9
	opts       string   // EnvNVRTCOptions's, if any
}

// compiled memoises instantiations: Compile hashes the whole source for
// its cache key, which would cost an eager launch more than the launch.
var compiled sync.Map // kernelKey -> *cuda.Kernel

// sourceDeps are files a kernel file is compiled after: moe.cu uses
// matmul.cu's tensor-core pieces and norm.cu's warp sums and 16-byte loads
// (moe_combine_norm), router.cu its GEMV (router_fused), the attention kernels gate.cu's output gate (and the decode attention
// rope.cu's norm and rotation, fused; the wgmma prefill attention those
// too, the tensor-core one's pieces and gemm_hopper.cu's wgmma ones), the quantised GEMVs the norm
// they may end with, router_qgemv.cu the router and the quantised GEMV,
// persist.cu the quantised GEMV's body.
var sourceDeps = map[string][]string{
	"moe.cu":                  {"matmul.cu", "norm.cu"},
	"router.cu":               {"matmul.cu"},
	"router_qgemv.cu":         {"matmul.cu", "router.cu", "norm.cu", "quant.cu"},
	"attention.cu":            {"gate.cu", "rope.cu"},
	"attention_prefill_tc.cu": {"gate.cu"},
	"attention_prefill_wg.cu": {"gate.cu", "rope.cu", "attention_prefill_tc.cu", "gemm_hopper.cu"},
	"quant.cu":                {"norm.cu"},
	"persist.cu":              {"norm.cu", "quant.cu"},
}

// source is the text NVRTC compiles for file: its dependencies, then the
// file, each keeping its own line numbers in diagnostics.
func source(file string) (string, error) {
	deps := sourceDeps[file]
	if len(deps) == 0 {
		return cuda.Source(file)
	}
	var text string
	for _, f := range append(append([]string(nil), deps...), file) {
		s, err := cuda.Source(f)
		if err != nil {
			return "", err
		}
		if text != "" {
			text += "\n"
		}
		text += "#line 1 \"" + f + "\"\n" + s
	}
	return text, nil
}

// launchSpec is the NVRTC spec of l's instantiation (without its source),
// with the options EnvNVRTCOptions gives its kernel.
func launchSpec(l lower.Launch) (cuda.KernelSpec, error) {
	spec := cuda.KernelSpec{Name: l.Kernel, File: l.File, Ints: l.Ints}
	opts, err := nvrtcOptions(l.Kernel)
	if err != nil {
		return spec, err
	}
	spec.Options = opts
	for _, s := range l.DTypes {
		dt, err := cuda.ParseDType(s)
		if err != nil {
			return spec, fmt.Errorf("kernel %s: %w", l.Kernel, err)
		}
		spec.DTypes = append(spec.DTypes, dt)
	}
	return spec, nil
}

// Kernel returns the compiled instantiation l names, allowed l.Shmem bytes
// of dynamic shared memory.
func (k *Kernels) Kernel(l lower.Launch) (*cuda.Kernel, error) {
	key := kernelKey{dev: k.Dev, fake: k.fake, file: l.File, name: l.Kernel}
	if len(l.DTypes) > len(key.dts) || len(l.Ints) > len(key.ints) {
		return nil, fmt.Errorf("kernel %s: too many template arguments", l.NameExpr())
	}
	spec, err := launchSpec(l)
	if err != nil {
		return nil, err
	}
	copy(key.dts[:], spec.DTypes)
	copy(key.ints[:], l.Ints)
	key.opts = strings.Join(spec.Options, " ")
	if k.fake {
		if v, ok := compiled.Load(key); ok {
			return v.(*cuda.Kernel), nil
		}
		kn := &cuda.Kernel{NameExpr: spec.NameExpr()}
		compiled.Store(key, kn)
		return kn, nil
	}
	if k.Dev == nil {
		return nil, fmt.Errorf("kernel %s: no device", spec.NameExpr())
	}
	if max := k.props().MaxSharedPerBlock; max > 0 && l.Shmem > max {
		return nil, fmt.Errorf("kernel %s needs %d bytes of shared memory, the device allows %d", spec.NameExpr(), l.Shmem, max)
	}
	var kn *cuda.Kernel
	if v, ok := compiled.Load(key); ok {
		kn = v.(*cuda.Kernel)
	} else {
		src, err := source(l.File)
		if err != nil {
			return nil, err
		}
		spec.Source = src
		if kn, err = k.Dev.Compile(context.Background(), spec); err != nil {
			return nil, fmt.Errorf("kernel %s in %s: %w", spec.NameExpr(), l.File, err)
		}
		compiled.Store(key, kn)
	}
	if err := allowShared(kn, l.Shmem); err != nil {
		return nil, err
	}
	return kn, nil
}

// sharedSet remembers the dynamic shared memory each kernel was allowed
// (one instantiation may launch with several sizes: it is only raised).
var sharedSet sync.Map // *cuda.Kernel -> int

// allowShared lets kn launch with bytes of dynamic shared memory: the
// driver wants an opt-in above 48 KiB.
func allowShared(kn *cuda.Kernel, bytes int) error {
	if bytes <= 48<<10 {
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

// KernelLaunch is a launch bound to a device: what the executor queues or
// captures, and what a profiler times and names. A copy has no Kernel; its
// Args are the destination, the source and the byte count (int64).
type KernelLaunch struct {
	Name        string // the instantiation, e.g. "gemv<bf16_t, bf16_t, bf16_t, 1, 0, 1>", or "memcpy"
	Kernel      *cuda.Kernel
	Grid, Block cuda.Dim3
	Shmem       int // dynamic shared memory, bytes
	Args        []any
	lt          *ltCall // a cuBLASLt GEMM instead of a kernel
}

// ltCall is a bound lower.CublasLtGEMM launch.
type ltCall struct {
	lt         *cuda.Lt
	T, N, K    int
	x, w, y    cuda.DevicePtr
	yt         cuda.DType
	accumulate bool
}

// Launch queues l on s.
func (l KernelLaunch) Launch(s Queue) error {
	if c := l.lt; c != nil {
		if err := s.GEMMLt(c.lt, c.T, c.N, c.K, c.x, c.w, c.y, c.yt, c.accumulate); err != nil {
			return fmt.Errorf("%s %d x %d x %d: %w", l.Name, c.T, c.N, c.K, err)
		}
		return nil
	}
	if l.Kernel == nil {
		dst, _ := l.Args[0].(cuda.DevicePtr)
		src, _ := l.Args[1].(cuda.DevicePtr)
		n, _ := l.Args[2].(int64)
		if err := s.CopyDtoD(dst, src, n); err != nil {
			return fmt.Errorf("memcpy of %d bytes: %w", n, err)
		}
		return nil
	}
	if err := s.Launch(l.Kernel, l.Grid, l.Block, l.Shmem, l.Args...); err != nil {
		return fmt.Errorf("%s: %w", l.Name, err)
	}
	return nil
}

// Bind compiles l's kernel and resolves its arguments, each region through
// base.
func (k *Kernels) Bind(l lower.Launch, base func(region string) (cuda.DevicePtr, error)) (KernelLaunch, error) {
	args := make([]any, len(l.Args))
	for i, a := range l.Args {
		switch a.Kind {
		case lower.ArgPtr:
			if a.Base == "" {
				args[i] = cuda.DevicePtr(0)
				continue
			}
			b, err := base(a.Base)
			if err != nil {
				return KernelLaunch{}, fmt.Errorf("%s argument %d: %w", l.Kernel, i, err)
			}
			args[i] = b.Add(a.Offset)
		case lower.ArgI32:
			args[i] = int32(a.Int)
		case lower.ArgI64:
			args[i] = a.Int
		case lower.ArgU32:
			args[i] = uint32(a.Int)
		case lower.ArgF32:
			args[i] = a.Float
		case lower.ArgTMap:
			b, err := base(a.Base)
			if err != nil {
				return KernelLaunch{}, fmt.Errorf("%s argument %d: %w", l.Kernel, i, err)
			}
			m, err := k.tensorMap(b.Add(a.Offset), a)
			if err != nil {
				return KernelLaunch{}, fmt.Errorf("%s argument %d: %w", l.Kernel, i, err)
			}
			args[i] = m
		default:
			return KernelLaunch{}, fmt.Errorf("%s argument %d: unknown kind %q", l.Kernel, i, a.Kind)
		}
	}
	if l.Kernel == lower.Memcpy {
		if !lower.ArgKinds(l.Args, lower.ArgPtr, lower.ArgPtr, lower.ArgI64) {
			return KernelLaunch{}, fmt.Errorf("memcpy takes a destination, a source and a byte count, got %v", l.Args)
		}
		return KernelLaunch{Name: lower.Memcpy, Args: args}, nil
	}
	if l.Kernel == lower.CublasLtGEMM {
		return k.bindLt(l, args)
	}
	for _, d := range append(l.Grid[:], l.Block[:]...) {
		if d < 1 || d > 1<<31-1 {
			return KernelLaunch{}, fmt.Errorf("%s: grid %v block %v", l.NameExpr(), l.Grid, l.Block)
		}
	}
	kn, err := k.Kernel(l)
	if err != nil {
		return KernelLaunch{}, err
	}
	return KernelLaunch{Name: kn.NameExpr, Kernel: kn,
		Grid:  cuda.Dim(uint32(l.Grid[0]), uint32(l.Grid[1]), uint32(l.Grid[2])),
		Block: cuda.Dim(uint32(l.Block[0]), uint32(l.Block[1]), uint32(l.Block[2])),
		Shmem: l.Shmem, Args: args}, nil
}

// tensorMap encodes the TMA tensor map a describes over the matrix at p (on
// a fake device only its description).
func (k *Kernels) tensorMap(p cuda.DevicePtr, a lower.Arg) (cuda.TensorMapArg, error) {
	m := a.Map
	if m == nil {
		return cuda.TensorMapArg{}, fmt.Errorf("tensor map without its matrix")
	}
	t := cuda.TensorMapArg{Desc: a.String()}
	if k.fake {
		return t, nil
	}
	if k.Dev == nil {
		return t, fmt.Errorf("tensor map: no device")
	}
	var err error
	switch m.Elem {
	case "bf16", "f16": // TMA copies the bits; the type would matter only to out-of-bounds fills, zeros either way
		t.Map, err = k.Dev.TensorMapBF16(p, m.Rows, m.Cols, m.LD, m.BoxRows, m.BoxCols)
	case "u8":
		t.Map, err = k.Dev.TensorMapBytes(p, m.Rows, m.Cols, m.LD, m.BoxRows, m.BoxCols)
	default:
		err = fmt.Errorf("tensor map of %q elements", m.Elem)
	}
	return t, err
}

// deviceBase binds the regions a launcher uses: lower.BaseDevice is
// address 0, so its offsets are device addresses.
func deviceBase(region string) (cuda.DevicePtr, error) {
	if region == lower.BaseDevice {
		return 0, nil
	}
	return 0, fmt.Errorf("region %q outside an executor", region)
}

// ptr is the lower pointer of a device address.
func ptr(p cuda.DevicePtr) lower.Ptr { return lower.DevicePtr(uint64(p)) }

// queuer binds launches lower made for device pointers and queues them:
// k.on(s).one(lower.RMSNorm(...)).
type queuer struct {
	k *Kernels
	s Queue
}

func (k *Kernels) on(s Queue) queuer { return queuer{k, s} }

func (q queuer) one(l lower.Launch, err error) error {
	if err != nil {
		return fmt.Errorf("gpu.%w", err)
	}
	return q.all([]lower.Launch{l}, nil)
}

func (q queuer) all(ls []lower.Launch, err error) error {
	if err != nil {
		return fmt.Errorf("gpu.%w", err)
	}
	for _, l := range ls {
		b, err := q.k.Bind(l, deviceBase)
		if err != nil {
			return err
		}
		if err := b.Launch(q.s); err != nil {
			return err
		}
	}
	return nil
}

// bindLt binds a lower.CublasLtGEMM launch (T, N, K, x, w, y, accumulate).
func (k *Kernels) bindLt(l lower.Launch, args []any) (KernelLaunch, error) {
	name := lower.CublasLtName(strings.Join(l.DTypes, ", "))
	const i32, ptr = lower.ArgI32, lower.ArgPtr
	if len(l.DTypes) != 1 || !lower.ArgKinds(l.Args, i32, i32, i32, ptr, ptr, ptr, i32) {
		return KernelLaunch{}, fmt.Errorf("%s takes T, N, K, x, w, y and accumulate, got %v", name, l.Args)
	}
	yt, err := dtypeOf(l.DTypes[0])
	if err != nil {
		return KernelLaunch{}, fmt.Errorf("%s: %w", name, err)
	}
	if k.Lt == nil && !k.fake {
		return KernelLaunch{}, fmt.Errorf("%s: the plan uses cuBLASLt, which this executor did not load", name)
	}
	c := &ltCall{lt: k.Lt, T: int(l.Args[0].Int), N: int(l.Args[1].Int), K: int(l.Args[2].Int),
		x: args[3].(cuda.DevicePtr), w: args[4].(cuda.DevicePtr), y: args[5].(cuda.DevicePtr), yt: yt, accumulate: l.Args[6].Int != 0}
	return KernelLaunch{Name: name, Args: args, lt: c}, nil
}
