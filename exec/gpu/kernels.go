// Package gpu runs Laguna on NVIDIA GPUs: launchers for every op's CUDA
// kernel (checked against exec/cpu by the tests in this package), and the
// executor that runs a lowered plan eagerly or as a captured CUDA graph.
//
// Kernel sources live in cuda/kernels/ (one file per op family, named after
// the op: rms_norm in norm.cu, attention in attention.cu, ...). Activations
// are bf16 (or f32 for exact testing); every kernel accumulates in f32.
package gpu

import (
	"context"
	"fmt"

	"lagc/cuda"
)

// Kernels compiles (through the cuda package's memory and disk caches) and
// launches the Laguna kernels on one device.
type Kernels struct {
	Dev *cuda.Device
	// fake stands in for the device: kernels are not compiled but only
	// name their instantiation, so launches can be recorded without a GPU.
	fake bool
}

// compile returns the kernel spec describes.
func (k *Kernels) compile(spec cuda.KernelSpec) (*cuda.Kernel, error) {
	if k.fake {
		return &cuda.Kernel{NameExpr: spec.NameExpr()}, nil
	}
	if k.Dev == nil {
		return nil, fmt.Errorf("kernel %s: no device", spec.NameExpr())
	}
	return k.Dev.Compile(context.Background(), spec)
}

// fakeProps are the properties a fake device reports: an H200's.
var fakeProps = cuda.Props{Name: "recorder", SMs: 132}

// props returns the device's properties.
func (k *Kernels) props() cuda.Props {
	if k.Dev == nil {
		return fakeProps
	}
	return k.Dev.Props()
}

// NewKernels returns the launchers for dev.
func NewKernels(dev *cuda.Device) *Kernels { return &Kernels{Dev: dev} }

// kernel returns the instantiation of template name from an embedded file
// for the given dtypes and non-type arguments. Compile caches it, so calling
// this on every launch costs a map lookup; hot paths may keep the result.
func (k *Kernels) kernel(file, name string, dtypes []cuda.DType, ints ...int64) (*cuda.Kernel, error) {
	spec, err := cuda.EmbeddedSpec(file, name, dtypes...)
	if err != nil {
		return nil, err
	}
	spec.Ints = ints
	kn, err := k.compile(spec)
	if err != nil {
		return nil, fmt.Errorf("kernel %s%v in %s: %w", name, dtypes, file, err)
	}
	return kn, nil
}

// DTypes lists the activation/weight dtypes the kernels are built for.
var DTypes = []cuda.DType{cuda.F32, cuda.BF16}

// ceilDiv is used for launch geometry.
func ceilDiv(a, b int) int { return (a + b - 1) / b }
