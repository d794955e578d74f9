//go:build unix

// Package cputime reads the CPU time the process has used: on a shared
// machine it says what a run cost where wall time also counts the other
// processes.
package cputime

import (
	"syscall"
	"time"
)

// Process returns the user and system time of the process (all threads),
// 0 where the platform does not tell.
func Process() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
