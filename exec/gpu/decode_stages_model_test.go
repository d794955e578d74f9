package gpu_test

import (
	"slices"
	"strconv"
	"testing"

	"lagc/cuda/cudatest"
	"lagc/exec/gpu"
	"lagc/internal/fixture"
)

// decodeKeyLoops is each decode attention's key loop in ex's decode plan,
// by its window: stages (Ints[2]) and tensor cores (Ints[3]).
func decodeKeyLoops(ex *gpu.Executor) map[int64][2]int64 {
	m := map[int64][2]int64{}
	for _, st := range ex.Plan().Decode.Steps {
		for _, l := range st.Launches {
			if l.Kernel == "attn_decode" {
				m[l.Args[3].Int] = [2]int64{l.Ints[2], l.Ints[3]}
			}
		}
	}
	return m
}

// compileLong compiles two Laguna-S-2.1 layers in the q4_k_m recipe
// (synthetic weights; a full layer, then a sliding one) at a context of
// 8192, where the full layer's decode attention runs 33 splits of 249
// keys, under the environment env (pairs), closed with the test.
func compileLong(t *testing.T, env ...string) *gpu.Executor {
	t.Helper()
	c, r := s21q4km(t, 2)
	for i := 0; i+1 < len(env); i += 2 {
		t.Setenv(env[i], env[i+1])
	}
	ex, err := gpu.Compile(bf16Graph(t, c, r), nil, gpu.Config{MaxContext: 8192, Chunk: 512})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ex.Close() })
	return ex
}

// TestDecodeStagesModelGPU: at compileLong's shape, after a 1500-token
// prompt, decode with the FFMA key loop through rings of 2 and 8 tiles on
// both layers (the sliding ring wrapped, the fused q/k norm and rotation
// in the attention) gives the tokens and logits of the loop without a
// ring bit for bit, eager and replayed.
func TestDecodeStagesModelGPU(t *testing.T) {
	cudatest.Device(t)
	c, _ := s21q4km(t, 2)
	base := compileLong(t, "LAGC_DECODE_MMA", "0", "LAGC_DECODE_STAGES", "1")
	if got := decodeKeyLoops(base); len(got) != 2 || got[0] != [2]int64{} || got[512] != [2]int64{} {
		t.Fatalf("no ring, no tensor cores: decode key loops by window %v", got)
	}
	prompt := spreadPrompt(c, 1500)
	for _, st := range []int64{2, 8} {
		env := strconv.FormatInt(st, 10)
		ex := compileLong(t, "LAGC_DECODE_MMA", "0", "LAGC_DECODE_STAGES", env)
		if got := decodeKeyLoops(ex); got[0] != [2]int64{st, 0} || got[512] != [2]int64{st, 0} {
			t.Fatalf("LAGC_DECODE_STAGES=%s: decode key loops by window %v", env, got)
		}
		sameDecodes(t, "LAGC_DECODE_STAGES="+env, base, ex, prompt, 6)
	}
}

// TestDecodeMMAModelGPU: at compileLong's shape, lower's choice builds
// the full layer's decode attention on tensor cores (the sliding ring's
// one tile a split stays on FFMA), and after a 3500-token prompt (splits
// of 107 keys, over DEC_MMA_MIN_KEYS, but for the last) it decodes what
// the FFMA plan decodes, eager and replayed alike: the same tokens (a
// different one only at a near tie, a gap under 0.05, which ends the
// comparison), and logits within 0.01 relative L2 of the FFMA plan's at
// the median step, 0.1 at the worst. Its sums run in another order, so
// bits may differ, and a bf16 output one unit apart can move one of the
// next layer's top-10 expert choices (synthetic weights route near ties).
// On the H200, with a 1500-token prompt (46 keys a split, when the
// tensor cores ran at any length), the steps measured 0 (steps 0-2: the
// same bits), 0.0092, 0.0029, 0.0026, 0.0425 at a step whose token was
// still the same, and 0.0097, as TestGEMMNormRoPEModelGPU's isolated steps
// do; a wrong head, split or merge moves every step by far more. The
// rig's TestAttentionDecodeMMAGPU holds the attention itself to the FFMA
// loop's error. Replayed equals eager bit for bit.
func TestDecodeMMAModelGPU(t *testing.T) {
	cudatest.Device(t)
	c, _ := s21q4km(t, 2)
	ffma := compileLong(t, "LAGC_DECODE_MMA", "0")
	mma := compileLong(t, "LAGC_DECODE_MMA", "")
	if got := decodeKeyLoops(mma); got[0] != [2]int64{0, 1} || got[512][1] != 0 {
		t.Fatalf("lower's choice: decode key loops by window %v, want tensor cores on the full layer alone", got)
	}
	if got := decodeKeyLoops(ffma); got[0][1] != 0 || got[512][1] != 0 {
		t.Fatalf("LAGC_DECODE_MMA=0: decode key loops by window %v", got)
	}
	prompt := spreadPrompt(c, 3500)
	var eagerLogits [][]float32
	for _, eager := range []bool{true, false} {
		ffma.SetEager(eager)
		mma.SetEager(eager)
		ta, la, gaps := decodeRun(t, ffma, prompt, false, 8)
		tb, lb, _ := decodeRun(t, mma, prompt, false, 8)
		if eager {
			eagerLogits = lb
		} else {
			for i := range lb {
				if j, diff := firstBitDiff(lb[i], eagerLogits[i]); diff {
					t.Fatalf("step %d: replayed logits differ from eager ones (first at %d)", i, j)
				}
			}
		}
		var rels []float64
		for i := range ta {
			rel := fixture.RelL2(lb[i], la[i])
			rels = append(rels, rel)
			t.Logf("eager %v, step %d: logits %.3g from the FFMA loop's (relative L2), gap %.3g", eager, i, rel, gaps[i])
			if rel > 0.1 {
				t.Fatalf("eager %v, step %d: logits %.3g from the FFMA loop's (relative L2)", eager, i, rel)
			}
			if ta[i] != tb[i] {
				if gaps[i] < 0.05 {
					break // a near tie: the runs go on from different tokens
				}
				t.Fatalf("eager %v, step %d: token %d, the FFMA loop's %d (gap %.3g)", eager, i, tb[i], ta[i], gaps[i])
			}
		}
		slices.Sort(rels)
		if med := rels[len(rels)/2]; med > 0.01 {
			t.Fatalf("eager %v: the median step's logits %.3g from the FFMA loop's (relative L2; %v)", eager, med, rels)
		}
	}
}
