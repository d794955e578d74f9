package ckpt

import (
	"fmt"
	"io/fs"
	"lagc/internal/fsutil"
	"os"
	"path"
	"path/filepath"
)

// hfDir reads the files of a Hugging Face checkpoint directory: one on disk
// (shards mapped into memory) or one in an fs.FS (shards read into memory).
type hfDir interface {
	readFile(name string, max int64) ([]byte, error) // regular files up to max bytes; an error wrapping fs.ErrNotExist when missing
	mapFile(name string) (*mappedFile, error)
	exists(name string) bool
	glob(pattern string) []string // base names
	path(name string) string      // for messages; "" names the directory
	fs() fs.FS                    // the directory's files for the tokenizer and chat template; nil on disk
}

// diskDir is a checkpoint directory on disk.
type diskDir string

func (d diskDir) readFile(name string, max int64) ([]byte, error) {
	return fsutil.ReadFile(d.path(name), max)
}
func (d diskDir) mapFile(name string) (*mappedFile, error) { return mapPath(d.path(name)) }
func (d diskDir) exists(name string) bool                  { _, err := os.Stat(d.path(name)); return err == nil }
func (d diskDir) fs() fs.FS                                { return nil }

func (d diskDir) path(name string) string {
	if name == "" {
		return string(d)
	}
	return filepath.Join(string(d), name)
}

func (d diskDir) glob(pattern string) []string {
	matches, _ := filepath.Glob(d.path(pattern))
	for i, m := range matches {
		matches[i] = filepath.Base(m)
	}
	return matches
}

// memDir is a checkpoint directory at the root of an fs.FS, such as one
// embedded in the binary; name stands for it in messages and Path.
type memDir struct {
	fsys fs.FS
	name string
}

func (d memDir) readFile(name string, max int64) ([]byte, error) {
	return fsutil.ReadFileFS(d.fsys, name, d.path(name), max)
}
func (d memDir) exists(name string) bool      { _, err := fs.Stat(d.fsys, name); return err == nil }
func (d memDir) glob(pattern string) []string { m, _ := fs.Glob(d.fsys, pattern); return m }
func (d memDir) fs() fs.FS                    { return d.fsys }

func (d memDir) path(name string) string {
	if name == "" {
		return d.name
	}
	return d.name + ": " + path.Clean(name)
}

func (d memDir) mapFile(name string) (*mappedFile, error) {
	data, err := fs.ReadFile(d.fsys, name)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", d.path(name), err)
	}
	return &mappedFile{path: d.path(name), data: data, unmap: func() error { return nil }}, nil
}

// OpenFS opens a Hugging Face checkpoint whose files (config.json, the
// safetensors, and for the tokenizer and chat template their JSON and
// Jinja files) are at the root of fsys, reading the shards into memory:
// for a model embedded in the binary. name is its Path, used in messages.
// The result has been checked with Validate.
func OpenFS(fsys fs.FS, name string) (Checkpoint, error) {
	ck, err := openHFFrom(memDir{fsys, name})
	if err != nil {
		return nil, err
	}
	if err := Validate(ck); err != nil {
		ck.Close()
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return ck, nil
}

// FilesOf returns the in-memory files of a checkpoint opened with OpenFS,
// or nil for one on disk (whose files are under Path).
func FilesOf(ck Checkpoint) fs.FS {
	if c, ok := ck.(*checkpoint); ok {
		return c.dir
	}
	return nil
}
