package cpu

import (
	"fmt"

	"lagc/ir"
	"lagc/quant"
)

// Executor interprets an ir.Graph node by node with this package's kernels.
// It owns the KV caches (one per attention node's `layer` attribute), so
// consecutive Forward calls continue one sequence: a prefill of the prompt,
// then one call per decoded token.
type Executor struct {
	g        *ir.Graph
	order    []*ir.Node
	weights  map[*ir.Value]*Matrix  // what the nodes read, in stored types
	pool     bufPool                // activation buffers for reuse
	operands map[*ir.Node]*operands // each node's, kept across steps
	caches   map[int]*KVCache
	ropes    map[*ir.Node]*RopeTable
	lastUse  map[*ir.Value]int // index in order of a value's last reader
	maxPos   int
	next     int  // the next position to feed
	broken   bool // a step failed midway: the caches are inconsistent until Reset
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
// caches accepting positions below maxPos.
func NewExecutor(g *ir.Graph, ws WeightSource, maxPos int) (*Executor, error) {
	return NewExecutorWith(g, ws, maxPos, Options{})
}

// NewExecutorWith is NewExecutor with options.
func NewExecutorWith(g *ir.Graph, ws WeightSource, maxPos int, o Options) (*Executor, error) {
	if maxPos <= 0 {
		return nil, fmt.Errorf("cpu executor: context length must be positive, got %d", maxPos)
	}
	order, err := g.Order()
	if err != nil {
		return nil, err
	}
	e := &Executor{g: g, order: order, weights: map[*ir.Value]*Matrix{}, caches: map[int]*KVCache{},
		ropes: map[*ir.Node]*RopeTable{}, lastUse: map[*ir.Value]int{}, maxPos: maxPos, operands: map[*ir.Node]*operands{}}
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
	return e, nil
}

// prepare builds per-node state that does not change between steps.
func (e *Executor) prepare(n *ir.Node) error {
	switch n.Op {
	case "rope":
		d := n.Inputs[0].Type.Shape
		if len(d) != 3 || !d[2].IsConst() {
			return fmt.Errorf("rope input must be [T,n,d] with constant d, got %v", d)
		}
		tab, err := NewRopeTable(RopeParams{
			RotaryDim: n.AttrInt("rotary_dim"), Theta: n.AttrFloat("theta"), Type: n.AttrString("rope_type"),
			Factor: n.AttrFloat("factor"), OriginalContext: n.AttrInt("original_context"),
			BetaFast: n.AttrFloat("beta_fast"), BetaSlow: n.AttrFloat("beta_slow"),
			AttentionFactor: n.AttrFloat("attention_factor"),
		})
		if err != nil {
			return err
		}
		e.ropes[n] = tab
	case "attention":
		k := n.Inputs[1].Type.Shape
		if len(k) != 3 || !k[1].IsConst() || !k[2].IsConst() {
			return fmt.Errorf("attention keys must be [T,nkv,d] with constant nkv, d, got %v", k)
		}
		layer := n.AttrInt("layer")
		if _, dup := e.caches[layer]; dup {
			return fmt.Errorf("two attention nodes use KV cache %d", layer)
		}
		c, err := NewKVCache(k[1].N, k[2].N, n.AttrInt("window"), e.maxPos)
		if err != nil {
			return err
		}
		e.caches[layer] = c
	}
	return nil
}

// Pos returns the next position Forward expects (the tokens seen so far).
func (e *Executor) Pos() int { return e.next }

// MaxPos returns the context length the caches accept.
func (e *Executor) MaxPos() int { return e.maxPos }

// Reset empties the KV caches to start a new sequence.
func (e *Executor) Reset() {
	for _, c := range e.caches {
		c.Reset()
	}
	e.next = 0
	e.broken = false
}

// Forward runs the graph over tokens at positions Pos(), Pos()+1, ...,
// appending them to the KV caches.
func (e *Executor) Forward(tokens []int32) (*Result, error) {
	T := len(tokens)
	if T == 0 {
		return nil, fmt.Errorf("forward: no tokens")
	}
	if e.broken {
		return nil, fmt.Errorf("forward: an earlier step failed; Reset the executor to start a new sequence")
	}
	if e.next+T > e.maxPos {
		return nil, fmt.Errorf("forward: %d tokens at position %d exceed the context length %d", T, e.next, e.maxPos)
	}
	pos := make([]int32, T)
	for i := range pos {
		pos[i] = int32(e.next + i)
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
	for idx, n := range e.order {
		if err := e.run(n, env, f32, i32); err != nil {
			// Some layers may have appended this step's keys already.
			e.broken = true
			return nil, fmt.Errorf("%s: %w", n, err)
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
	e.next += T
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
