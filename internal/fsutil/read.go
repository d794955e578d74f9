// Package fsutil reads files of a downloaded checkpoint, which are
// untrusted: a named pipe at a file's path would block a read forever and a
// device would never end, so only regular files are read, up to a size.
package fsutil

import (
	"fmt"
	"io"
	"io/fs"
	"os"
)

// ReadFile reads the regular file at path (following symlinks), refusing
// anything else and files larger than max bytes. Errors wrap the
// underlying one, so errors.Is(err, fs.ErrNotExist) works.
func ReadFile(path string, max int64) ([]byte, error) {
	f, err := OpenRegular(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readLimited(f, path, max)
}

// readLimited reads f (named path in messages) if it is a regular file of
// at most max bytes.
func readLimited(f fs.File, path string, max int64) ([]byte, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if err := Regular(path, st.Mode()); err != nil {
		return nil, err
	}
	if st.Size() > max {
		return nil, fmt.Errorf("%s is %d bytes, more than the %d allowed", path, st.Size(), max)
	}
	// The file may grow while it is read; read one byte past max to see.
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("%s grew past the %d bytes allowed while being read", path, max)
	}
	return data, nil
}

// OpenRegular opens path for reading if it is a regular file (following
// symlinks). The type is checked before opening, so a named pipe is never
// opened (that would block until a writer came), and again on the open file.
func OpenRegular(path string) (*os.File, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if err := Regular(path, st.Mode()); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDONLY|nonblock, 0)
	if err != nil {
		return nil, err
	}
	st, err = f.Stat()
	if err == nil {
		err = Regular(path, st.Mode())
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// Regular returns an error naming what path is unless mode is a regular
// file's.
func Regular(path string, mode fs.FileMode) error {
	if mode.IsRegular() {
		return nil
	}
	return fmt.Errorf("%s is %s, not a regular file", path, Kind(mode))
}

// Kind names a file type for messages: "a directory", "a named pipe", ...
func Kind(mode fs.FileMode) string {
	switch {
	case mode.IsRegular():
		return "a regular file"
	case mode.IsDir():
		return "a directory"
	case mode&fs.ModeSymlink != 0:
		return "a symbolic link"
	case mode&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case mode&fs.ModeSocket != 0:
		return "a socket"
	case mode&fs.ModeCharDevice != 0:
		return "a character device"
	case mode&fs.ModeDevice != 0:
		return "a device"
	}
	return "not a regular file"
}
