package engine

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"lagc/models"
)

// TestOpenChecksGraphInterface: a model file (--yaml) whose graph lacks
// the outputs and inputs the executors and Generate rely on is refused when
// the model is opened; these used to panic in Generate.
func TestOpenChecksGraphInterface(t *testing.T) {
	dir := fixtureDirs(t)[0]
	src := string(models.LagunaYAML)
	edit := func(old, new string) string {
		if !strings.Contains(src, old) {
			t.Fatalf("laguna.yaml lacks %q", old)
		}
		return strings.Replace(src, old, new, 1)
	}
	for _, c := range []struct {
		name, yaml, want string
	}{
		{"no next", edit("outputs: [logits, next]", "outputs: [logits]"), "outputs [logits]: expected logits and next"},
		{"no logits", edit("outputs: [logits, next]", "outputs: [next]"), "expected logits and next"},
		{"narrow logits", strings.ReplaceAll(edit("  - next = argmax(logits)", "  - logits = add(hn, hn)\n  - next = argmax(logits)"),
			"- logits = matmul(", "- full = matmul("), "output logits is f32[T,32]: expected a float [T,256]"},
		{"float next", edit("  - next = argmax(logits)", "  - next = add(logits, logits)"), "output next is f32[T,"},
		{"extra input", edit("  tokens: i32[T]", "  tokens: i32[T]\n  extra: f32[T]"), "input extra: the executors feed only tokens and pos"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "m.yaml")
			if err := os.WriteFile(path, []byte(c.yaml), 0o644); err != nil {
				t.Fatal(err)
			}
			m, err := Open(dir, Options{YAMLPath: path})
			if err == nil {
				m.Close()
				t.Fatalf("Open succeeded; want an error containing %q", c.want)
			}
			if !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), path) {
				t.Fatalf("error %q lacks %q or the file name", err, c.want)
			}
		})
	}
}

// shortBackend returns fewer logits or ids than tokens it was fed.
type shortBackend struct {
	cpuBackend
	logits, next int
}

func (b shortBackend) Forward(tokens []int32) ([]float32, []int32, error) {
	l, n, err := b.cpuBackend.Forward(tokens)
	return l[:len(l)-b.logits], n[:len(n)-b.next], err
}

// TestGenerateChecksBackend: a backend returning too few logits or ids is
// an error from Generate, not an index out of range.
func TestGenerateChecksBackend(t *testing.T) {
	dir := fixtureDirs(t)[0]
	g := readGolden(t, dir)
	m, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	cb := m.Backend.(cpuBackend)
	for _, b := range []shortBackend{{cb, 0, 1}, {cb, 1, 0}, {cb, m.Config.VocabSize, 0}} {
		m.Backend = b
		if _, err := m.Generate(context.Background(), g.PromptIDs, GenOptions{MaxTokens: 2}); err == nil || !strings.Contains(err.Error(), "the backend returned") {
			t.Errorf("short by %d logits, %d ids: got %v", b.logits, b.next, err)
		}
	}
}
