package gpu_test

import (
	"testing"

	"lagc/cuda/cudatest"
)

// TestQGEMVWPreGPU: the quantised GEMV as compiled by default (each lane's
// first weights asked for before the launch's wait) decodes a two-layer
// Laguna-S-2.1 in the q4_k_m recipe (synthetic weights) with the tokens
// and logits of its wait-first form (-DLAGC_QGEMV_WAIT_FIRST through
// LAGC_NVRTC_OPTIONS) bit for bit over a prompt and 12 steps, eager and
// replayed as a graph: the same loads and sums, only asked for earlier.
func TestQGEMVWPreGPU(t *testing.T) {
	cudatest.Device(t)
	c, r := s21q4km(t, 2)
	base := compileWith(t, c, r, "LAGC_NVRTC_OPTIONS", "^qgemv$:-DLAGC_QGEMV_WAIT_FIRST")
	ex := compileWith(t, c, r, "LAGC_NVRTC_OPTIONS", "")
	sameDecodes(t, "qgemv's weights before its wait", base, ex, spreadPrompt(c, 40), 12)
}
