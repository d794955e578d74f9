package engine

import (
	"context"
	"errors"
	"strings"
	"testing"

	"lagc/ckpt/ckpttest"
	"lagc/exec/cpu"
)

// TestNonFiniteLogits: generation used to yield token 0 forever once the
// logits were NaN. It now stops with an error naming the first node that
// produced a non-finite value and the bad weight it read.
func TestNonFiniteLogits(t *testing.T) {
	overflow := t.TempDir() // finite weights whose product overflows float32
	if err := ckpttest.WriteOverflowHF(overflow); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		path, node string
		want       []string
	}{
		{"../testdata/hostile/ckpt/nan_weight.gguf", "%blk.2.m", []string{
			"prefill at position 0: the logits hold", "node %blk.2.m (rms_norm) first produced non-finite values",
			"reads non-finite weights: @blk.2.ffn_norm.weight (1 NaN, 0 infinite)"}},
		{overflow, "%blk.1.m", []string{"node %blk.1.m (rms_norm) first produced non-finite values", "0 NaN and", "from finite inputs"}},
	}
	for _, tc := range tests {
		t.Run(tc.node, func(t *testing.T) {
			m, err := Open(tc.path, Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			res, err := m.Generate(context.Background(), []int32{1, 5, 7}, GenOptions{MaxTokens: 4})
			if err == nil {
				t.Fatalf("generated %v from non-finite logits", res.Generated)
			}
			var nf *NonFiniteError
			var at *cpu.NonFiniteError
			if !errors.As(err, &nf) || !errors.As(err, &at) {
				t.Fatalf("error %v: want a NonFiniteError located by the CPU executor", err)
			}
			if at.Output.String() != tc.node {
				t.Errorf("located %s, want %s", at.Output, tc.node)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\nlacks %q", err, w)
				}
			}
			// The locator left the backend mid-sequence; Generate resets it,
			// so a second generation fails the same way.
			var again *cpu.NonFiniteError
			if _, err := m.Generate(context.Background(), []int32{1}, GenOptions{}); !errors.As(err, &again) || again.Output.String() != tc.node {
				t.Errorf("second generation: %v", err)
			}
		})
	}
}

// TestCheckFiniteRows: only the rows Generate uses are checked.
func TestCheckFiniteRows(t *testing.T) {
	nan := float32(0)
	nan /= nan
	logits := []float32{1, nan, 2, 3, 4, 5} // T=3, V=2: the first row is bad
	if e := checkFinite("s", logits, 3, 2, false); e != nil {
		t.Errorf("last row only: %v", e)
	}
	e := checkFinite("s", logits, 3, 2, true)
	if e == nil || e.NaN != 1 || e.Row != 0 || e.Col != 1 {
		t.Errorf("all rows: %+v", e)
	}
}
