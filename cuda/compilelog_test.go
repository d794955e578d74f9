package cuda

import (
	"strings"
	"testing"
)

func TestLogExcerpt(t *testing.T) {
	src := "PRELUDE\n#line 1 \"bad.cu\"\nline one\nline two\nline three\nline four\nline five\n"
	log := "bad.cu(2): error: identifier \"x\" is undefined\nbad.cu(5): warning: w\nprelude(1): error: elsewhere\n1 error detected in the compilation of \"bad.cu\".\n"
	got := logExcerpt(log, "bad.cu", src)
	want := "     1 | line one\n>    2 | line two\n     3 | line three\n     4 | line four\n>    5 | line five\n     6 | \n"
	if got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
	if logExcerpt("no locations here", "bad.cu", src) != "" {
		t.Error("excerpt without locations")
	}
	far := logExcerpt("bad.cu(999): error: x", "bad.cu", src)
	if far != "" {
		t.Errorf("line past the end: %q", far)
	}
	gap := logExcerpt("bad.cu(1): error: a\nbad.cu(6): error: b", "bad.cu", src)
	if !strings.Contains(gap, "  ...\n") {
		t.Errorf("no gap marker:\n%s", gap)
	}
}

func FuzzLogExcerpt(f *testing.F) {
	f.Add("k.cu(3): error: x\n", "a\nb\nc\nd\n")
	f.Add("k.cu(0): error\nk.cu(-1): x\nk.cu(): y\nk.cu(99999999999999999999): z", "")
	f.Fuzz(func(t *testing.T, log, src string) {
		out := logExcerpt(log, "k.cu", src)
		if out != "" && !strings.Contains(out, " | ") {
			t.Fatalf("malformed excerpt %q", out)
		}
	})
}
