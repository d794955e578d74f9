//go:build unix

package atomicfile

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func TestCommitAbort(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out")
	if err := os.WriteFile(path, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := Create(path)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("partial")
	f.Abort()
	if b, _ := os.ReadFile(path); string(b) != "old" {
		t.Errorf("after Abort: %q", b)
	}
	if names, _ := filepath.Glob(filepath.Join(dir, "*"+TempSuffix)); len(names) != 0 {
		t.Errorf("temporary files left: %v", names)
	}

	for _, tc := range []struct {
		umask int
		want  os.FileMode
	}{{0o022, 0o644}, {0o077, 0o600}, {0o002, 0o664}} {
		old := syscall.Umask(tc.umask)
		f, err := Create(path)
		syscall.Umask(old)
		if err != nil {
			t.Fatal(err)
		}
		f.WriteString("new")
		if err := f.Commit(); err != nil {
			t.Fatal(err)
		}
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != tc.want {
			t.Errorf("umask %03o: mode %v, want %v", tc.umask, st.Mode().Perm(), tc.want)
		}
		f.Abort() // after Commit: nothing
		if b, _ := os.ReadFile(path); string(b) != "new" {
			t.Errorf("after Commit: %q", b)
		}
	}
}
