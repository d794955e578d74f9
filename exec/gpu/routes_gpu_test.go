package gpu_test

import (
	"slices"
	"testing"

	"lagc/cuda/cudatest"
)

// TestCensusRoutesGPU: a two-layer Laguna-S-2.1 (q4_k_m recipe, synthetic
// weights) prefilling 150 tokens in chunks of 64 has one census, for its
// MoE layer, of every token's top-k routes; the same twice; and the
// sequence afterwards decodes as it did before the census.
func TestCensusRoutesGPU(t *testing.T) {
	cudatest.Device(t)
	c, r := s21q4km(t, 2)
	ex := compileWith(t, c, r, "LAGC_QMOE_SHAPE", "")
	prompt := spreadPrompt(c, 150)
	before, _, _ := decodeRun(t, ex, prompt, false, 4)
	got, err := ex.CensusRoutes(prompt)
	if err != nil {
		t.Fatal(err)
	}
	k, E := c.NumExpertsPerTok, c.NumExperts
	if len(got) != 1 || got[0].Layer != 1 || got[0].Routes != len(prompt)*k || got[0].Used < k || got[0].Used > E ||
		got[0].Busiest < (len(prompt)*k+E-1)/E || got[0].Busiest > len(prompt) {
		t.Fatalf("census %+v: want layer 1 with %d routes over %d to %d experts, at most %d on one", got, len(prompt)*k, k, E, len(prompt))
	}
	again, err := ex.CensusRoutes(prompt)
	if err != nil || !slices.Equal(got, again) {
		t.Fatalf("a second census %+v (%v), the first %+v", again, err, got)
	}
	if after, _, _ := decodeRun(t, ex, prompt, false, 4); !slices.Equal(before, after) {
		t.Fatalf("tokens after the census %v, before %v", after, before)
	}
}
