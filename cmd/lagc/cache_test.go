package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"lagc/cuda"
	"lagc/internal/cachedir"
	"lagc/internal/fixture"
	"lagc/wcache"
)

func runCacheCmd(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	cacheStdout = &out
	defer func() { cacheStdout = os.Stdout }()
	code := runMain(append([]string{"cache"}, args...), &out, &errb)
	return out.String(), errb.String(), code
}

func hexKey(c byte) string { return strings.Repeat(string(c), 64) }

// fillCaches makes, under a fresh LAGC_CACHE_DIR: two sound kernel
// entries and a damaged one; two weight entries, one with a damaged
// payload (its header is sound); a file that is no entry.
func fillCaches(t *testing.T) (root string, damagedKernel, damagedWeight, oldWeight string) {
	t.Helper()
	root = t.TempDir()
	t.Setenv(cachedir.Env, root)
	for _, c := range []byte{'a', 'b'} {
		if err := cuda.WriteCacheEntry(root, hexKey(c), "gemv<bf16_t>", []byte("cubin "+string(c))); err != nil {
			t.Fatal(err)
		}
	}
	damagedKernel = filepath.Join(root, hexKey('c')+cuda.EntrySuffix)
	if err := os.WriteFile(damagedKernel, []byte("not a cubin entry"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "notes.txt"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	wdir, err := cachedir.Weights()
	if err != nil {
		t.Fatal(err)
	}
	wc := wcache.Open(wdir)
	for i, c := range []byte{'d', 'e'} {
		meta := wcache.Meta{Name: "blk.1.ffn_down_exps.weight", DType: "q4_k", Shape: []int{8, 256, 512}, Layout: "quant", Source: "/models/x.gguf"}
		if err := wc.Put(wcache.Key(hexKey(c)), meta, bytes.Repeat([]byte{byte(i)}, 10000)); err != nil {
			t.Fatal(err)
		}
	}
	damagedWeight = filepath.Join(wdir, hexKey('d')+wcache.EntrySuffix)
	fixture.FlipBit(t, damagedWeight, -1) // in the payload: the header stays sound
	oldWeight = filepath.Join(wdir, hexKey('e')+wcache.EntrySuffix)
	old := time.Now().Add(-3 * time.Hour)
	if err := os.Chtimes(oldWeight, old, old); err != nil {
		t.Fatal(err)
	}
	return root, damagedKernel, damagedWeight, oldWeight
}

func TestCacheListVerifyRemove(t *testing.T) {
	root, damagedKernel, damagedWeight, oldWeight := fillCaches(t)

	out, stderr, code := runCacheCmd(t, "list")
	if code != 0 {
		t.Fatalf("list: exit %d: %s", code, stderr)
	}
	for _, want := range []string{
		"kernels: " + root, "weights: " + filepath.Join(root, "weights"),
		"kernel  ", "gemv<bf16_t>", "DAMAGED", "blk.1.ffn_down_exps.weight q4_k [8 256 512] quant from /models/x.gguf", "3h ago",
		"total: 3 kernels", "2 weights (27.5 KiB)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("list lacks %q:\n%s", want, out)
		}
	}

	out, _, code = runCacheCmd(t, "list", "--json")
	var js struct {
		Entries []cacheEntry `json:"entries"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &js) != nil || len(js.Entries) != 5 {
		t.Fatalf("list --json: exit %d, %d entries:\n%s", code, len(js.Entries), out)
	}

	out, stderr, code = runCacheCmd(t, "verify")
	if code != 1 || !strings.Contains(stderr, "2 damaged entries") {
		t.Errorf("verify: exit %d, stderr %q", code, stderr)
	}
	if !strings.Contains(out, damagedKernel) || !strings.Contains(out, damagedWeight) || strings.Contains(out, oldWeight) ||
		!strings.Contains(out, "checksum mismatch") {
		t.Errorf("verify does not name exactly the damaged entries:\n%s", out)
	}

	out, _, code = runCacheCmd(t, "remove", "--older-than", "2h")
	if code != 0 || !strings.Contains(out, "removed 0 kernel entries (0 B) and 1 weight entries") {
		t.Errorf("remove --older-than: exit %d: %s", code, out)
	}
	if _, err := os.Stat(oldWeight); err == nil {
		t.Error("the old weight entry is still there")
	}
	if _, err := os.Stat(damagedWeight); err != nil {
		t.Error("a recent weight entry was removed")
	}

	out, _, code = runCacheCmd(t, "remove", "--kernels")
	if code != 0 || !strings.Contains(out, "removed 3 kernel entries") {
		t.Errorf("remove --kernels: exit %d: %s", code, out)
	}
	if _, err := os.Stat(damagedWeight); err != nil {
		t.Error("remove --kernels removed a weight entry")
	}
	out, _, code = runCacheCmd(t, "remove", "--all")
	if code != 0 || !strings.Contains(out, "and 1 weight entries") {
		t.Errorf("remove --all: exit %d: %s", code, out)
	}
	out, _, _ = runCacheCmd(t, "list")
	if !strings.Contains(out, "total: 0 kernels (0 B), 0 weights (0 B)") {
		t.Errorf("after remove --all:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(root, "notes.txt")); err != nil {
		t.Error("remove --all removed a file that is no cache entry")
	}
	if _, _, code := runCacheCmd(t, "verify"); code != 0 {
		t.Errorf("verify of an empty cache: exit %d", code)
	}
}

func TestCacheUsage(t *testing.T) {
	t.Setenv(cachedir.Env, t.TempDir())
	for _, args := range [][]string{
		{}, {"frob"}, {"list", "extra"}, {"list", "--all"}, {"verify", "--json"}, {"remove"},
		{"remove", "--all", "--weights"}, {"remove", "--older-than", "soon"}, {"remove", "--older-than", "-3h"},
	} {
		if _, stderr, code := runCacheCmd(t, args...); code != 2 {
			t.Errorf("cache %q: exit %d (%s), want 2", args, code, stderr)
		}
	}
}
