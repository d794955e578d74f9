//go:build unix

package fsutil

import "syscall"

// nonblock keeps an open of a file swapped for a named pipe after the check
// from blocking; it does not change reads of regular files.
const nonblock = syscall.O_NONBLOCK
