package cuda

import (
	"syscall"
	"unsafe"
)

// kernelSigaction is struct sigaction as the rt_sigaction system call
// takes it on linux/amd64 and arm64: handler, flags, restorer, mask.
type kernelSigaction struct {
	handler, flags, restorer, mask uint64
}

const saOnStack = 0x08000000

// SignalsWithoutOnStack lists the signals whose handler, installed by
// code other than Go's runtime, lacks SA_ONSTACK: the Go runtime, reached
// through such a handler off its signal stack, throws "non-Go code set up
// signal handler without SA_ONSTACK flag". With fix it adds the flag.
func SignalsWithoutOnStack(fix bool) ([]int, error) {
	var bad []int
	for sig := 1; sig < 65; sig++ {
		if sig == int(syscall.SIGKILL) || sig == int(syscall.SIGSTOP) {
			continue
		}
		var sa kernelSigaction
		if _, _, e := syscall.RawSyscall6(syscall.SYS_RT_SIGACTION, uintptr(sig), 0, uintptr(unsafe.Pointer(&sa)), 8, 0, 0); e != 0 {
			continue // not a signal this kernel has
		}
		if sa.handler <= 1 || sa.flags&saOnStack != 0 { // SIG_DFL, SIG_IGN, or fine
			continue
		}
		bad = append(bad, sig)
		if fix {
			sa.flags |= saOnStack
			if _, _, e := syscall.RawSyscall6(syscall.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(&sa)), 0, 8, 0, 0); e != 0 {
				return bad, e
			}
		}
	}
	return bad, nil
}
