package gpu

import (
	"fmt"

	"lagc/cuda"
	"lagc/lower"
)

// Sequence slots and batched steps (continuous batching). The plan's
// Seqs slots each own a full set of KV caches, KVSeqBytes apart; slot 0 is
// also the sequence of the single-sequence API (Forward, Pos, Reset).
//
// A step's one-token segments are decode rows: they run together as one
// batched decode step of a bucket's size (lower.Plan.AtBatch), its own
// CUDA graph per bucket once the bucket has run eagerly (the warm-up that
// compiles its kernels); each row's token, position and slot are uploaded
// before the replay, padding rows get slot -1; a step's lone decode row
// runs on the decode schedule instead (solo.go). Longer segments are
// prompt chunks: each runs the prefill schedule bound to its slot's caches.

// Segment is one sequence's tokens in a batched step: they continue the
// sequence in slot Slot from its next position.
type Segment struct {
	Slot   int
	Tokens []int32
}

type batchState struct {
	lens    []int // positions held by slots 1.. (slot 0: Executor.next)
	buckets []int
	progs   map[int]*program    // bucket -> batched decode program
	graphs  graphCache          // by bucket
	slotPre map[[3]int]*program // (slot >= 1, T, tail) -> prefill program bound to the slot's caches
	rows    []int32             // upload staging: tokens, pos, seq
}

func (b *batchState) init(p *lower.Plan) {
	b.lens = make([]int, p.SeqSlots())
	b.buckets = lower.BatchBuckets(p.SeqSlots(), p.Prefill.Tokens)
	b.progs = map[int]*program{}
	b.graphs = newGraphCache(0)
	b.slotPre = map[[3]int]*program{}
}

func (b *batchState) close() error { return b.graphs.close() }

// Seqs returns the number of sequence slots.
func (e *Executor) Seqs() int { return e.plan.SeqSlots() }

// SlotLen returns the positions slot holds (0 for a slot out of range).
func (e *Executor) SlotLen(slot int) int {
	switch {
	case slot == 0:
		return e.next
	case slot > 0 && slot < len(e.batch.lens):
		return e.batch.lens[slot]
	}
	return 0
}

func (e *Executor) setSlotLen(slot, n int) {
	if slot == 0 {
		e.next = n
		return
	}
	e.batch.lens[slot] = n
}

// ResetSlot empties a slot for a new sequence.
func (e *Executor) ResetSlot(slot int) {
	if slot == 0 {
		e.Reset()
		return
	}
	if slot > 0 && slot < len(e.batch.lens) {
		e.batch.lens[slot] = 0
	}
}

// RewindSlot keeps a slot's first n positions (Rewind for any slot).
func (e *Executor) RewindSlot(slot, n int) error {
	if slot == 0 {
		return e.Rewind(n)
	}
	if slot < 0 || slot >= len(e.batch.lens) {
		return fmt.Errorf("gpu: rewind: slot %d of %d", slot, e.Seqs())
	}
	have := e.batch.lens[slot]
	if n < 0 || n > have {
		return fmt.Errorf("gpu: rewind slot %d to %d: it holds %d positions", slot, n, have)
	}
	if n == have {
		return nil
	}
	for _, kv := range e.plan.KV {
		if kv.Window > 0 && have > kv.Slots {
			return fmt.Errorf("gpu: rewind slot %d to %d: the sliding-window ring of %d positions has wrapped at %d", slot, n, kv.Slots, have)
		}
	}
	e.batch.lens[slot] = n
	return nil
}

// Step feeds every segment (at most one per slot) and returns the logits
// [T*V] and argmax [T] of all T rows, segments in order.
func (e *Executor) Step(segs []Segment) ([]float32, []int32, error) { return e.step(segs, logitsAll) }

// StepLast is Step computing and copying only each segment's last row of
// logits: [len(segs)*V], segment i's row at i*V, and argmax [T] of which
// each segment's last row is set, a prompt chunk's other rows 0
// (engine.LastRowBatcher). A server's prompt chunk of 2048 tokens has 822
// MB of f32 logits at Laguna's vocabulary, of which it samples one row; so
// after the last attention a prompt segment runs its tail (the last
// layer's MLP or experts, the final norm, the LM head) on its last row
// alone (lower.AtTail, as lagc run's prefill): that row equals Step's
// within rounding, not bit for bit, and depends on its sequence alone.
func (e *Executor) StepLast(segs []Segment) ([]float32, []int32, error) {
	return e.step(segs, logitsLast)
}

// StepArgmax is Step without copying the logits to the host.
func (e *Executor) StepArgmax(segs []Segment) ([]int32, error) {
	_, next, err := e.step(segs, logitsNone)
	return next, err
}

