//go:build unix

package engine

import (
	"path/filepath"
	"strings"
	"testing"

	"lagc/ckpt"
	"lagc/ckpt/ckpttest"
	"lagc/internal/fixture"
)

// TestSideFilesFIFO: a named pipe in place of tokenizer.json or
// chat_template.jinja blocked loading forever; it is refused.
func TestSideFilesFIFO(t *testing.T) {
	tests := []struct {
		file string
		load func(ck ckpt.Checkpoint) error
	}{
		{"tokenizer.json", func(ck ckpt.Checkpoint) error { _, err := LoadTokenizer(ck); return err }},
		{"chat_template.jinja", func(ck ckpt.Checkpoint) error { _, _, err := LoadChatTemplate(ck); return err }},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			dir := t.TempDir()
			if _, err := ckpttest.WriteHF(dir, ckpttest.TinyConfig(), ckpttest.Options{Seed: 1}); err != nil {
				t.Fatal(err)
			}
			fixture.FIFO(t, filepath.Join(dir, tc.file))
			ck, err := ckpt.Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer ck.Close()
			if err := tc.load(ck); err == nil || !strings.Contains(err.Error(), tc.file+" is a named pipe") {
				t.Errorf("loading: %v, want a named-pipe error", err)
			}
		})
	}
}
