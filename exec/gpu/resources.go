package gpu

import (
	"fmt"

	"lagc/cuda"
	"lagc/lower"
)

// compileLaunch compiles l's instantiation for arch (e.g. "sm_90a") with
// NVRTC alone, no driver or device, as the executor would (launchSpec),
// with extra options after its own.
func compileLaunch(l lower.Launch, arch string, extra ...string) (cuda.Compiled, error) {
	spec, err := launchSpec(l)
	if err != nil {
		return cuda.Compiled{}, err
	}
	spec.Options = append(spec.Options, extra...)
	if spec.Source, err = source(l.File); err != nil {
		return cuda.Compiled{}, err
	}
	c, err := cuda.CompileCubin(spec, arch)
	if err != nil {
		return cuda.Compiled{}, fmt.Errorf("kernel %s in %s: %w", spec.NameExpr(), l.File, err)
	}
	return c, nil
}

// LaunchResources compiles l's instantiation for arch (compileLaunch) and
// reads from the cubin what a block of it takes of a multiprocessor:
// registers and frame a thread, static shared memory (l.Shmem, the dynamic
// part, is the launch's).
func LaunchResources(l lower.Launch, arch string) (cuda.KernelResources, error) {
	c, err := compileLaunch(l, arch)
	if err != nil {
		return cuda.KernelResources{}, err
	}
	r, err := cuda.CubinKernelResources(c.Cubin, c.Lowered)
	if err != nil {
		return cuda.KernelResources{}, fmt.Errorf("kernel %s: %w", l.NameExpr(), err)
	}
	return r, nil
}
