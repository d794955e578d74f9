package vec

import "golang.org/x/sys/cpu"

// hasAVX2: the bfloat16 kernel of fmaKernels widens with AVX2.
var hasAVX2 = cpu.X86.HasAVX2

// best returns the widest kernels this machine runs: the generated
// assembly names the extensions each needs.
func best() kernels {
	x := cpu.X86
	switch {
	case x.HasAVX512F && x.HasAVX512VL && x.HasBMI2 && x.HasAVX2 && x.HasFMA:
		return avx512Kernels
	case x.HasAVX && x.HasFMA:
		return fmaKernels
	}
	return gonumKernels
}
