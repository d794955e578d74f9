package main

import (
	"strings"
	"testing"
)

// TestRunNonFinite: with a NaN weight, `lagc run --json --logits` generated
// token 0 and then failed to encode the NaN logits. It now stops before
// writing anything, naming the node and the weight.
func TestRunNonFinite(t *testing.T) {
	code, stdout, stderr := runCapture(t, "run", "--model", "../../testdata/hostile/ckpt/nan_weight.gguf",
		"--device", "cpu", "--prompt-ids", "1,5,7", "-n", "4", "--json", "--logits")
	if code != 1 || stdout != "" {
		t.Errorf("exit %d, stdout %q; want exit 1 and no output", code, stdout)
	}
	for _, w := range []string{"node %blk.2.m (rms_norm) first produced non-finite values", "@blk.2.ffn_norm.weight"} {
		if !strings.Contains(stderr, w) {
			t.Errorf("stderr %q\nlacks %q", stderr, w)
		}
	}
}
