package gpu_test

import (
	"math"
	"slices"
	"testing"

	"lagc/ckpt"
	"lagc/config"
	"lagc/cuda/cudatest"
	"lagc/exec/gpu"
	"lagc/ir"
	"lagc/models"
	"lagc/passes"
)

// TestXInPreGPU: with LAGC_XIN_PRE=1 (lower.Options.XInPre) the decode
// plan of a two-layer Laguna-S-2.1 in the q4_k_m recipe (synthetic
// weights) runs moe_down_qgemv_trig and qgemv_xin_norm_pre, and gives the
// default plan's tokens and logits bit for bit over a prompt and 12 steps,
// eager and replayed as a graph.
func TestXInPreGPU(t *testing.T) {
	cudatest.Device(t)
	cfg, err := config.Preset("laguna-s-2.1")
	if err != nil {
		t.Fatal(err)
	}
	c := *cfg
	c.NumLayers = 2
	c.LayerTypes, c.MLPLayerTypes, c.HeadsPerLayer = c.LayerTypes[:2], c.MLPLayerTypes[:2], c.HeadsPerLayer[:2]
	r, err := ckpt.ParseRecipe("q4_k_m")
	if err != nil {
		t.Fatal(err)
	}
	compile := func(pre bool) *gpu.Executor {
		if pre {
			t.Setenv("LAGC_XIN_PRE", "1")
		} else {
			t.Setenv("LAGC_XIN_PRE", "")
		}
		gr, err := models.Build("laguna.yaml", models.LagunaYAML, &c, models.BuildOptions{WeightDType: ir.BF16})
		if err != nil {
			t.Fatal(err)
		}
		if err := models.SetRecipeTypes(gr, r); err != nil {
			t.Fatal(err)
		}
		if _, err := passes.Run(gr, passes.Options{}); err != nil {
			t.Fatal(err)
		}
		ex, err := gpu.Compile(gr, nil, gpu.Config{MaxContext: 256, Chunk: 64})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ex.Close() })
		return ex
	}
	base, pre := compile(false), compile(true)
	count := func(ex *gpu.Executor, kernel string) int {
		n := 0
		for _, st := range ex.Plan().Decode.Steps {
			for _, l := range st.Launches {
				if l.Kernel == kernel {
					n++
				}
			}
		}
		return n
	}
	if n, m := count(pre, "qgemv_xin_norm_pre"), count(pre, "moe_down_qgemv_trig"); n != 1 || m != 1 || count(base, "qgemv_xin_norm_pre") != 0 {
		t.Fatalf("decode plans: %d qgemv_xin_norm_pre and %d moe_down_qgemv_trig with LAGC_XIN_PRE=1 (want 1 each), %d without",
			n, m, count(base, "qgemv_xin_norm_pre"))
	}
	prompt := make([]int32, 40)
	for i := range prompt {
		prompt[i] = int32(i * 977 % c.VocabSize)
	}
	for _, eager := range []bool{true, false} {
		base.SetEager(eager)
		pre.SetEager(eager)
		ta, la, _ := decodeRun(t, base, prompt, false, 12)
		tb, lb, _ := decodeRun(t, pre, prompt, false, 12)
		if !slices.Equal(ta, tb) {
			t.Fatalf("eager %v: tokens %v with LAGC_XIN_PRE=1, %v without", eager, tb, ta)
		}
		for i := range la {
			if !slices.EqualFunc(la[i], lb[i], func(a, b float32) bool { return math.Float32bits(a) == math.Float32bits(b) }) {
				t.Fatalf("eager %v, step %d: logits differ with LAGC_XIN_PRE=1", eager, i)
			}
		}
		if !eager && (!pre.Captured() || !base.Captured()) {
			t.Fatalf("graph mode: captured %v (pre), %v (base)", pre.Captured(), base.Captured())
		}
	}
}
