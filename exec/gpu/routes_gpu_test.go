package gpu_test

import (
	"slices"
	"testing"

	"lagc/cuda/cudatest"
	"lagc/exec/gpu"
	"lagc/exec/routes"
)

// TestCensusRoutesGPU: a two-layer Laguna-S-2.1 (q4_k_m recipe, synthetic
// weights) prefilling 150 tokens in chunks of 64 has one census, for its
// MoE layer, of every token's top-k routes; the same twice; the sequence
// afterwards decodes as it did before the census; and a one-token prompt
// has its k routes.
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
	// One token: the router's selection is router_qgemv's (fused with the
	// shared expert's GEMV), in the step before the router's.
	one, err := ex.CensusRoutes(prompt[:1])
	if err != nil || len(one) != 1 || one[0].Routes != k || one[0].Used != k || one[0].Busiest != 1 {
		t.Fatalf("census of one token %+v (%v): want layer 1 with %d routes to %d experts", one, err, k, k)
	}
}

// TestCensusRoutesSharedGPU: in a bf16 two-layer Laguna-S-2.1 the shared
// expert runs among the routed ones and, in chunks above 64 tokens,
// fuseTopKShared's router_topk_shared writes the routes buffer instead of
// the router step's own rows: the census of 300 tokens (chunks of 256 and
// 44) counts every token's top-k there, the same as without the fusion
// (the same weights: the plans differ in launches only). Before it read the
// stale rows: 10,009-10,593 "experts" of 256 at 2048 tokens.
func TestCensusRoutesSharedGPU(t *testing.T) {
	cudatest.Device(t)
	c, _ := s21q4km(t, 2)
	census := func(fusions string) []routes.Layer {
		t.Setenv("LAGC_DISABLE_FUSIONS", fusions)
		ex, err := gpu.Compile(bf16Graph(t, c, nil), nil, gpu.Config{MaxContext: 512, Chunk: 256})
		if err != nil {
			t.Fatal(err)
		}
		defer ex.Close()
		if n := stepLaunches(ex.Plan().Prefill.Steps, "router_topk_shared"); (fusions == "") != (n > 0) {
			t.Fatalf("LAGC_DISABLE_FUSIONS=%q: %d router_topk_shared launches in the prefill plan", fusions, n)
		}
		got, err := ex.CensusRoutes(spreadPrompt(c, 300))
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	fused, plain := census(""), census("fuseTopKShared")
	k, E := c.NumExpertsPerTok, c.NumExperts
	if len(fused) != 1 || fused[0].Routes != 300*k || fused[0].Used < k || fused[0].Used > E || !slices.Equal(fused, plain) {
		t.Fatalf("census %+v, without fuseTopKShared %+v: want layer 1 with %d routes over %d to %d experts, both the same", fused, plain, 300*k, k, E)
	}
}
