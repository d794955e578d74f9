//go:build unix

package ckpt_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"lagc/ckpt"
	"lagc/ckpt/ckpttest"
	"lagc/internal/fixture"
)

// TestOpenFIFO: a named pipe in place of a checkpoint file blocked Open
// forever; it is refused, naming the file.
func TestOpenFIFO(t *testing.T) {
	hf := func(t *testing.T, replace string) string {
		dir := t.TempDir()
		if _, err := ckpttest.WriteHF(dir, ckpttest.TinyConfig(), ckpttest.Options{Seed: 1, Shards: 2}); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, replace)
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
		fixture.FIFO(t, p)
		return dir
	}
	for _, name := range []string{"config.json", "model.safetensors.index.json", "model-00001-of-00002.safetensors"} {
		t.Run(name, func(t *testing.T) {
			dir := hf(t, name)
			openWithin(t, dir, name+" is a named pipe")
		})
	}
	t.Run("gguf", func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "m.gguf")
		fixture.FIFO(t, p)
		openWithin(t, p, "m.gguf is a named pipe")
	})
}

func openWithin(t *testing.T, path, want string) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		ck, err := ckpt.Open(path)
		if err == nil {
			ck.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Open: %v, want an error with %q", err, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Open blocked on a named pipe")
	}
}
