//go:build !unix

package mmap

import (
	"io"
	"os"
)

// Map reads the whole file where mmap is unavailable.
func Map(f *os.File) ([]byte, func() error, error) {
	data, err := io.ReadAll(f)
	if err != nil {
		return nil, nil, err
	}
	return data, func() error { return nil }, nil
}
