package engine

import "lagc/exec/gpu"

// gpuBatch is the GPU executor as a Batcher: its sequence slots
// (Options.Slots) each hold KV caches; a step's decode rows run as one
// batched decode step (a CUDA graph per batch-size bucket), its prompt
// chunks on the prefill schedule bound to their slots (exec/gpu/batch.go).
type gpuBatch struct{ ex *gpu.Executor }

func (b gpuBatch) Slots() int           { return b.ex.Seqs() }
func (b gpuBatch) MaxPos() int          { return b.ex.MaxPos() }
func (b gpuBatch) SlotLen(slot int) int { return b.ex.SlotLen(slot) }

func (b gpuBatch) Step(segs []Segment) ([]float32, []int32, error) { return b.ex.Step(gpuSegs(segs)) }

func (b gpuBatch) StepLast(segs []Segment) ([]float32, []int32, error) {
	return b.ex.StepLast(gpuSegs(segs))
}

func (b gpuBatch) StepArgmax(segs []Segment) ([]int32, error) { return b.ex.StepArgmax(gpuSegs(segs)) }

func gpuSegs(segs []Segment) []gpu.Segment {
	gs := make([]gpu.Segment, len(segs))
	for i, s := range segs {
		gs[i] = gpu.Segment{Slot: s.Slot, Tokens: s.Tokens}
	}
	return gs
}

func (b gpuBatch) ResetSlot(slot int)       { b.ex.ResetSlot(slot) }
func (b gpuBatch) Rewind(slot, n int) error { return b.ex.RewindSlot(slot, n) }
