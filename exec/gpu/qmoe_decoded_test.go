package gpu_test

import (
	"testing"

	"lagc/cuda/cudatest"
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
	base, dec := compileWith(t, c, r, "LAGC_QMOE_SHAPE", ""), compileWith(t, c, r, "LAGC_QMOE_SHAPE", "dec")
	for _, k := range []string{"moe_gateup_qgemv_trig", "moe_down_qgemv_pre"} {
		n, nd := 0, 0
		for _, st := range dec.Plan().Decode.Steps {
			for _, l := range st.Launches {
				if l.Kernel == k {
					n++
					if l.Ints[0] == int64(lower.QMoEDecodedType) {
						nd++
					}
				}
			}
		}
		if n != 2 || nd != n {
			t.Fatalf("%d %s launches in the decoded plan, %d of them decoded (want 2 and 2)", n, k, nd)
		}
	}
	sameDecodes(t, "decoded staging", base, dec, spreadPrompt(c, 40), 12)
}
