package engine

import (
	"fmt"

	"lagc/exec/cpu"
	"lagc/exec/gpu"
)

// Segment is one sequence's tokens in a batched step: they continue the
// sequence held in KV slot Slot from its next position.
type Segment struct {
	Slot   int
	Tokens []int32
}

// Batcher runs forward steps over several sequences at once (continuous
// batching). A backend has a fixed number of sequence slots, each with its
// own KV caches (linear for full layers, a ring of `window` for sliding
// ones); a step is one forward pass over the rows of all its segments, so a
// decode step of B sequences reads the weights once. Which slot a row
// belongs to is backend state set by Step, not a graph input: the graph
// keeps its tokens/pos interface, and only attention reads the slot.
//
// Every row must come out exactly as it would in a step of its sequence
// alone: batching never changes a greedy result.
type Batcher interface {
	Slots() int
	MaxPos() int
	// SlotLen returns the positions slot holds (0 for a slot out of range).
	SlotLen(slot int) int
	// Step feeds every segment (at most one per slot) and returns the
	// logits [T*V] and argmax [T] of all T rows, segments in order.
	Step(segs []Segment) (logits []float32, next []int32, err error)
	// ResetSlot empties a slot for a new sequence.
	ResetSlot(slot int)
	// Rewind keeps a slot's first n positions (a prompt prefix it already
	// holds), or fails changing nothing where its caches cannot go back.
	Rewind(slot, n int) error
}

// LastRowBatcher is implemented by a Batcher that can run a step copying
// only each segment's last row of logits, the one a server samples from:
// last is [len(segs)*V], segment i's row at i*V; next [T] holds each
// segment's last row's argmax (a backend may leave a prompt segment's
// other rows 0). On the GPU a prompt chunk's logits are 4*V bytes a token
// (822 MB for 2048 tokens at Laguna's vocabulary) to copy to the host, and
// the GPU computes the steps after the last attention (the LM head above
// all) on each segment's last row alone: equal to Step's within rounding.
type LastRowBatcher interface {
	StepLast(segs []Segment) (last []float32, next []int32, err error)
}

// ArgmaxBatcher is implemented by a Batcher that can run a step copying no
// logits, only every row's argmax [T] (equal to Step's): what a step of
// greedy decode rows needs. On the GPU each row's logits are 4*V bytes to
// copy to the host (401 KB at Laguna's vocabulary, a step's whole batch of
// rows on every step), which a server decoding greedy sequences skips.
type ArgmaxBatcher interface {
	StepArgmax(segs []Segment) (next []int32, err error)
}

// Batch returns the model's batched backend, opened with Options.Slots
// sequence slots. It shares the executor with Backend (whose sequence is
// slot 0): use one or the other, not both at once.
func (m *Model) Batch() (Batcher, error) {
	if ex, ok := m.Backend.(*gpu.Executor); ok {
		return gpuBatch{ex}, nil
	}
	b, ok := m.Backend.(Batcher)
	if !ok {
		return nil, fmt.Errorf("the %s backend does not run batched steps yet", m.Device)
	}
	return b, nil
}

func (b cpuBackend) Slots() int { return b.ex.Slots() }

func (b cpuBackend) SlotLen(slot int) int {
	n, err := b.ex.SlotPos(slot)
	if err != nil {
		return 0
	}
	return n
}

func (b cpuBackend) Step(segs []Segment) ([]float32, []int32, error) {
	r, err := b.step(segs)
	if err != nil {
		return nil, nil, err
	}
	return r.Logits, r.Next, nil
}

func (b cpuBackend) step(segs []Segment) (*cpu.Result, error) {
	cs := make([]cpu.Segment, len(segs))
	for i, s := range segs {
		cs[i] = cpu.Segment{Slot: s.Slot, Tokens: s.Tokens}
	}
	return b.ex.Step(cs)
}

func (b cpuBackend) ResetSlot(slot int)       { b.ex.ResetSlot(slot) }
func (b cpuBackend) Rewind(slot, n int) error { return b.ex.Rewind(slot, n) }

// StepLast slices each segment's last row out of Step's logits: the CPU
// computes every row anyway, but the server then runs the GPU's path.
func (b cpuBackend) StepLast(segs []Segment) ([]float32, []int32, error) {
	r, err := b.step(segs)
	if err != nil {
		return nil, nil, err
	}
	last := make([]float32, 0, len(segs)*r.V)
	row := 0
	for _, sg := range segs {
		row += len(sg.Tokens)
		last = append(last, r.Logits[(row-1)*r.V:row*r.V]...)
	}
	return last, r.Next, nil
}
