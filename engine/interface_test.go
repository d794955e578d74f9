package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
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
	m, g := openFirstFixture(t)
	cb := m.Backend.(cpuBackend)
	for _, b := range []shortBackend{{cb, 0, 1}, {cb, 1, 0}, {cb, m.Config.VocabSize, 0}} {
		m.Backend = b
		if _, err := m.Generate(context.Background(), g.PromptIDs, GenOptions{MaxTokens: 2}); err == nil || !strings.Contains(err.Error(), "the backend returned") {
			t.Errorf("short by %d logits, %d ids: got %v", b.logits, b.next, err)
		}
	}
}

// greedyBackend is the CPU backend with GreedyStepper added (as the GPU
// has it): the argmax alone, a NaN planted in the row at position nanAt.
type greedyBackend struct {
	cpuBackend
	nanAt  int
	last   []float32
	argmax int // ForwardArgmax calls
}

func (b *greedyBackend) ForwardArgmax(id int32) (int32, bool, error) {
	b.argmax++
	pos := b.Pos()
	l, n, err := b.cpuBackend.Forward([]int32{id})
	if err != nil {
		return 0, false, err
	}
	b.last = l
	if pos == b.nanAt {
		l[7] = float32(math.NaN())
		return 7, false, nil // the GPU's argmax picks the NaN
	}
	return n[0], true, nil
}

func (b *greedyBackend) StepLogits() ([]float32, error) { return b.last, nil }

// TestGreedyStepper: greedy decoding through a GreedyStepper gives the
// tokens Forward's path gives, and a non-finite row is reported as the
// Forward path reports it, at the same position.
func TestGreedyStepper(t *testing.T) {
	m, g := openFirstFixture(t)
	cb := m.Backend.(cpuBackend)
	want, err := m.Generate(context.Background(), g.PromptIDs, GenOptions{MaxTokens: 6})
	if err != nil {
		t.Fatal(err)
	}
	gb := &greedyBackend{cpuBackend: cb, nanAt: -1}
	m.Backend = gb
	got, err := m.Generate(context.Background(), g.PromptIDs, GenOptions{MaxTokens: 6})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got.Generated) != fmt.Sprint(want.Generated) || gb.argmax != 5 {
		t.Fatalf("generated %v with %d ForwardArgmax calls; want %v and 5", got.Generated, gb.argmax, want.Generated)
	}
	gb.nanAt = len(g.PromptIDs) + 2
	_, err = m.Generate(context.Background(), g.PromptIDs, GenOptions{MaxTokens: 6})
	var nf *NonFiniteError
	if !errors.As(err, &nf) || nf.Step != fmt.Sprintf("decode at position %d", gb.nanAt) || nf.NaN != 1 || nf.Col != 7 {
		t.Fatalf("got %v; want a NonFiniteError for decode at position %d, 1 NaN at id 7", err, gb.nanAt)
	}
}
