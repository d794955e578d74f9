package cpu

import (
	"fmt"

	"lagc/exec/routes"
	"lagc/ir"
	"lagc/prep"
	"lagc/quant"
)

// Executor interprets an ir.Graph node by node with this package's kernels.
// It owns the KV caches of a fixed number of sequence slots (each slot has
// one cache per attention node's `layer` attribute), so consecutive Forward
// calls continue one sequence: a prefill of the prompt, then one call per
// decoded token. Step runs several slots' sequences in one forward pass.
//
// Which sequence a row belongs to is executor state, not a graph input:
// every op but attention treats rows independently, and attention already
// reads executor state (the caches), so Step tells it which rows go with
// which slot and the graph keeps its tokens/pos interface.
type Executor struct {
	g        *ir.Graph
	order    []*ir.Node
	weights  map[*ir.Value]*Matrix  // what the nodes read, in stored types
	pool     bufPool                // activation buffers for reuse
	operands map[*ir.Node]*operands // each node's, kept across steps
	kv       map[int]kvShape        // attention layer -> cache shape
	slots    []*seqSlot
	ropes    map[*ir.Node]*prep.RopeTable
	lastUse  map[*ir.Value]int // index in order of a value's last reader
	maxPos   int
	step     []Segment // the segments of the step running now

	checkNonFinite bool           // SetCheckFinite
	census         *routes.Census // CensusRoutes
}

// kvShape is what a layer's cache holds.
type kvShape struct{ nkv, headDim, window int }

// seqSlot is one sequence's state: its caches and next position.
type seqSlot struct {
	caches map[int]*KVCache
	next   int  // the next position to feed
	broken bool // a step failed midway: the caches are inconsistent until reset
}

// Segment is one sequence's part of a batched step: Tokens continue the
// sequence in slot Slot from its next position.
type Segment struct {
	Slot   int
	Tokens []int32
}

// Result is what one Forward step computed.
type Result struct {
	Logits []float32 // [T, V], row-major
	Next   []int32   // [T], argmax of each row
	T, V   int
}

// LastLogits returns the logits of the step's last token.
func (r *Result) LastLogits() []float32 { return r.Logits[(r.T-1)*r.V:] }

// NewExecutor prepares g for execution: orders its nodes, reads its weights
// from ws (deriving those with a load-time transform) and makes empty KV
// caches accepting positions below maxPos, for one sequence.
func NewExecutor(g *ir.Graph, ws WeightSource, maxPos int) (*Executor, error) {
	return NewExecutorWith(g, ws, maxPos, Options{})
}

// NewBatchExecutor is NewExecutor with slots sequence slots for Step. A
// cache takes memory only as its sequence's positions arrive.
func NewBatchExecutor(g *ir.Graph, ws WeightSource, maxPos, slots int) (*Executor, error) {
	return NewExecutorWith(g, ws, maxPos, Options{Slots: slots})
}

// NewExecutorWith is NewExecutor with options.
func NewExecutorWith(g *ir.Graph, ws WeightSource, maxPos int, o Options) (*Executor, error) {
	slots := o.Slots
	if slots == 0 {
		slots = 1
	}
	if maxPos <= 0 {
		return nil, fmt.Errorf("cpu executor: context length must be positive, got %d", maxPos)
	}
	if slots <= 0 {
		return nil, fmt.Errorf("cpu executor: the number of sequence slots must be positive, got %d", slots)
	}
	order, err := g.Order()
	if err != nil {
		return nil, err
	}
	e := &Executor{g: g, order: order, weights: map[*ir.Value]*Matrix{}, kv: map[int]kvShape{},
		ropes: map[*ir.Node]*prep.RopeTable{}, lastUse: map[*ir.Value]int{}, maxPos: maxPos,
		operands: map[*ir.Node]*operands{}}
	if err := e.loadWeights(ws, o); err != nil {
		return nil, err
	}
	for i, n := range order {
		for _, v := range n.Inputs {
			e.lastUse[v] = i
		}
		if err := e.prepare(n); err != nil {
			return nil, fmt.Errorf("%s: %w", n, err)
		}
	}
	e.pool.plan(g, order, e.lastUse)
	for range slots {
		s := &seqSlot{caches: map[int]*KVCache{}}
		for layer, sh := range e.kv {
			c, err := NewKVCache(sh.nkv, sh.headDim, sh.window, maxPos)
			if err != nil {
				return nil, fmt.Errorf("KV cache of layer %d: %w", layer, err)
			}
			s.caches[layer] = c
		}
		e.slots = append(e.slots, s)
	}
	return e, nil
}

// prepare builds per-node state that does not change between steps, for
// the ops that have some.
func (e *Executor) prepare(n *ir.Node) error {
	if p, ok := preparers[n.Op]; ok {
		return p(e, n)
	}
	return nil
}

