package wcache

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"lagc/ckpt"
)

// extents describes byte ranges of the file at p as a checkpoint would.
func extents(t *testing.T, p string, ranges ...[2]int) []ckpt.Extent {
	t.Helper()
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	var out []ckpt.Extent
	for _, r := range ranges {
		out = append(out, ckpt.Extent{Path: p, Info: info, Offset: int64(r[0]), Data: data[r[0] : r[0]+r[1]]})
	}
	return out
}

func writeAt(t *testing.T, p string, data []byte, mtime time.Time) {
	t.Helper()
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(p, mtime, mtime); err != nil {
		t.Fatal(err)
	}
}

func sum(t *testing.T, h *Hasher, exts []ckpt.Extent) Sum {
	t.Helper()
	s, err := h.Sum(exts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestHasherMemo: hashes of an unchanged file come from the memo (the
// file is not read); a file changed in place, same size, is hashed again.
func TestHasherMemo(t *testing.T) {
	memo := t.TempDir()
	p := filepath.Join(t.TempDir(), "model.gguf")
	data := payload(1<<16, 1)
	old := time.Now().Add(-time.Hour)
	writeAt(t, p, data, old)

	h := NewHasher(memo)
	a := sum(t, h, extents(t, p, [2]int{0, 1000}))
	b := sum(t, h, extents(t, p, [2]int{1000, 5000}))
	if a == b || a != sumOf(data[:1000]) {
		t.Fatalf("sums %s %s", a, b)
	}
	if hashed, memoised := h.Bytes(); hashed != 6000 || memoised != 0 {
		t.Fatalf("first pass: hashed %d, memoised %d", hashed, memoised)
	}
	if err := h.Save(); err != nil {
		t.Fatal(err)
	}

	// A new process: the sidecar gives both sums without hashing. The
	// extent's bytes are replaced to prove they are not read.
	h = NewHasher(memo)
	ext := extents(t, p, [2]int{0, 1000})
	ext[0].Data = make([]byte, 1000)
	if got := sum(t, h, ext); got != a {
		t.Error("memoised sum differs")
	}
	if hashed, memoised := h.Bytes(); hashed != 0 || memoised != 1000 {
		t.Errorf("second pass: hashed %d, memoised %d", hashed, memoised)
	}

	// Same size, new contents and modification time: hashed again.
	data2 := payload(1<<16, 2)
	writeAt(t, p, data2, old.Add(time.Minute))
	h = NewHasher(memo)
	if got := sum(t, h, extents(t, p, [2]int{0, 1000})); got != sumOf(data2[:1000]) || got == a {
		t.Error("a modified file's sum came from the memo")
	}
	if hashed, _ := h.Bytes(); hashed != 1000 {
		t.Errorf("modified file: hashed %d bytes", hashed)
	}

	// Several extents (stacked experts): a sum over the extents' sums,
	// which depends on each of them and their order.
	two := sum(t, h, extents(t, p, [2]int{0, 1000}, [2]int{1000, 5000}))
	swapped := sum(t, h, extents(t, p, [2]int{1000, 5000}, [2]int{0, 1000}))
	if two == swapped || two == sumOf(data2[:6000]) {
		t.Error("multi-extent sums do not depend on the order")
	}
}

// TestHasherRacy: the memo of a file modified moments ago is not kept (it
// could change again within its timestamp's granularity).
func TestHasherRacy(t *testing.T) {
	memo := t.TempDir()
	p := filepath.Join(t.TempDir(), "fresh.gguf")
	writeAt(t, p, payload(4096, 1), time.Now())
	h := NewHasher(memo)
	sum(t, h, extents(t, p, [2]int{0, 4096}))
	if err := h.Save(); err != nil {
		t.Fatal(err)
	}
	h = NewHasher(memo)
	sum(t, h, extents(t, p, [2]int{0, 4096}))
	if hashed, memoised := h.Bytes(); hashed != 4096 || memoised != 0 {
		t.Errorf("racily clean file: hashed %d, memoised %d", hashed, memoised)
	}
}

// TestHasherDamagedMemo: a sidecar that does not parse is ignored.
func TestHasherDamagedMemo(t *testing.T) {
	memo := t.TempDir()
	p := filepath.Join(t.TempDir(), "m.gguf")
	writeAt(t, p, payload(4096, 1), time.Now().Add(-time.Hour))
	h := NewHasher(memo)
	want := sum(t, h, extents(t, p, [2]int{0, 4096}))
	if err := h.Save(); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(memo)
	if len(ents) != 1 {
		t.Fatalf("%d sidecars", len(ents))
	}
	if err := os.WriteFile(filepath.Join(memo, ents[0].Name()), []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	h = NewHasher(memo)
	if got := sum(t, h, extents(t, p, [2]int{0, 4096})); got != want {
		t.Error("sum differs after a damaged sidecar")
	}
	if hashed, _ := h.Bytes(); hashed != 4096 {
		t.Error("a damaged sidecar was used")
	}
	// Extents not read from disk (no file info) are hashed every time.
	h = NewHasher(memo)
	if got := sum(t, h, []ckpt.Extent{{Data: payload(4096, 1)}}); got != want {
		t.Error("in-memory extent sum differs")
	}
}
