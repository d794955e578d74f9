package chat

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"lagc/internal/jinja"
)

const hostileDir = "../testdata/hostile/chat"

// TestHostileTemplates renders templates that, without limits, overflowed
// the Go stack (a fatal error), ran for hours or allocated gigabytes. Each
// must stop with an error naming the limit, having allocated a bounded
// amount.
func TestHostileTemplates(t *testing.T) {
	tests := []struct {
		file, compileErr, renderErr string
	}{
		{"recursive_macro.jinja", "", "call depth limit"},
		{"huge_range.jinja", "", "allocation limit"},
		{"huge_repeat.jinja", "", "allocation limit"},
		{"string_doubling.jinja", "", "allocation limit"},
		{"nested_loops.jinja", "", "limit"},
		{"deep_parens.jinja", "nested deeper than 256", ""},
		{"deep_blocks.jinja", "nested deeper than 256", ""},
		{"deep_value.jinja", "", "value depth limit"},
		{"cyclic_compare.jinja", "", "value depth limit"},
		{"replace_blowup.jinja", "", "allocation limit"},
		{"indent_width.jinja", "", "allocation limit"},
		{"join_references.jinja", "", "allocation limit"},
		{"tojson_references.jinja", "", "allocation limit"},
		{"batch_fill.jinja", "", "allocation limit"},
		{"huge_output.jinja", "", "output limit"},
	}
	files, err := filepath.Glob(filepath.Join(hostileDir, "*.jinja"))
	if err != nil || len(files) != len(tests) {
		t.Fatalf("%d hostile templates in %s, %d cases (%v)", len(files), hostileDir, len(tests), err)
	}
	limit := DefaultLimits(0).Alloc
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			src, err := os.ReadFile(filepath.Join(hostileDir, tc.file))
			if err != nil {
				t.Fatal(err)
			}
			tmpl, err := Compile(string(src))
			if tc.compileErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.compileErr) {
					t.Fatalf("Compile: %v, want an error with %q", err, tc.compileErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			out, err := tmpl.Render([]Message{{Role: "user", Content: "hi"}}, Options{})
			runtime.ReadMemStats(&after)
			if err == nil || !strings.Contains(err.Error(), tc.renderErr) {
				t.Fatalf("Render: %v (%d bytes of output), want an error with %q", err, len(out), tc.renderErr)
			}
			var le *jinja.LimitError
			if !errors.As(err, &le) {
				t.Errorf("error %v does not unwrap to a LimitError", err)
			}
			if got := after.TotalAlloc - before.TotalAlloc; got > 4*uint64(limit) {
				t.Errorf("allocated %d MiB, limit %d MiB", got>>20, limit>>20)
			}
		})
	}
}

// TestGeneratedHostileTemplates: inputs too large to commit that crashed
// the parser or evaluator with a stack overflow.
func TestGeneratedHostileTemplates(t *testing.T) {
	tests := []struct {
		name, src, want string
	}{
		{"a million parentheses", "{{ " + strings.Repeat("(", 1_000_000) + "1" + strings.Repeat(")", 1_000_000) + " }}", "more than the"},
		{"300k parentheses", "{{ " + strings.Repeat("(", 300_000) + "1" + strings.Repeat(")", 300_000) + " }}", "nested deeper than 256"},
		{"100k nots", "{{ " + strings.Repeat("not ", 100_000) + "1 }}", "nested deeper than 256"},
		{"100k unary minus", "{{ " + strings.Repeat("- ", 100_000) + "1 }}", "nested deeper than 256"},
		{"50k nested ifs", strings.Repeat("{%if 1%}", 50_000) + strings.Repeat("{%endif%}", 50_000), "nested deeper than 256"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Compile(tc.src); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Compile: %v, want an error with %q", err, tc.want)
			}
		})
	}
	// A chain of 100k concatenations parses flat but evaluates 100k deep.
	chain := "{{ 'a'" + strings.Repeat(" ~ 'a'", 100_000) + " }}"
	tmpl, err := Compile(chain)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tmpl.Render([]Message{}, Options{}); err == nil || !strings.Contains(err.Error(), "nesting limit") {
		t.Fatalf("Render: %v, want the nesting limit", err)
	}
}

// TestRenderCancel: a render stops when its context is done, even with
// limits that would let it run for hours.
func TestRenderCancel(t *testing.T) {
	src, err := os.ReadFile(filepath.Join(hostileDir, "nested_loops.jinja"))
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := Compile(string(src))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	huge := Limits{Steps: 1 << 62, Alloc: 1 << 62, Output: 1 << 62}
	_, err = tmpl.RenderContext(ctx, []Message{}, Options{Limits: huge})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("RenderContext: %v, want context.DeadlineExceeded", err)
	}
}

// TestLimitsScaleWithInput: the default limits grow with the conversation,
// so a long one renders with the Laguna template, and an explicit limit
// applies.
func TestLimitsScaleWithInput(t *testing.T) {
	tmpl := compileFixture(t, "laguna_chat_template.jinja")
	long := strings.Repeat("word ", 1<<20) // 5 MiB
	var msgs []Message
	for i := range 2000 {
		role := []string{"user", "assistant"}[i%2]
		msgs = append(msgs, Message{Role: role, Content: "turn"})
	}
	msgs = append(msgs, Message{Role: "user", Content: long})
	out, err := tmpl.Render(msgs, Options{AddGenerationPrompt: true})
	if err != nil {
		t.Fatalf("a long conversation: %v", err)
	}
	if !strings.Contains(out, long) {
		t.Error("the long message is not in the output")
	}
	_, err = tmpl.Render(msgs, Options{Limits: Limits{Steps: 1000}})
	if err == nil || !strings.Contains(err.Error(), "step limit (1000 ") {
		t.Errorf("Steps: 1000: %v", err)
	}
}

func TestTemplateSize(t *testing.T) {
	if _, err := Compile(strings.Repeat("x", MaxTemplateBytes+1)); err == nil || !strings.Contains(err.Error(), "more than the") {
		t.Errorf("oversized template: %v", err)
	}
	if _, err := Compile(strings.Repeat("x", MaxTemplateBytes)); err != nil {
		t.Errorf("template of the maximum size: %v", err)
	}
}
