package gpu_test

import (
	"math/rand/v2"
	"slices"
	"testing"

	"lagc/cuda/cudatest"
	"lagc/exec/gpu"
)

// TestSoloDecodeGPU: on the first two layers of Laguna-S-2.1 in the q4_k_m
// recipe (synthetic weights) with three sequence slots, a sequence's lone
// decode rows in slot 1 (the decode schedule bound to that slot's caches,
// eager, then replayed as the slot's graph) give its logits the bits they
// get in steps of two rows beside another sequence (the batched program)
// and on the batched program of one row (SetSoloDecode(false)); only the
// lone rows with the path on ran it; and slot 0's greedy rows (StepArgmax,
// one step ahead) give StepLast's tokens.
func TestSoloDecodeGPU(t *testing.T) {
	cudatest.Device(t)
	c, r := s21q4km(t, 2)
	ex, err := gpu.Compile(bf16Graph(t, c, r), nil, gpu.Config{MaxContext: 256, Chunk: 64, Seqs: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer ex.Close()
	V := c.VocabSize
	rng := rand.New(rand.NewPCG(3, 9))
	pa, pb, da, db := randTokens(rng, 37, V), randTokens(rng, 20, V), randTokens(rng, 8, V), randTokens(rng, 8, V)
	// run feeds sequence a in slot 1 (and b in slot 2 beside it) and
	// returns a's decode rows' logits.
	run := func(both bool) [][]float32 {
		t.Helper()
		ex.ResetSlot(1)
		ex.ResetSlot(2)
		segs := []gpu.Segment{{Slot: 1, Tokens: pa}}
		if both {
			segs = append(segs, gpu.Segment{Slot: 2, Tokens: pb})
		}
		if _, _, err := ex.Step(segs); err != nil {
			t.Fatal(err)
		}
		var out [][]float32
		for i := range da {
			segs := []gpu.Segment{{Slot: 1, Tokens: da[i : i+1]}}
			if both {
				segs = append(segs, gpu.Segment{Slot: 2, Tokens: db[i : i+1]})
			}
			lg, _, err := ex.Step(segs)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, slices.Clone(lg[:V]))
		}
		return out
	}
	for _, eager := range []bool{true, false} {
		ex.SetEager(eager)
		s0 := ex.SoloSteps()
		solo := run(false)
		if n := ex.SoloSteps() - s0; n != len(da) {
			t.Fatalf("eager %v: %d lone rows ran on the decode schedule, want %d", eager, n, len(da))
		}
		batched := run(true)
		ex.SetSoloDecode(false)
		one := run(false)
		ex.SetSoloDecode(true)
		if n := ex.SoloSteps() - s0; n != len(da) {
			t.Fatalf("eager %v: %d rows on the decode schedule after the batched runs, want %d", eager, n, len(da))
		}
		for i := range solo {
			if k, diff := firstBitDiff(solo[i], batched[i]); diff {
				t.Fatalf("eager %v, row %d: alone on the decode schedule and beside another sequence differ at %d (%g, %g)", eager, i, k, at(solo[i], k), at(batched[i], k))
			}
			if k, diff := firstBitDiff(solo[i], one[i]); diff {
				t.Fatalf("eager %v, row %d: the decode schedule and the batched program of one row differ at %d (%g, %g)", eager, i, k, at(solo[i], k), at(one[i], k))
			}
		}
		if !eager && !slices.Contains(ex.SoloGraphs(), 1) {
			t.Fatalf("slot 1's lone rows replayed no graph (graphs for slots %v)", ex.SoloGraphs())
		}
	}
	// Slot 0's greedy rows through StepArgmax run one step ahead (a
	// server's one client): the tokens StepLast's argmax gives, with and
	// without decoding ahead, each row counted as lone.
	greedy := func(argmax bool) []int32 {
		t.Helper()
		ex.ResetSlot(0)
		nx, err := ex.StepArgmax([]gpu.Segment{{Slot: 0, Tokens: pa}})
		if err != nil {
			t.Fatal(err)
		}
		tok := nx[len(nx)-1]
		var out []int32
		for range 12 {
			seg := []gpu.Segment{{Slot: 0, Tokens: []int32{tok}}}
			if argmax {
				nx, err = ex.StepArgmax(seg)
			} else {
				_, nx, err = ex.StepLast(seg)
			}
			if err != nil {
				t.Fatal(err)
			}
			tok = nx[0]
			out = append(out, tok)
		}
		return out
	}
	s0 := ex.SoloSteps()
	ahead := greedy(true)
	if n := ex.SoloSteps() - s0; n != 12 || !ex.DecodesAhead() {
		t.Fatalf("%d of 12 greedy rows counted lone, decoding ahead %v", n, ex.DecodesAhead())
	}
	ex.SetDecodeAhead(false)
	off := greedy(true)
	ex.SetDecodeAhead(true)
	last := greedy(false)
	if !slices.Equal(ahead, last) || !slices.Equal(off, last) {
		t.Fatalf("slot 0's greedy tokens: ahead %v, not ahead %v, StepLast's %v", ahead, off, last)
	}
}
