package gpu_test

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"lagc/ckpt"
	"lagc/config"
	"lagc/cuda/cudatest"
	"lagc/exec/gpu"
)

// TestXInPreGPU: with fuseXInPre, fuseDownPre or both (the default), the
// decode plan of a two-layer Laguna-S-2.1 in the q4_k_m recipe (synthetic
// weights) runs the kernels that start early (moe_gateup_qgemv_trig,
// moe_down_qgemv_trig or _pre, qgemv_xin_norm_pre) and gives the tokens
// and logits of the plan without either (LAGC_DISABLE_FUSIONS) bit for bit
// over a prompt and 12 steps, eager and replayed as a graph.
func TestXInPreGPU(t *testing.T) {
	cudatest.Device(t)
	c, r := s21q4km(t, 2)
	compile := func(xin, down bool) *gpu.Executor {
		off := []string{"sharedDownGateUp"} // it takes the three launches on (TestSharedDownGateUpGPU)
		if !xin {
			off = append(off, "fuseXInPre")
		}
		if !down {
			off = append(off, "fuseDownPre")
		}
		return compileWith(t, c, r, "LAGC_DISABLE_FUSIONS", strings.Join(off, ","))
	}
	base := compile(false, false)
	count := func(ex *gpu.Executor, kernel string) int { return stepLaunches(ex.Plan().Decode.Steps, kernel) }
	prompt := spreadPrompt(c, 40)
	for _, v := range []struct {
		xin, down bool
		kernels   []string // one launch each in the decode plan
	}{
		{true, false, []string{"moe_down_qgemv_trig", "qgemv_xin_norm_pre"}},
		{false, true, []string{"moe_gateup_qgemv_trig", "moe_down_qgemv_pre"}},
		{true, true, []string{"moe_gateup_qgemv_trig", "moe_down_qgemv_pre", "qgemv_xin_norm_pre"}},
	} {
		pre := compile(v.xin, v.down)
		for _, k := range v.kernels {
			if count(pre, k) != 1 || count(base, k) != 0 {
				t.Fatalf("xin %v, down %v: %d %s launches in the decode plan (want 1), %d without either", v.xin, v.down, count(pre, k), k,
					count(base, k))
			}
		}
		sameDecodes(t, fmt.Sprintf("xin %v, down %v", v.xin, v.down), base, pre, prompt, 12)
	}
}

// compileWith compiles the bf16 graph of c's model with r's weights
// (MaxContext 256, prefill chunks of 64) under the environment variable
// key=val, closed with the test: the decode-plan comparisons' builds.
func compileWith(t *testing.T, c *config.Config, r *ckpt.Recipe, key, val string) *gpu.Executor {
	t.Helper()
	t.Setenv(key, val)
	ex, err := gpu.Compile(bf16Graph(t, c, r), nil, gpu.Config{MaxContext: 256, Chunk: 64})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ex.Close() })
	return ex
}

// spreadPrompt is n tokens spread over c's vocabulary.
func spreadPrompt(c *config.Config, n int) []int32 {
	p := make([]int32, n)
	for i := range p {
		p[i] = int32(i * 977 % c.VocabSize)
	}
	return p
}

// sameDecodes fails unless ex decodes prompt and steps tokens after it
// with the tokens and logits of base bit for bit, eager and replayed as a
// graph.
func sameDecodes(t *testing.T, what string, base, ex *gpu.Executor, prompt []int32, steps int) {
	t.Helper()
	for _, eager := range []bool{true, false} {
		base.SetEager(eager)
		ex.SetEager(eager)
		ta, la, _ := decodeRun(t, base, prompt, false, steps)
		tb, lb, _ := decodeRun(t, ex, prompt, false, steps)
		if !slices.Equal(ta, tb) {
			t.Fatalf("%s, eager %v: tokens %v, the base plan's %v", what, eager, tb, ta)
		}
		for i := range la {
			if !slices.EqualFunc(la[i], lb[i], func(a, b float32) bool { return math.Float32bits(a) == math.Float32bits(b) }) {
				t.Fatalf("%s, eager %v, step %d: logits differ from the base plan's", what, eager, i)
			}
		}
		if !eager && (!ex.Captured() || !base.Captured()) {
			t.Fatalf("%s, graph mode: captured %v, the base plan %v", what, ex.Captured(), base.Captured())
		}
	}
}
