// Package atomicfile writes a file in place of another: into a temporary
// file beside it, renamed over it only when complete, so an interrupted or
// failed write leaves the previous file intact and no partial one behind.
package atomicfile

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// TempSuffix ends the names of temporary files: PATH.RANDOM.tmp.
const TempSuffix = ".tmp"

// File is a file being written in place of Path.
type File struct {
	*os.File
	Path string
	done bool
}

// Create starts writing path. The temporary file is created with mode 0666,
// so the umask decides the permissions, as for any file a tool creates.
func Create(path string) (*File, error) {
	dir := filepath.Dir(path)
	for range 100 {
		var b [8]byte
		if _, err := rand.Read(b[:]); err != nil {
			return nil, err
		}
		name := filepath.Join(dir, filepath.Base(path)+"."+hex.EncodeToString(b[:])+TempSuffix)
		f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o666)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("create a temporary file beside %s: %w", path, err)
		}
		return &File{File: f, Path: path}, nil
	}
	return nil, fmt.Errorf("create a temporary file beside %s: 100 names taken", path)
}

// Commit syncs the temporary file and renames it over Path.
func (f *File) Commit() error {
	if f.done {
		return fmt.Errorf("%s: already committed or aborted", f.Path)
	}
	f.done = true
	err := f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), f.Path)
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("write %s: %w", f.Path, err)
	}
	return nil
}

// Abort closes and removes the temporary file; Path is untouched. It does
// nothing after Commit or a previous Abort.
func (f *File) Abort() {
	if f.done {
		return
	}
	f.done = true
	f.Close()
	os.Remove(f.Name())
}
