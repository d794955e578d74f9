package gpu_test

import (
	"math"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"lagc/ckpt"
	"lagc/config"
	"lagc/engine"
	"lagc/internal/fixture"
)

// TestQuantFixturesGPU: every llama-quantize fixture (each ggml type, the
// q4_k_m recipe, and llama.cpp's own Q4_K_M mixture with q6_k downs) on the GPU against the CPU engine on the same file,
// which is bitwise the float32 executor on the dequantised weights. The GPU
// is fed the CPU's tokens (a prompt, then 16 greedy steps), so every row
// compares the same inputs. Decode multiplies through activations quantised
// to int8 groups and bf16 rounds on top, and a small difference can flip
// the MoE layer's expert choice: so the bounds are on the median row and on
// argmax agreement over rows the CPU does not call a near-tie, with every
// figure logged. A broken kernel lands far outside them (random logits
// agree with the argmax on about 1 row in 64). Graph replay must equal
// eager launches bitwise on the quantised plan.
func TestQuantFixturesGPU(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(fixture.Root(t), "testdata", "quant", "*.gguf"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no quantised fixtures: %v", err)
	}
	for _, path := range files {
		name := strings.TrimSuffix(filepath.Base(path), ".gguf")
		// Graph replay against eager: the recipe, and llama.cpp's mixture.
		t.Run(name, func(t *testing.T) { quantFileAgainstCPU(t, path, quantPrompt, strings.HasPrefix(name, "q4_k_m")) })
		// and a prompt past the GEMV path's 8 rows: the prefill GEMMs (the
		// q6_k and q5_k stacks of q4_k_m-llama, q6_k and q5_k on theirs).
		t.Run(name+"/prefill", func(t *testing.T) { quantFileAgainstCPU(t, path, longPrompt(), false) })
	}
}

// longPrompt is 40 tokens of the fixtures' vocabulary (64): a prefill
// chunk past the GEMV path's 8 rows, so that the GEMMs run.
func longPrompt() []int32 {
	p := make([]int32, 40)
	for i := range p {
		p[i] = int32(1 + 7*i%61)
	}
	return p
}

// TestQuantFallbacksGPU: synthetic-tiny (experts 16 wide, hidden 32)
// under the q6_k and q8_0 recipes, whose fallbacks leave each MoE layer
// q8_0 gate and up stacks with an f16 down (lagc convert --synthetic
// writes the same), which the GPU runs as bf16 stacks (lower's
// quantKeep), against the CPU on the same file.
func TestQuantFallbacksGPU(t *testing.T) {
	cfg, err := config.Preset("synthetic-tiny")
	if err != nil {
		t.Fatal(err)
	}
	for _, recipe := range []string{"q6_k", "q8_0"} {
		t.Run(recipe, func(t *testing.T) {
			src, r := syntheticCheckpoint(t, cfg, "synthetic:synthetic-tiny", recipe, 3)
			path := filepath.Join(t.TempDir(), "tiny_"+recipe+".gguf")
			if err := ckpt.WriteGGUFFile(path, src, ckpt.WriteOptions{Recipe: r}); err != nil {
				t.Fatal(err)
			}
			ck, err := ckpt.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			gate, _ := ck.Tensor("blk.1.ffn_gate_exps.weight")
			down, _ := ck.Tensor("blk.1.ffn_down_exps.weight")
			ck.Close()
			if gate.DType != ckpt.Q8_0 || down.DType != ckpt.F16 {
				t.Fatalf("layer 1's stacks %s and %s: not the fallback mix this test is for", gate.DType, down.DType)
			}
			quantFileAgainstCPU(t, path, quantPrompt, true)
		})
	}
}

// quantPrompt is quantFileAgainstCPU's usual prompt: 8 tokens, a decode
// batch's GEMVs.
var quantPrompt = []int32{1, 5, 9, 13, 17, 21, 25, 29}

// quantFileAgainstCPU runs the quantised file at path on the GPU against
// the CPU engine on the same file, which is bitwise the float32 executor
// on the dequantised weights (TestQuantFixturesGPU), prompt then 16 steps;
// replay: also graph replay against eager launches, bit for bit.
func quantFileAgainstCPU(t *testing.T, path string, prompt []int32, replay bool) {
	const steps = 16
	ref, err := engine.Open(path, engine.Options{Device: "cpu"})
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	seq, want := teacherRun(t, ref.Backend, prompt, nil, steps)
	for _, dt := range []string{"f32", "bf16"} {
		m, _ := openGPU(t, path, engine.Options{DType: dt})
		_, got := teacherRun(t, m.Backend, prompt, seq, steps)
		var errs []float64
		agree, decided := 0, 0
		for r := range want {
			errs = append(errs, fixture.RelL2(got[r], want[r]))
			if gap(want[r]) >= nearTie {
				decided++
				if argmaxOf(got[r]) == argmaxOf(want[r]) {
					agree++
				}
			}
		}
		sort.Float64s(errs)
		med, worst := errs[len(errs)/2], errs[len(errs)-1]
		t.Logf("%s: %d rows, relative L2 error median %.3g, worst %.3g; argmax agrees on %d of %d decided rows",
			dt, len(errs), med, worst, agree, decided)
		tol := 2e-2
		if dt == "bf16" {
			tol = 4e-2
		}
		if med > tol {
			t.Errorf("%s: median row error %.3g > %.3g", dt, med, tol)
		}
		if decided == 0 || float64(agree) < 0.8*float64(decided) {
			t.Errorf("%s: argmax agrees with the CPU on %d of %d rows without a near-tie", dt, agree, decided)
		}
	}
	if !replay {
		return
	}
	_, eager := openGPU(t, path, engine.Options{DType: "bf16", Eager: true})
	_, graph := openGPU(t, path, engine.Options{DType: "bf16"})
	ta, la, _ := decodeRun(t, eager, prompt, false, steps)
	tb, lb, _ := decodeRun(t, graph, prompt, false, steps)
	if !graph.Captured() || !slices.Equal(ta, tb) {
		t.Fatalf("graph replay (captured %v): tokens %v, eager %v", graph.Captured(), tb, ta)
	}
	for i := range la {
		if !slices.EqualFunc(la[i], lb[i], func(a, b float32) bool { return math.Float32bits(a) == math.Float32bits(b) }) {
			t.Fatalf("decode step %d: graph replay logits differ from eager", i)
		}
	}
}

// teacherRun feeds prompt, then steps more tokens: seq's when given, else
// each step's argmax. It returns the tokens fed after the prompt and every
// logits row (the prompt's, then each step's).
func teacherRun(t *testing.T, b engine.Backend, prompt, seq []int32, steps int) ([]int32, [][]float32) {
	t.Helper()
	b.Reset()
	logits, next, err := b.Forward(prompt)
	if err != nil {
		t.Fatal(err)
	}
	V := len(logits) / len(prompt)
	var rows [][]float32
	for r := range prompt {
		rows = append(rows, logits[r*V:(r+1)*V])
	}
	var fed []int32
	tok := next[len(next)-1]
	for i := 0; i < steps; i++ {
		if seq != nil {
			tok = seq[i]
		}
		fed = append(fed, tok)
		lg, nx, err := b.Forward([]int32{tok})
		if err != nil {
			t.Fatal(err)
		}
		rows = append(rows, lg)
		tok = nx[0]
	}
	return fed, rows
}

func argmaxOf(row []float32) int {
	best := 0
	for i, x := range row {
		if x > row[best] {
			best = i
		}
	}
	return best
}
