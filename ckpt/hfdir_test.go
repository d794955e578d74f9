package ckpt

import (
	"os"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
)

// TestOpenFS: a checkpoint read from an fs.FS (as the bundled model is when
// its cache cannot be written) has the tensors and data of the same
// directory opened from disk, names itself in messages, and exposes its
// files for the tokenizer.
func TestOpenFS(t *testing.T) {
	const dir = "../models/tiny"
	disk, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer disk.Close()
	mem, err := OpenFS(os.DirFS(dir), "bundled model")
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	if mem.Path() != "bundled model" || FilesOf(mem) == nil || FilesOf(disk) != nil {
		t.Fatalf("path %q, files %v (disk: %v)", mem.Path(), FilesOf(mem), FilesOf(disk))
	}
	if len(mem.Tensors()) != len(disk.Tensors()) {
		t.Fatalf("%d tensors from memory, %d from disk", len(mem.Tensors()), len(disk.Tensors()))
	}
	for _, ti := range disk.Tensors() {
		a, err := disk.ReadF32(ti.Name)
		if err != nil {
			t.Fatal(err)
		}
		b, err := mem.ReadF32(ti.Name)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(a, b) {
			t.Fatalf("%s differs between memory and disk", ti.Name)
		}
	}
	for _, c := range []struct {
		name  string
		files fstest.MapFS
		want  string
	}{
		{"no config", fstest.MapFS{}, "reading model config"},
		{"bad config", fstest.MapFS{"config.json": {Data: []byte("{")}}, "mem: config.json"},
		{"no weights", fstest.MapFS{"config.json": {Data: mustRead(t, dir+"/config.json")}}, "mem has config.json but no model.safetensors"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := OpenFS(c.files, "mem")
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want %q", err, c.want)
			}
		})
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
