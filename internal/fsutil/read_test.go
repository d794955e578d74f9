//go:build unix

package fsutil

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"lagc/internal/fixture"
)

func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, []byte("0123456789"), 0o644); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	fixture.FIFO(t, fifo)
	link := filepath.Join(dir, "link")
	if err := os.Symlink(file, link); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		path    string
		max     int64
		want    string
		wantErr string
	}{
		{file, 10, "0123456789", ""},
		{link, 10, "0123456789", ""},
		{file, 9, "", "10 bytes, more than the 9 allowed"},
		{fifo, 10, "", "is a named pipe, not a regular file"},
		{dir, 10, "", "is a directory, not a regular file"},
		{"/dev/zero", 10, "", "is a character device, not a regular file"},
		{filepath.Join(dir, "missing"), 10, "", "no such file"},
	}
	for _, tc := range tests {
		got, err := ReadFile(tc.path, tc.max)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: err %v, want %q", tc.path, err, tc.wantErr)
			}
			continue
		}
		if err != nil || string(got) != tc.want {
			t.Errorf("%s: %q, %v", tc.path, got, err)
		}
	}
	if _, err := ReadFile(filepath.Join(dir, "missing"), 1); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v does not wrap fs.ErrNotExist", err)
	}
}
