package gpu_test

import (
	"strings"
	"testing"

	"lagc/cuda/cudatest"
	"lagc/exec/gpu"
)

// TestBranchSharedDownGPU: with branchSharedDown, branchSharedDownTail or
// sharedDownBlocks(Last) (LAGC_ENABLE_FUSIONS) the decode plan of a three-layer
// Laguna-S-2.1 in the q4_k_m recipe (synthetic weights; two MoE layers, so
// the forms share their buffer) runs each MoE layer's shared down GEMV on
// the side stream (sharedDownBlocks: as blocks of the routed down's
// launch, no branch) and gives the tokens and logits of the default plan bit for bit
// over a prompt and 12 steps, eager and replayed as a graph (whose capture
// follows the branch's events).
func TestBranchSharedDownGPU(t *testing.T) {
	cudatest.Device(t)
	c, r := s21q4km(t, 3)
	compile := func(enable string) *gpu.Executor { return compileWith(t, c, r, "LAGC_ENABLE_FUSIONS", enable) }
	base := compile("")
	prompt := spreadPrompt(c, 40)
	for fusion, last := range map[string]string{"branchSharedDown": "qgemv_join_norm", "branchSharedDownTail": "moe_down_qgemv_pre_join",
		"sharedDownBlocks": "moe_down_qgemv_pre_shared", "sharedDownBlocksLast": "moe_down_qgemv_pre_shared"} {
		br := compile(fusion)
		for _, k := range []string{"fork", "join", last} {
			want := 2
			if strings.HasPrefix(fusion, "sharedDownBlocks") && k != last {
				want = 0 // no branch: the shared down is blocks of the routed down's launch
			}
			if n, n0 := stepLaunches(br.Plan().Decode.Steps, k), stepLaunches(base.Plan().Decode.Steps, k); n != want || n0 != 0 {
				t.Fatalf("%s: %d %s launches in the branched decode plan (want %d), %d in the default one", fusion, n, k, want, n0)
			}
		}
		sameDecodes(t, fusion, base, br, prompt, 12)
	}
}
