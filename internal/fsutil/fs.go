package fsutil

import (
	"io/fs"
	"os"
	"path/filepath"
)

// DirFS is os.DirFS for an untrusted directory: Open refuses what is not a
// regular file or a directory, and never opens a named pipe (see
// OpenRegular).
func DirFS(dir string) fs.FS { return dirFS(dir) }

type dirFS string

func (d dirFS) Open(name string) (fs.File, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrInvalid}
	}
	p := filepath.Join(string(d), filepath.FromSlash(name))
	st, err := os.Stat(p)
	if err != nil {
		return nil, err
	}
	if st.IsDir() {
		return os.Open(p)
	}
	return OpenRegular(p)
}

func (d dirFS) Stat(name string) (fs.FileInfo, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "stat", Path: name, Err: fs.ErrInvalid}
	}
	return os.Stat(filepath.Join(string(d), filepath.FromSlash(name)))
}

// ReadFileFS reads the regular file name of fsys, refusing anything else
// and files larger than max bytes; display names it in messages. Errors
// wrap the underlying one, so errors.Is(err, fs.ErrNotExist) works.
func ReadFileFS(fsys fs.FS, name, display string, max int64) ([]byte, error) {
	f, err := fsys.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readLimited(f, display, max)
}
