//go:build !unix

// Package cputime reads the CPU time the process has used: on a shared
// machine it says what a run cost where wall time also counts the other
// processes.
package cputime

import "time"

// Process returns the user and system time of the process (all threads),
// 0 where the platform does not tell.
func Process() time.Duration { return 0 }
