//go:build !unix

package ckpt

import (
	"io"
	"os"
)

// mapFile reads the whole file where mmap is unavailable.
func mapFile(f *os.File) ([]byte, func() error, error) {
	data, err := io.ReadAll(f)
	if err != nil {
		return nil, nil, err
	}
	return data, func() error { return nil }, nil
}