var preparers = map[string]func(e *Executor, n *ir.Node) error{
	// rope and norm_rope: the rotary table of the node's parameters.
	"rope":      prepareRoPE,
	"norm_rope": prepareRoPE,
	// attention and attention_gate: the layer's KV cache.
	"attention":      prepareAttention,
	"attention_gate": prepareAttention,
}

// prepareAttention makes the KV cache of an attention node's layer.
func prepareAttention(e *Executor, n *ir.Node) error {
	k := n.Inputs[1].Type.Shape
	if len(k) != 3 || !k[1].IsConst() || !k[2].IsConst() {
		return fmt.Errorf("attention keys must be [T,nkv,d] with constant nkv, d, got %v", k)
	}
	layer := n.AttrInt("layer")
	if _, dup := e.kv[layer]; dup {
		return fmt.Errorf("two attention nodes use KV cache %d", layer)
	}
	// Checked here so that a bad shape fails at load time.
	if _, err := NewKVCache(k[1].N, k[2].N, n.AttrInt("window"), e.maxPos); err != nil {
		return err
	}
	e.kv[layer] = kvShape{k[1].N, k[2].N, n.AttrInt("window")}
	return nil
}

// Pos returns the next position Forward expects (the tokens seen so far).
func (e *Executor) Pos() int { return e.slots[0].next }

// MaxPos returns the context length the caches accept.
func (e *Executor) MaxPos() int { return e.maxPos }

// Slots returns the number of sequence slots.
func (e *Executor) Slots() int { return len(e.slots) }

// SlotPos returns the next position of slot's sequence (its length).
func (e *Executor) SlotPos(slot int) (int, error) {
	s, err := e.slot(slot)
	if err != nil {
		return 0, err
	}
	return s.next, nil
}

func (e *Executor) slot(i int) (*seqSlot, error) {
	if i < 0 || i >= len(e.slots) {
		return nil, fmt.Errorf("sequence slot %d is outside [0, %d)", i, len(e.slots))
	}
	return e.slots[i], nil
}

// Reset empties every slot's KV caches: Forward starts a new sequence.
func (e *Executor) Reset() {
	for i := range e.slots {
		e.ResetSlot(i)
	}
}

// ResetSlot empties one slot's caches (an index out of range is ignored).
func (e *Executor) ResetSlot(slot int) {
	s, err := e.slot(slot)
	if err != nil {
		return
	}
	for _, c := range s.caches {
		c.Reset()
	}
	s.next, s.broken = 0, false
}

// Rewind keeps the first n positions of slot's sequence, so that the next
// step continues from position n (reusing the KV of a shared prompt
// prefix). It fails, changing nothing, where a sliding-window cache has
// already overwritten what position n needs (see KVCache.Truncate).
func (e *Executor) Rewind(slot, n int) error {
	s, err := e.slot(slot)
	if err != nil {
		return err
	}
	if s.broken {
		return fmt.Errorf("sequence slot %d: an earlier step failed; reset the slot", slot)
	}
	if n < 0 || n > s.next {
		return fmt.Errorf("sequence slot %d holds %d positions: cannot rewind to %d", slot, s.next, n)
	}
	for _, c := range s.caches { // check all before changing any
		if err := c.canTruncate(n); err != nil {
			return fmt.Errorf("sequence slot %d: %w", slot, err)
		}
	}
	for _, c := range s.caches {
		c.n = n
	}
	s.next = n
	return nil
}

// Forward runs the graph over tokens at positions Pos(), Pos()+1, ... of
// slot 0, appending them to its KV caches.
func (e *Executor) Forward(tokens []int32) (*Result, error) {
	if len(tokens) == 0 {
		return nil, fmt.Errorf("forward: no tokens")
	}
	return e.Step([]Segment{{Slot: 0, Tokens: tokens}})
}

