package gpu_test

import (
	"testing"

	"lagc/cuda/cudatest"
)

// TestQGEMVWPreGPU: the quantised GEMV compiled with -DLAGC_QGEMV_WPRE
// (its first weights asked for before the launch's wait, an experiment
// through LAGC_NVRTC_OPTIONS) decodes a two-layer Laguna-S-2.1 in the
// q4_k_m recipe (synthetic weights) with the default's tokens and logits
// bit for bit over a prompt and 12 steps, eager and replayed as a graph:
// the same loads and sums, only asked for earlier.
func TestQGEMVWPreGPU(t *testing.T) {
	cudatest.Device(t)
	c, r := s21q4km(t, 2)
	base := compileWith(t, c, r, "LAGC_NVRTC_OPTIONS", "")
	ex := compileWith(t, c, r, "LAGC_NVRTC_OPTIONS", "^qgemv$:-DLAGC_QGEMV_WPRE")
	sameDecodes(t, "LAGC_QGEMV_WPRE", base, ex, spreadPrompt(c, 40), 12)
}
