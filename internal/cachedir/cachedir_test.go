package cachedir

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestDirs(t *testing.T) {
	t.Setenv(Env, "")
	user, err := os.UserCacheDir()
	if err != nil {
		t.Skipf("no user cache directory: %v", err)
	}
	base := filepath.Join(user, "lagc")
	for _, c := range []struct {
		env                    string
		root, kernels, weights string
	}{
		{"", base, filepath.Join(base, "kernels"), filepath.Join(base, "weights")},
		{"/c", "/c", "/c", "/c/weights"},
	} {
		t.Setenv(Env, c.env)
		r, _ := Root()
		k, _ := Kernels()
		w, _ := Weights()
		if r != c.root || k != c.kernels || w != c.weights {
			t.Errorf("%s=%q: root %s, kernels %s, weights %s", Env, c.env, r, k, w)
		}
	}
}

// TestWrite: a failed write leaves nothing, a good one the whole entry;
// stale temporary files are swept, fresh ones kept.
func TestWrite(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "sub")
	boom := errors.New("boom")
	if err := Write(dir, "e", func(w io.Writer) error { w.Write([]byte("part")); return boom }); !errors.Is(err, boom) {
		t.Fatalf("failed write: %v", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("a failed write left %v", ents)
	}
	if err := Write(dir, "e", func(w io.Writer) error { _, err := w.Write([]byte("whole")); return err }); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "e")); string(b) != "whole" {
		t.Fatalf("entry %q", b)
	}
	stale, fresh := filepath.Join(dir, "x.1.tmp"), filepath.Join(dir, "x.2.tmp")
	for _, p := range []string{stale, fresh} {
		os.WriteFile(p, nil, 0o644)
	}
	old := time.Now().Add(-2 * StaleTemp)
	os.Chtimes(stale, old, old)
	SweepTemps(dir)
	if _, err := os.Stat(stale); err == nil {
		t.Error("a stale temporary file was kept")
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Error("a fresh temporary file was removed")
	}
}
