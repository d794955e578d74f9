//go:build unix

package chat

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestLoadFIFO: a named pipe in place of chat_template.jinja blocked the
// read forever; it is refused.
func TestLoadFIFO(t *testing.T) {
	dir := t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(dir, "chat_template.jinja"), 0o644); err != nil {
		t.Skipf("no named pipes here: %v", err)
	}
	if _, err := LoadHFDir(dir); err == nil || !strings.Contains(err.Error(), "named pipe") {
		t.Fatalf("LoadHFDir: %v, want a named-pipe error", err)
	}
}
