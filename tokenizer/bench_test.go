package tokenizer

import (
	"os"
	"strings"
	"testing"
)

// BenchmarkEncode measures encoding Python source (the stdlib excerpts the
// fixture was not trained on are in the reference texts; this one is bigger).
func BenchmarkEncode(b *testing.B) {
	tk := loadFixture(b)
	data, err := os.ReadFile("../testdata/tokenizer/gen_reference.py")
	if err != nil {
		b.Fatal(err)
	}
	text := strings.Repeat(string(data), 4)
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		tk.Encode(text, false)
	}
}

// Long runs of one class must not blow up (regex backtracking, BPE merging).
func TestLongRuns(t *testing.T) {
	tk := loadFixture(t)
	for _, s := range []string{strings.Repeat(" ", 50000), strings.Repeat("\n", 50000), strings.Repeat("a", 50000), strings.Repeat("1", 50000), strings.Repeat("😀", 10000), strings.Repeat(" \n", 20000)} {
		if got := tk.Decode(tk.Encode(s, false)); got != s {
			t.Fatalf("round trip of a %d-byte run failed", len(s))
		}
	}
}