// step runs segs and returns the logits asked for: every row's [T*V], each
// segment's last [len(segs)*V], or none; and every row's argmax.
func (e *Executor) step(segs []Segment, rows logitRows) ([]float32, []int32, error) {
	T, err := e.checkSegs(segs)
	if err != nil {
		return nil, nil, err
	}
	if e.soloGreedy(segs, rows) {
		next, _, err := e.greedyStep(segs[0].Tokens[0])
		if err != nil {
			return nil, nil, fmt.Errorf("gpu: decode step of slot 0: %w", err)
		}
		e.solo.steps++
		return nil, []int32{next}, nil
	}
	e.settle()
	// Batched steps overwrite the device's token and position: slot 0's
	// next decode step uploads them again.
	e.devState = false
	var logits []float32
	switch rows {
	case logitsAll:
		logits = make([]float32, T*e.V)
	case logitsLast:
		logits = make([]float32, len(segs)*e.V)
	}
	next := make([]int32, T)
	var ds []Segment      // the decode segments, in order
	var dec, decOut []int // their rows in next, and in logits
	row := 0
	for i, sg := range segs {
		out := row // the segment's first row in logits
		if rows == logitsLast {
			out = i
		}
		if len(sg.Tokens) == 1 {
			ds = append(ds, sg)
			dec = append(dec, row)
			decOut = append(decOut, out)
			row++
			continue
		}
		var lg []float32
		if logits != nil {
			lg = logits[out*e.V:]
		}
		if err := e.prefillSlot(sg.Slot, sg.Tokens, rows, lg, next[row:]); err != nil {
			return nil, nil, fmt.Errorf("gpu: step: slot %d: %w", sg.Slot, err)
		}
		row += len(sg.Tokens)
	}
	if len(ds) == 1 && !e.solo.off {
		if err := e.decodeSolo(ds[0], dec[0], decOut[0], logits, next); err != nil {
			return nil, nil, fmt.Errorf("gpu: decode step of slot %d: %w", ds[0].Slot, err)
		}
		return logits, next, nil
	}
	maxB := e.batch.buckets[len(e.batch.buckets)-1]
	for s := 0; s < len(ds); s += maxB {
		n := min(maxB, len(ds)-s)
		if err := e.decodeBatch(ds[s:s+n], dec[s:s+n], decOut[s:s+n], logits, next); err != nil {
			return nil, nil, fmt.Errorf("gpu: batched decode step: %w", err)
		}
	}
	return logits, next, nil
}

// checkSegs checks a step's segments (a slot each, tokens in the
// vocabulary and the context) and returns their tokens.
func (e *Executor) checkSegs(segs []Segment) (int, error) {
	T := 0
	for i, sg := range segs {
		if sg.Slot < 0 || sg.Slot >= e.Seqs() {
			return 0, fmt.Errorf("gpu: step: segment %d is for slot %d of %d", i, sg.Slot, e.Seqs())
		}
		for _, o := range segs[:i] { // at most a segment a slot: no map a step
			if o.Slot == sg.Slot {
				return 0, fmt.Errorf("gpu: step: two segments for slot %d", sg.Slot)
			}
		}
		if len(sg.Tokens) == 0 {
			return 0, fmt.Errorf("gpu: step: segment %d (slot %d) has no tokens", i, sg.Slot)
		}
		if at := e.SlotLen(sg.Slot); at+len(sg.Tokens) > e.plan.MaxContext {
			return 0, fmt.Errorf("gpu: step: %d tokens at position %d of slot %d exceed the context length %d", len(sg.Tokens), at, sg.Slot, e.plan.MaxContext)
		}
		for j, id := range sg.Tokens {
			if id < 0 || int(id) >= e.V {
				return 0, fmt.Errorf("gpu: step: token %d at index %d of slot %d is outside the vocabulary [0, %d)", id, j, sg.Slot, e.V)
			}
		}
		T += len(sg.Tokens)
	}
	if T == 0 {
		return 0, fmt.Errorf("gpu: step: no tokens")
	}
	return T, nil
}

// prefillSlot feeds a prompt chunk (or chunks) to slot on the prefill
// schedule bound to the slot's caches, writing the rows of logits asked
// for (all from lg[0], or the last alone at lg[0]) and the argmax of the
// rows computed to lg and nx: every row's, or with the last row's logits
// alone, the last row's (its tail runs on that row; earlier chunks skip
// theirs).
func (e *Executor) prefillSlot(slot int, tokens []int32, rows logitRows, lg []float32, nx []int32) error {
	chunk := e.plan.Prefill.Tokens
	for s := 0; s < len(tokens); s += chunk {
		part := tokens[s:min(s+chunk, len(tokens))]
		T, at := len(part), e.SlotLen(slot)
		last := s+T == len(tokens)
		tail := chunkTail(rows == logitsLast, last)
		if err := e.upload(part, at); err != nil {
			return err
		}
		p, err := e.slotPrefill(slot, T, tail)
		if err != nil {
			return err
		}
		if err := e.run(p); err != nil {
			return fmt.Errorf("prefill at position %d: %w", at, err)
		}
		off := s * e.V
		if rows == logitsLast {
			off = 0
		}
		l, n, err := e.readOut(p, T, rows.ofChunk(last))
		if err != nil {
			return err
		}
		if l != nil {
			copy(lg[off:], l)
		}
		copy(nx[s+T-len(n):], n) // a tail on the last row: its argmax alone
		if e.prof != nil {
			if err := e.prof.collect(lower.Prefill); err != nil {
				return err
			}
		}
		e.setSlotLen(slot, at+T)
	}
	return nil
}

