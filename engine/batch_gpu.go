package engine

import (
	"fmt"

	"lagc/exec/gpu"
)

// gpuBatch is the GPU executor as a Batcher of one sequence slot: the
// scheduler runs one request at a time on it and queues the others. A
// decode step over several sequences (one weight read for all) is not
// implemented on the GPU yet.
type gpuBatch struct{ ex *gpu.Executor }

func (b gpuBatch) Slots() int  { return 1 }
func (b gpuBatch) MaxPos() int { return b.ex.MaxPos() }

func (b gpuBatch) SlotLen(slot int) int {
	if slot != 0 {
		return 0
	}
	return b.ex.Pos()
}

func (b gpuBatch) Step(segs []Segment) ([]float32, []int32, error) {
	if len(segs) != 1 || segs[0].Slot != 0 {
		return nil, nil, fmt.Errorf("the GPU executor has one sequence slot: a step feeds slot 0 only, got %d segments", len(segs))
	}
	return b.ex.Forward(segs[0].Tokens)
}

func (b gpuBatch) ResetSlot(slot int) {
	if slot == 0 {
		b.ex.Reset()
	}
}

func (b gpuBatch) Rewind(slot, n int) error {
	if slot != 0 {
		return fmt.Errorf("the GPU executor has one sequence slot, not %d", slot)
	}
	return b.ex.Rewind(n)
}
