//go:build !unix

package fsutil

const nonblock = 0