// upload writes a step's tokens and their positions, consecutive from at.
func (e *Executor) upload(tokens []int32, at int) error {
	pos := make([]int32, len(tokens))
	for i := range pos {
		pos[i] = int32(at + i)
	}
	if err := cuda.Upload(e.q, e.tokens, tokens); err != nil {
		return err
	}
	return cuda.Upload(e.q, e.pos, pos)
}

// slotPrefill is the prefill program of T tokens bound to slot's caches,
// its tail on every row, the last or none (lower.AtTail).
func (e *Executor) slotPrefill(slot, T int, tail lower.Tail) (*program, error) {
	if slot == 0 {
		return e.prefillTailAt(T, tail)
	}
	key := [3]int{slot, T, int(tail)}
	if p := e.batch.slotPre[key]; p != nil {
		return p, nil
	}
	p, err := e.prefillProgram(slot, T, tail)
	if err != nil {
		return nil, err
	}
	// A slot's full chunks recur; short chunks are each prompt's last.
	if len(e.batch.slotPre) >= 4*len(e.batch.lens) {
		clear(e.batch.slotPre)
	}
	e.batch.slotPre[key] = p
	return p, nil
}

// batchProgram is the batched decode program of bucket b.
func (e *Executor) batchProgram(b int) (*program, error) {
	if p := e.batch.progs[b]; p != nil {
		return p, nil
	}
	launches, err := e.plan.AtBatch(b)
	if err != nil {
		return nil, err
	}
	p, err := e.bind(e.plan.Prefill, b, launches)
	if err != nil {
		return nil, fmt.Errorf("batched decode of %d rows: %w", b, err)
	}
	e.batch.progs[b] = p
	return p, nil
}

// decodeBatch runs one decode row for each of segs (one token each; rows
// are their indices in the step's argmax, out in its logits) in the
// smallest bucket that holds them.
func (e *Executor) decodeBatch(segs []Segment, rows, out []int, logits []float32, next []int32) error {
	n := len(segs)
	b := e.plan.Bucket(n)
	// tokens, pos and seq lie one after the other, `stride` words apart
	// (allocate): one copy writes all three.
	stride := int(e.pos-e.tokens) / 4
	if cap(e.batch.rows) < 2*stride+b {
		e.batch.rows = make([]int32, 2*stride+b)
	}
	st := e.batch.rows[:2*stride+b]
	tok, pos, seq := st[:b], st[stride:stride+b], st[2*stride:]
	for i := range b {
		if i < n {
			tok[i], pos[i], seq[i] = segs[i].Tokens[0], int32(e.SlotLen(segs[i].Slot)), int32(segs[i].Slot)
		} else {
			seq[i] = -1 // padding: no cache read or written
		}
	}
	if e.seq-e.pos != e.pos-e.tokens {
		return fmt.Errorf("the step's token, position and slot arrays are not evenly spaced")
	}
	if err := cuda.Upload(e.q, e.tokens, st); err != nil {
		return err
	}
	p, err := e.batchProgram(b)
	if err != nil {
		return err
	}
	if err := e.launchBatch(p, b); err != nil {
		return err
	}
	lg, nx, err := e.readOut(p, n, rowsIf(logits != nil))
	if err != nil {
		return err
	}
	for i, r := range rows {
		if logits != nil {
			copy(logits[out[i]*e.V:(out[i]+1)*e.V], lg[i*e.V:(i+1)*e.V])
		}
		next[r] = nx[i]
	}
	if e.prof != nil {
		if err := e.prof.collect(lower.Prefill); err != nil {
			return err
		}
	}
	for _, sg := range segs {
		e.setSlotLen(sg.Slot, e.SlotLen(sg.Slot)+1)
	}
	return nil
}

// launchBatch queues a batched decode step of bucket b: eagerly the first
// time (compiling its kernels) and in eager mode, else a replay of the
// bucket's graph, captured on its second step.
func (e *Executor) launchBatch(p *program, b int) error {
	return e.launchCached(&e.batch.graphs, b, p, "the batched decode step of %d rows")
}

// BatchGraphs reports the buckets whose batched decode replays a graph.
func (e *Executor) BatchGraphs() []int {
	var out []int
	for _, b := range e.batch.buckets {
		if e.batch.graphs.has(b) {
			out = append(out, b)
		}
	}
	return out
}
