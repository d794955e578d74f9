package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
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

// lastRowBackend is the CPU backend with LastRowForwarder added (as the GPU
// has it): only the last row of a prompt chunk's logits, a NaN planted in
// it at chunk position nanAt (when not negative); short trims the row.
type lastRowBackend struct {
	cpuBackend
	V, nanAt, short int
	calls           int // ForwardLast calls
}

func (b *lastRowBackend) ForwardLast(tokens []int32) ([]float32, []int32, error) {
	b.calls++
	pos := b.Pos()
	l, n, err := b.cpuBackend.Forward(tokens)
	if err != nil {
		return nil, nil, err
	}
	last := l[len(l)-b.V+b.short:]
	if pos == b.nanAt {
		last[3] = float32(math.NaN())
	}
	return last, n, nil
}

// TestLastRowForwarder: a prompt fed through ForwardLast in chunks gives
// what Forward's path gives (argmax at every position, the last row's
// logits, the generated tokens); every row's logits (GenOptions.Logits)
// still come from Forward; a NaN in the last row is reported at that row,
// and a short row is an error.
func TestLastRowForwarder(t *testing.T) {
	m, g := openFirstFixture(t)
	cb := m.Backend.(cpuBackend)
	o := GenOptions{MaxTokens: 4, Chunk: 3}
	want, err := m.Generate(context.Background(), g.PromptIDs, o)
	if err != nil {
		t.Fatal(err)
	}
	if len(g.PromptIDs) < 7 {
		t.Fatalf("the fixture's prompt has %d tokens; the test wants 7 or more (three chunks)", len(g.PromptIDs))
	}
	lb := &lastRowBackend{cpuBackend: cb, V: m.Config.VocabSize, nanAt: -1}
	m.Backend = lb
	got, err := m.Generate(context.Background(), g.PromptIDs, o)
	if err != nil {
		t.Fatal(err)
	}
	chunks := 0 // of more than one token (one token runs Forward's decode step)
	for s := 0; s < len(g.PromptIDs); s += 3 {
		if min(s+3, len(g.PromptIDs))-s > 1 {
			chunks++
		}
	}
	if fmt.Sprint(got.Generated, got.PromptNext) != fmt.Sprint(want.Generated, want.PromptNext) ||
		!slices.Equal(got.LastLogits, want.LastLogits) || lb.calls != chunks {
		t.Fatalf("through ForwardLast (%d calls, want %d): generated %v, prompt argmax %v; want %v, %v (last rows equal: %v)",
			lb.calls, chunks, got.Generated, got.PromptNext, want.Generated, want.PromptNext, slices.Equal(got.LastLogits, want.LastLogits))
	}
	lb.calls = 0
	all, err := m.Generate(context.Background(), g.PromptIDs, GenOptions{MaxTokens: 1, Chunk: 3, Logits: true})
	if err != nil || lb.calls != 0 || len(all.PromptRows) != len(g.PromptIDs) {
		t.Fatalf("with Logits: %d ForwardLast calls, %d rows, %v; want 0 calls and %d rows", lb.calls, len(all.PromptRows), err, len(g.PromptIDs))
	}
	lb.nanAt = 3 // the second chunk, positions 3..5
	_, err = m.Generate(context.Background(), g.PromptIDs, o)
	var nf *NonFiniteError
	if !errors.As(err, &nf) || nf.Step != "prefill at position 3" || nf.Row != 2 || nf.Col != 3 || nf.NaN != 1 {
		t.Fatalf("got %v; want a NonFiniteError for prefill at position 3, row 2, id 3", err)
	}
	lb.nanAt, lb.short = -1, 1
	if _, err := m.Generate(context.Background(), g.PromptIDs, o); err == nil || !strings.Contains(err.Error(), "the backend returned") {
		t.Fatalf("a short last row: got %v", err)
	}
}

// tailBackend is the CPU backend with TailForwarder added (as the GPU has
// it): the last row of logits and its argmax.
type tailBackend struct {
	cpuBackend
	V     int
	calls int // ForwardTail calls
}

func (b *tailBackend) ForwardTail(tokens []int32) ([]float32, int32, error) {
	b.calls++
	l, n, err := b.cpuBackend.Forward(tokens)
	if err != nil {
		return nil, 0, err
	}
	return l[len(l)-b.V:], n[len(n)-1], nil
}

// TestTailForwarder: with GenOptions.LastOnly a prompt goes through
// ForwardTail a chunk at a time and generates what Forward's path does,
// PromptNext holding each chunk's last argmax; without LastOnly, or with
// Logits, ForwardTail is not used.
func TestTailForwarder(t *testing.T) {
	m, g := openFirstFixture(t)
	cb := m.Backend.(cpuBackend)
	want, err := m.Generate(context.Background(), g.PromptIDs, GenOptions{MaxTokens: 4, Chunk: 3})
	if err != nil {
		t.Fatal(err)
	}
	tb := &tailBackend{cpuBackend: cb, V: m.Config.VocabSize}
	m.Backend = tb
	got, err := m.Generate(context.Background(), g.PromptIDs, GenOptions{MaxTokens: 4, Chunk: 3, LastOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	var lasts []int32 // each chunk's last argmax (one-token chunks run Forward's decode step)
	for s := 0; s < len(g.PromptIDs); s += 3 {
		lasts = append(lasts, want.PromptNext[min(s+3, len(g.PromptIDs))-1])
	}
	chunks := 0
	for s := 0; s < len(g.PromptIDs); s += 3 {
		if min(s+3, len(g.PromptIDs))-s > 1 {
			chunks++
		}
	}
	if !slices.Equal(got.Generated, want.Generated) || !slices.Equal(got.PromptNext, lasts) ||
		!slices.Equal(got.LastLogits, want.LastLogits) || tb.calls != chunks {
		t.Fatalf("through ForwardTail (%d calls, want %d): generated %v, prompt argmax %v; want %v, %v",
			tb.calls, chunks, got.Generated, got.PromptNext, want.Generated, lasts)
	}
	tb.calls = 0
	for _, o := range []GenOptions{{MaxTokens: 1, Chunk: 3}, {MaxTokens: 1, Chunk: 3, LastOnly: true, Logits: true}} {
		if _, err := m.Generate(context.Background(), g.PromptIDs, o); err != nil || tb.calls != 0 {
			t.Fatalf("%+v: %d ForwardTail calls, %v", o, tb.calls, err)
		}
	}
}
