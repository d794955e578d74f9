package gpu_test

import (
	"context"
	"errors"
	"fmt"
	"math"
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

// TestForwardArgmaxNonFiniteGPU: a greedy step whose row holds a NaN says
// so (the logit the argmax picked comes back with it), and StepLogits
// returns that row as Forward computes it, though the step decoded ahead
// behind it has run (LAGC_DECODE_AHEAD=0: one step at a time), eager and
// graph-replayed.
func TestForwardArgmaxNonFiniteGPU(t *testing.T) {
	for _, on := range []string{"1", "0"} {
		for _, eager := range []bool{true, false} {
			t.Run(fmt.Sprintf("ahead=%s/eager=%v", on, eager), func(t *testing.T) {
				t.Setenv(gpu.EnvDecodeAhead, on)
				_, ex := openGPU(t, "../../testdata/hostile/ckpt/nan_weight.gguf", engine.Options{DType: "bf16", Eager: eager})
				if ex.DecodesAhead() != (on == "1") {
					t.Fatalf("%s=%s: decoding ahead %v", gpu.EnvDecodeAhead, on, ex.DecodesAhead())
				}
				want, _, err := ex.Forward([]int32{1})
				if err != nil {
					t.Fatal(err)
				}
				for step := 0; step < 3; step++ { // the first step compiles, the later ones replay
					ex.Reset()
					if _, finite, err := ex.ForwardArgmax(1); err != nil || finite {
						t.Fatalf("step %d: finite %v, %v; the row holds NaN", step, finite, err)
					}
					got, err := ex.StepLogits()
					if err != nil {
						t.Fatal(err)
					}
					for j := range want {
						if math.Float32bits(got[j]) != math.Float32bits(want[j]) {
							t.Fatalf("step %d, logit %d: %v, Forward's %v", step, j, got[j], want[j])
						}
					}
				}
			})
		}
	}
}
