package gpu

import (
	"fmt"
	"os"

	"lagc/lower"
)

// A batched step whose decode rows are one sequence's token alone (a
// server with one client, or one still decoding) runs that row on the
// single-sequence decode schedule bound to the row's slot, not on the
// batched program of one row. The batched program runs the prefill
// schedule's launches at T=1, laid out for chunks: the q, k, v and gate
// GEMVs as four launches, q and k rotated by launches of their own; the
// decode schedule has them as one GEMV and inside the attention (lower's
// fusions need its one-token layout). The two give a row the same bits
// (TestBatchStepGPU compares them), and a lone row is about 11% faster at
// Laguna-S-2.1 q4_k_m (docs/PERF.md). Slot 0's greedy row (StepArgmax)
// also runs one step ahead, as ForwardArgmax does.

// EnvSoloDecode, set to 0, runs a lone decode row on the batched program
// of one row instead (A/B timing).
const EnvSoloDecode = "LAGC_SOLO_DECODE"

// soloGraphsMax bounds the captured graphs of slots >= 1 (slot 0 replays
// the single-sequence decode graph): past it they are dropped together
// and recaptured as slots come back.
const soloGraphsMax = 8

type soloState struct {
	off    bool
	progs  map[int]*program // slot >= 1 -> the decode schedule bound to its caches
	graphs graphCache       // by slot >= 1
	steps  int              // lone rows run so far
}

func (s *soloState) init() {
	s.off = os.Getenv(EnvSoloDecode) == "0"
	s.progs = map[int]*program{}
	s.graphs = newGraphCache(soloGraphsMax)
}

func (s *soloState) close() error { return s.graphs.close() }

// SoloSteps reports how many batched steps ran their lone decode row on
// the decode schedule.
func (e *Executor) SoloSteps() int { return e.solo.steps }

// SoloDecode reports whether a lone decode row runs on the decode schedule.
func (e *Executor) SoloDecode() bool { return !e.solo.off }

// SetSoloDecode switches a lone decode row between the decode schedule
// (the default) and the batched program of one row.
func (e *Executor) SetSoloDecode(on bool) { e.solo.off = !on }

// soloGreedy reports whether a step (its segments checked) is slot 0's
// lone decode row with no logits asked for (a server's one greedy
// client): it then runs as ForwardArgmax's steps do, one step ahead
// (ahead.go), which the step queued for the token it returns serves when
// the next step feeds it.
func (e *Executor) soloGreedy(segs []Segment, rows logitRows) bool {
	return rows == logitsNone && !e.solo.off && len(segs) == 1 && segs[0].Slot == 0 && len(segs[0].Tokens) == 1 && e.greedyPath()
}

// soloProgram is the decode schedule bound to the caches of slot >= 1.
func (e *Executor) soloProgram(slot int) (*program, error) {
	if p := e.solo.progs[slot]; p != nil {
		return p, nil
	}
	e.kvSlot = slot
	p, err := e.bindPlanned(e.plan.Decode)
	e.kvSlot = 0
	if err != nil {
		return nil, fmt.Errorf("the decode schedule for slot %d: %w", slot, err)
	}
	e.solo.progs[slot] = p
	return p, nil
}

// decodeSolo runs seg's one token (row in the step's argmax, out in its
// logits) on the decode schedule of its slot: slot 0's is the
// single-sequence decode step's (decodeStep); another slot's is bound to
// its caches, its graph in solo.graphs.
func (e *Executor) decodeSolo(seg Segment, row, out int, logits []float32, next []int32) error {
	var lg []float32
	var nx int32
	if seg.Slot == 0 {
		var err error
		if nx, lg, err = e.decodeStep(seg.Tokens[0], logits != nil); err != nil {
			return err
		}
	} else {
		at := e.SlotLen(seg.Slot)
		if err := e.upload(seg.Tokens, at); err != nil {
			return err
		}
		p, err := e.soloProgram(seg.Slot)
		if err != nil {
			return err
		}
		if err := e.launchCached(&e.solo.graphs, seg.Slot, p, "the decode step of slot %d"); err != nil {
			return err
		}
		l, n, err := e.readOut(p, 1, rowsIf(logits != nil))
		if err != nil {
			return err
		}
		if e.prof != nil {
			if err := e.prof.collect(lower.Decode); err != nil {
				return err
			}
		}
		e.setSlotLen(seg.Slot, at+1)
		lg, nx = l, n[0]
	}
	if logits != nil {
		copy(logits[out*e.V:(out+1)*e.V], lg)
	}
	next[row] = nx
	e.solo.steps++
	return nil
}

// SoloGraphs reports the slots (other than 0) whose lone decode rows
// replay a graph.
func (e *Executor) SoloGraphs() []int {
	var out []int
	for s := range e.plan.SeqSlots() {
		if e.solo.graphs.has(s) {
			out = append(out, s)
		}
	}
	return out
}
