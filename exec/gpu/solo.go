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

// soloGraphsMax bounds the captured solo graphs (one a slot, slot 0's
// being the single-sequence API's): past it they are dropped together
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

// soloGreedy reports whether a step is slot 0's lone decode row with no
// logits asked for (a server's one greedy client): it then runs as
// ForwardArgmax's steps do, one step ahead (ahead.go), which the step
// queued for the token it returns serves when the next step feeds it.
func (e *Executor) soloGreedy(segs []Segment, rows logitRows) bool {
	if rows != logitsNone || e.solo.off || len(segs) != 1 || segs[0].Slot != 0 || len(segs[0].Tokens) != 1 || !e.greedyPath() {
		return false
	}
	tok := segs[0].Tokens[0]
	return tok >= 0 && int(tok) < e.V && e.next+1 <= e.plan.MaxContext
}

// soloProgram is the decode schedule bound to slot's caches: slot 0's is
// the single-sequence API's.
func (e *Executor) soloProgram(slot int) (*program, error) {
	if slot == 0 {
		return e.decode, nil
	}
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
// logits) on the decode schedule of its slot.
func (e *Executor) decodeSolo(seg Segment, row, out int, logits []float32, next []int32) error {
	at := e.SlotLen(seg.Slot)
	if err := e.upload(seg.Tokens, at); err != nil {
		return err
	}
	p, err := e.soloProgram(seg.Slot)
	if err != nil {
		return err
	}
	if err := e.launchSolo(p, seg.Slot); err != nil {
		return err
	}
	lg, nx, err := e.readOut(p, 1, rowsIf(logits != nil))
	if err != nil {
		return err
	}
	if logits != nil {
		copy(logits[out*e.V:(out+1)*e.V], lg)
	}
	next[row] = nx[0]
	if e.prof != nil {
		if err := e.prof.collect(lower.Decode); err != nil {
			return err
		}
	}
	e.solo.steps++
	e.setSlotLen(seg.Slot, at+1)
	return nil
}

// launchSolo queues p for slot as launchDecode does: eagerly the first
// time and in eager mode, else a replay of its captured graph (slot 0's
// is the single-sequence decode graph).
func (e *Executor) launchSolo(p *program, slot int) error {
	if slot == 0 {
		return e.launchDecode()
	}
	return e.launchCached(&e.solo.graphs, slot, p, fmt.Sprintf("the decode step of slot %d", slot))
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
