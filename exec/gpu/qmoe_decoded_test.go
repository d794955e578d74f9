package gpu_test

import (
	"testing"

	"lagc/cuda/cudatest"
	"lagc/exec/gpu"
	"lagc/lower"
)

// TestQMoEDecodedGPU: with LAGC_QMOE_SHAPE=dec the decode plan of a
// three-layer Laguna-S-2.1 in the q4_k_m recipe (synthetic weights) runs its
// routed experts with q4_k's shared bytes staged decoded (the gate+up and
// the early down, QT_Q4_K_DEC) and gives the default plan's tokens and
// logits bit for bit over a prompt and 12 steps, eager and replayed.
func TestQMoEDecodedGPU(t *testing.T) {
	cudatest.Device(t)
	c, r := s21q4km(t, 3)
	compile := func(shape string) *gpu.Executor {
		t.Setenv("LAGC_QMOE_SHAPE", shape)
		ex, err := gpu.Compile(bf16Graph(t, c, r), nil, gpu.Config{MaxContext: 256, Chunk: 64})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ex.Close() })
		return ex
	}
	base, dec := compile(""), compile("dec")
	for _, k := range []string{"moe_gateup_qgemv_trig", "moe_down_qgemv_pre"} {
		n, nd := 0, 0
		for _, st := range dec.Plan().Decode.Steps {
			for _, l := range st.Launches {
				if l.Kernel == k {
					n++
					if l.Ints[0] == lower.QMoEDecodedType {
						nd++
					}
				}
			}
		}
		if n != 2 || nd != n {
			t.Fatalf("%d %s launches in the decoded plan, %d of them decoded (want 2 and 2)", n, k, nd)
		}
	}
	prompt := make([]int32, 40)
	for i := range prompt {
		prompt[i] = int32(i * 977 % c.VocabSize)
	}
	sameDecodes(t, "decoded staging", base, dec, prompt, 12)
}
