//go:build unix

package main

import (
	"syscall"
	"time"
)

// processCPU returns the user and system time the process has used (all
// threads): on a shared machine it says what a run cost where wall time
// also counts the other processes.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
