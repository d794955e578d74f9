package gpu_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"lagc/ckpt/ckpttest"
	"lagc/engine"
	"lagc/exec/gpu"
)

// TestNonFiniteGPU: on the GPU too, generation from NaN weights (or from
// finite weights whose products overflow) stops with an error naming the
// first plan step whose output was non-finite and the bad weight it read,
// as the CPU engine does; the sequence can start again afterwards.
func TestNonFiniteGPU(t *testing.T) {
	overflow := t.TempDir()
	if err := ckpttest.WriteOverflowHF(overflow); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, path string
		layer      int
		want       []string
	}{
		{"nan_weight", "../../testdata/hostile/ckpt/nan_weight.gguf", 2, []string{
			"prefill at position 0: the logits hold", "first produced non-finite values on the GPU",
			"reads non-finite weights: @blk.2.ffn_norm.weight (1 NaN, 0 infinite)"}},
		{"overflow", overflow, 1, []string{"first produced non-finite values on the GPU", "from finite inputs"}},
	}
	for _, tc := range tests {
		for _, dt := range []string{"f32", "bf16"} {
			t.Run(tc.name+"/"+dt, func(t *testing.T) {
				m, _ := openGPU(t, tc.path, engine.Options{DType: dt})
				res, err := m.Generate(context.Background(), []int32{1, 5, 7}, engine.GenOptions{MaxTokens: 4})
				if err == nil {
					t.Fatalf("generated %v from non-finite weights", res.Generated)
				}
				var nf *engine.NonFiniteError
				var at *gpu.NonFiniteError
				if !errors.As(err, &nf) || !errors.As(err, &at) {
					t.Fatalf("error %v: want a NonFiniteError located by the GPU executor", err)
				}
				if at.Layer != tc.layer {
					t.Errorf("located layer %d (%s), want layer %d", at.Layer, at.Step, tc.layer)
				}
				for _, w := range tc.want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q\nlacks %q", err, w)
					}
				}
				var again *gpu.NonFiniteError
				if _, err := m.Generate(context.Background(), []int32{1}, engine.GenOptions{}); !errors.As(err, &again) || again.Step != at.Step {
					t.Errorf("second generation: %v, want the same step %s", err, at.Step)
				}
			})
		}
	}
}
