//go:build unix

package passes

import (
	"syscall"
	"time"
)

// cpuTime is the CPU time this process has used: unlike the wall clock, it
// does not grow when other processes share the machine.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
