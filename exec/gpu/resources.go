package gpu

import (
	"fmt"

	"lagc/cuda"
	"lagc/lower"
)

// LaunchResources compiles l's instantiation for arch (e.g. "sm_90a") with
// NVRTC alone, no driver or device, and reads from the cubin what a block
// of it takes of a multiprocessor: registers and frame a thread, static
// shared memory (l.Shmem, the dynamic part, is the launch's).
func LaunchResources(l lower.Launch, arch string) (cuda.KernelResources, error) {
	spec := cuda.KernelSpec{Name: l.Kernel, File: l.File, Ints: l.Ints}
	opts, err := nvrtcOptions(l.Kernel) // as the executor compiles it (LAGC_NVRTC_OPTIONS)
	if err != nil {
		return cuda.KernelResources{}, err
	}
	spec.Options = opts
	for _, s := range l.DTypes {
		dt, err := cuda.ParseDType(s)
		if err != nil {
			return cuda.KernelResources{}, fmt.Errorf("kernel %s: %w", l.Kernel, err)
		}
		spec.DTypes = append(spec.DTypes, dt)
	}
	src, err := source(l.File)
	if err != nil {
		return cuda.KernelResources{}, err
	}
	spec.Source = src
	c, err := cuda.CompileCubin(spec, arch)
	if err != nil {
		return cuda.KernelResources{}, fmt.Errorf("kernel %s in %s: %w", spec.NameExpr(), l.File, err)
	}
	r, err := cuda.CubinKernelResources(c.Cubin, c.Lowered)
	if err != nil {
		return cuda.KernelResources{}, fmt.Errorf("kernel %s: %w", spec.NameExpr(), err)
	}
	return r, nil
}
