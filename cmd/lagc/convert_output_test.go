//go:build unix

package main

import (
	"bytes"
	"maps"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"lagc/ckpt/ckpttest"
	"lagc/internal/fixture"
)

// TestConvertRefusesOutput: outputs that are, or resolve to, a file the
// conversion reads, or that are not regular files, are refused before
// anything is written; the input stays intact.
func TestConvertRefusesOutput(t *testing.T) {
	dir := t.TempDir()
	if _, err := ckpttest.WriteHF(dir, ckpttest.TinyConfig(), ckpttest.Options{Seed: 1, Shards: 2}); err != nil {
		t.Fatal(err)
	}
	tok, err := os.ReadFile("../../testdata/tokenizer/tokenizer.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), tok, 0o644); err != nil {
		t.Fatal(err)
	}
	shards, _ := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	other := t.TempDir()
	hardlink := filepath.Join(other, "hardlink.gguf")
	if err := os.Link(shards[0], hardlink); err != nil {
		t.Fatal(err)
	}
	dirlink := filepath.Join(other, "dirlink")
	if err := os.Symlink(dir, dirlink); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(other, "target.gguf")
	if err := os.WriteFile(target, []byte("keep me"), 0o644); err != nil {
		t.Fatal(err)
	}
	symlink := filepath.Join(other, "symlink.gguf")
	if err := os.Symlink(target, symlink); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(other, "fifo.gguf")
	fixture.FIFO(t, fifo)
	sock := filepath.Join(other, "sock.gguf")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	before := snapshot(t, dir)

	cases := []struct{ out, want string }{
		{shards[0], "which the conversion reads"},
		{filepath.Join(dir, "model.safetensors.index.json"), "which the conversion reads"},
		{filepath.Join(dir, "config.json"), "which the conversion reads"},
		{filepath.Join(dir, "tokenizer.json"), "which the conversion reads"},
		{filepath.Join(dirlink, "config.json"), "which the conversion reads"},
		{hardlink, "which the conversion reads"},
		{symlink, "is a symbolic link"},
		{fifo, "is a named pipe, not a regular file"},
		{sock, "is a socket, not a regular file"},
		{other, "is a directory; give the file to write"},
		{filepath.Join(other, "missing", "m.gguf"), "no such file or directory"},
	}
	for _, c := range cases {
		var stdout, stderr bytes.Buffer
		code := runMain([]string{"convert", "--model", dir, "-o", c.out}, &stdout, &stderr)
		if code != 2 || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("-o %s: exit %d, stderr %q; want exit 2 with %q", c.out, code, stderr.String(), c.want)
		}
	}
	if after := snapshot(t, dir); !maps.Equal(before, after) {
		t.Errorf("the input directory changed")
	}
	if b, _ := os.ReadFile(target); string(b) != "keep me" {
		t.Errorf("the symlink's target changed: %q", b)
	}
	if st, err := os.Lstat(fifo); err != nil || st.Mode()&os.ModeNamedPipe == 0 {
		t.Errorf("the named pipe was replaced")
	}
	if left, _ := filepath.Glob(filepath.Join(other, "*.tmp")); len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

// TestConvertPermissions: the output's mode follows the umask.
func TestConvertPermissions(t *testing.T) {
	dir := t.TempDir()
	if _, err := ckpttest.WriteHF(dir, ckpttest.TinyConfig(), ckpttest.Options{Seed: 2}); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "m.gguf")
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	var stdout, stderr bytes.Buffer
	if code := runMain([]string{"convert", "--model", dir, "-o", out}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	st, err := os.Stat(out)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o644 {
		t.Errorf("mode %v with umask 022, want -rw-r--r--", st.Mode().Perm())
	}
}

// TestConvertInterrupted: SIGINT during the write removes the temporary
// file (it used to stay, as large as the model) and leaves the previous
// output as it was.
func TestConvertInterrupted(t *testing.T) {
	if testing.Short() {
		t.Skip("writes a 64 MiB checkpoint")
	}
	dir := t.TempDir()
	cfg := ckpttest.TinyConfig()
	cfg.VocabSize = 1 << 20 // 64 MiB of embeddings: the write takes a while
	if _, err := ckpttest.WriteHF(dir, cfg, ckpttest.Options{Seed: 3}); err != nil {
		t.Fatal(err)
	}
	outDir := t.TempDir()
	out := filepath.Join(outDir, "m.gguf")
	if err := os.WriteFile(out, []byte("previous"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Keep SIGINT from killing the test process whatever the timing.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt)
	defer signal.Stop(sigs)

	type result struct {
		code   int
		stderr string
	}
	done := make(chan result)
	go func() {
		var stdout, stderr bytes.Buffer
		code := runMain([]string{"convert", "--model", dir, "-o", out, "--dtype", "f16"}, &stdout, &stderr)
		done <- result{code, stderr.String()}
	}()
	deadline := time.Now().Add(time.Minute)
	for {
		if tmp, _ := filepath.Glob(filepath.Join(outDir, "*.tmp")); len(tmp) > 0 {
			break
		}
		select {
		case r := <-done:
			t.Fatalf("the conversion ended (exit %d) before a temporary file was seen: %s", r.code, r.stderr)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("no temporary file appeared")
		}
		time.Sleep(time.Millisecond)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.code != 1 || !strings.Contains(r.stderr, "interrupted") {
		t.Errorf("exit %d, stderr %q; want exit 1, interrupted", r.code, r.stderr)
	}
	if left, _ := filepath.Glob(filepath.Join(outDir, "*.tmp")); len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
	if b, _ := os.ReadFile(out); string(b) != "previous" {
		t.Errorf("the previous output changed (%d bytes)", len(b))
	}
}

// snapshot maps each file of dir to its contents.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		m[e.Name()] = string(b)
	}
	return m
}
