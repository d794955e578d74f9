package gpu

import (
	"testing"

	"lagc/config"
)

// benchShape is a matrix of a benchmark: N output features (with swiglu, N
// gate rows and N up rows) of K inputs.
type benchShape struct {
	name   string
	N, K   int
	swiglu bool
}

// s21Shapes are Laguna-S-2.1's decode and prefill matrices, from the
// laguna-s-2.1 preset (one table for every benchmark, so they cannot
// disagree): the fused q, k, v and gate of a sliding layer (the most
// heads, 36 of the 48 layers), its o_proj, the dense MLP of layer 0, the
// shared expert, and the LM head.
type s21Shapes struct {
	lmHead, qkvg, oProj, denseGateUp, denseDown, sharedGateUp, sharedDown benchShape
}

func s21(tb testing.TB) s21Shapes {
	tb.Helper()
	c, err := config.Preset("laguna-s-2.1")
	if err != nil {
		tb.Fatal(err)
	}
	l := 1 // a sliding layer
	H, q := c.HiddenSize, c.Heads(l)*c.HeadDim
	return s21Shapes{
		lmHead:       benchShape{"lm_head", c.VocabSize, H, false},
		qkvg:         benchShape{"qkvg", q + 2*c.NumKVHeads*c.HeadDim + c.GateRows(l), H, false},
		oProj:        benchShape{"o_proj", H, q, false},
		denseGateUp:  benchShape{"dense_gate_up", c.IntermediateSize, H, true},
		denseDown:    benchShape{"dense_down", H, c.IntermediateSize, false},
		sharedGateUp: benchShape{"shared_gate_up", c.SharedExpertSize, H, true},
		sharedDown:   benchShape{"shared_down", H, c.SharedExpertSize, false},
	}
}

// TestS21Shapes pins the table to the shapes the docs' figures were
// measured at (docs/PERF.md), so a preset change is seen here.
func TestS21Shapes(t *testing.T) {
	s := s21(t)
	for _, c := range []struct {
		got  benchShape
		N, K int
	}{
		{s.lmHead, 100352, 3072}, {s.qkvg, 11336, 3072}, {s.oProj, 3072, 9216}, {s.denseGateUp, 12288, 3072},
		{s.denseDown, 3072, 12288}, {s.sharedGateUp, 1024, 3072}, {s.sharedDown, 3072, 1024},
	} {
		if c.got.N != c.N || c.got.K != c.K {
			t.Errorf("%s: %d x %d, want %d x %d", c.got.name, c.got.N, c.got.K, c.N, c.K)
		}
	}
}
