//go:build unix

// Package mmap maps files read-only into memory (a plain read where the
// platform has no mmap).
package mmap

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Map maps a whole file read-only. An empty file maps to an empty slice.
func Map(f *os.File) ([]byte, func() error, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	size := st.Size()
	if size == 0 {
		return []byte{}, func() error { return nil }, nil
	}
	if size != int64(int(size)) {
		return nil, nil, fmt.Errorf("file of %d bytes is too large to map", size)
	}
	data, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, nil, fmt.Errorf("mmap: %w", err)
	}
	return data, func() error { return unix.Munmap(data) }, nil
}