// Step runs one forward pass over several sequences: the rows of the result
// are the segments' tokens in order. Every row is computed exactly as it
// would be in a step of its sequence alone.
func (e *Executor) Step(segs []Segment) (*Result, error) {
	if len(segs) == 0 {
		return nil, fmt.Errorf("step: no segments")
	}
	T := 0
	seen := map[int]bool{}
	for i, sg := range segs {
		s, err := e.slot(sg.Slot)
		if err != nil {
			return nil, fmt.Errorf("step: segment %d: %w", i, err)
		}
		switch {
		case seen[sg.Slot]:
			return nil, fmt.Errorf("step: segments for sequence slot %d appear twice", sg.Slot)
		case len(sg.Tokens) == 0:
			return nil, fmt.Errorf("step: segment %d (slot %d) has no tokens", i, sg.Slot)
		case s.broken:
			return nil, fmt.Errorf("step: sequence slot %d: an earlier step failed; Reset the executor to start a new sequence", sg.Slot)
		case s.next+len(sg.Tokens) > e.maxPos:
			return nil, fmt.Errorf("step: %d tokens at position %d exceed the context length %d", len(sg.Tokens), s.next, e.maxPos)
		}
		seen[sg.Slot] = true
		T += len(sg.Tokens)
	}
	tokens := make([]int32, 0, T)
	pos := make([]int32, 0, T)
	for _, sg := range segs {
		tokens = append(tokens, sg.Tokens...)
		for i := range sg.Tokens {
			pos = append(pos, int32(e.slots[sg.Slot].next+i))
		}
	}
	env := e.g.Env(T)
	e.pool.step(T)
	f32 := map[*ir.Value][]float32{}
	i32 := map[*ir.Value][]int32{}
	for _, in := range e.g.Inputs {
		switch in.Name {
		case "tokens":
			i32[in] = tokens
		case "pos":
			i32[in] = pos
		default:
			return nil, fmt.Errorf("forward: graph input %s is not tokens or pos", in.Name)
		}
	}
	for w, m := range e.weights {
		if m.Type == quant.F32 {
			f32[w] = m.F32
		}
	}
	outputs := map[*ir.Value]bool{}
	for _, o := range e.g.Outputs {
		outputs[o] = true
	}
	e.step = segs
	defer func() { e.step = nil }()
	for idx, n := range e.order {
		if err := e.run(n, env, f32, i32); err != nil {
			// Some layers may have appended this step's keys already.
			for _, sg := range segs {
				e.slots[sg.Slot].broken = true
			}
			return nil, fmt.Errorf("%s: %w", n, err)
		}
		if e.census != nil && n.Op == "router_topk" && len(n.Outputs) > 1 {
			if layer, ok := ir.LayerOf(n.Outputs[1].Name); ok {
				e.census.Add(layer, i32[n.Outputs[1]])
			}
		}
		if e.checkNonFinite {
			if err := e.checkFinite(n, f32); err != nil {
				for _, sg := range segs {
					e.slots[sg.Slot].broken = true
				}
				return nil, err
			}
		}
		// Drop activations nobody reads any more.
		for _, v := range n.Inputs {
			if v.Kind == ir.Activation && e.lastUse[v] == idx && !outputs[v] {
				e.pool.release(v, f32[v])
				delete(f32, v)
				delete(i32, v)
			}
		}
	}
	for _, sg := range segs {
		e.slots[sg.Slot].next += len(sg.Tokens)
	}
	res := &Result{T: T}
	for _, o := range e.g.Outputs {
		switch o.Name {
		case "logits":
			res.Logits = f32[o]
			res.V = len(res.Logits) / T
		case "next":
			res.Next = i32[o]
		}
	}
	if res.Logits == nil {
		return nil, fmt.Errorf("forward: graph has no logits output")
	}
	return res, nil
}

// attnSeqs returns the step's sequences with their caches of layer.
func (e *Executor) attnSeqs(layer int) []AttnSeq {
	seqs := make([]AttnSeq, len(e.step))
	for i, sg := range e.step {
		seqs[i] = AttnSeq{Rows: len(sg.Tokens), Cache: e.slots[sg.Slot].caches[layer]}
	}
	return seqs
}

// prepareRoPE makes the rotary table of a rope or norm_rope node.
func prepareRoPE(e *Executor, n *ir.Node) error {
	d := n.Inputs[0].Type.Shape
	if len(d) != 3 || !d[2].IsConst() {
		return fmt.Errorf("rope input must be [T,n,d] with constant d, got %v", d)
	}
	tab, err := prep.NewRopeTable(prep.RopeParams{
		RotaryDim: n.AttrInt("rotary_dim"), Theta: n.AttrFloat("theta"), Type: n.AttrString("rope_type"),
		Factor: n.AttrFloat("factor"), OriginalContext: n.AttrInt("original_context"),
		BetaFast: n.AttrFloat("beta_fast"), BetaSlow: n.AttrFloat("beta_slow"),
		AttentionFactor: n.AttrFloat("attention_factor"),
	})
	if err != nil {
		return err
	}
	e.ropes[n] = tab
	return nil
}

// CensusRoutes runs tokens from position 0 and returns how every MoE
// layer's router spread them over its experts (routes.Layer), in layer
// order; the sequence is reset afterwards. For benchmark reports (lagc
// bench --device cpu), as gpu's CensusRoutes.
func (e *Executor) CensusRoutes(tokens []int32) ([]routes.Layer, error) {
	return routes.Take(func(c *routes.Census) { e.census = c }, e.Reset, func() error {
		_, err := e.Forward(tokens)
		return err
	})
}
