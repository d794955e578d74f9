package gemv

import "golang.org/x/sys/cpu"

// useFMA selects the assembly kernels (the tests turn it off to check the
// fallback).
var useFMA = HasFMA()

// HasFMA reports whether this machine runs the AVX+FMA kernels.
func HasFMA() bool { return cpu.X86.HasAVX && cpu.X86.HasFMA }
