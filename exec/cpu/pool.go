package cpu

import (
	"lagc/exec/cpu/internal/vec"
	"lagc/ir"
)

// bufPool recycles activation buffers within and across steps, so a decode
// step allocates little beyond its outputs. A buffer goes back when the last
// reader of its value, and of every view of it (reshape outputs share their
// input's buffer), has run; buffers of graph outputs never go back (the
// caller keeps them).
type bufPool struct {
	free      map[int][][]float32 // by length
	releaseAt map[*ir.Value]bool  // the value whose last read frees its buffer
	tokens    int                 // T of the step the free buffers were sized for
}

// step starts a step of T tokens. Buffers are kept only across steps of
// one size (decode), so prompts of many lengths do not pile up buffers.
// It also reads GOMAXPROCS for the step's kernels.
func (p *bufPool) step(T int) {
	refreshProcs()
	if T != p.tokens {
		clear(p.free)
		p.tokens = T
	}
}

// plan works out, from the graph order and each value's last reader, which
// value's death frees each buffer.
func (p *bufPool) plan(g *ir.Graph, order []*ir.Node, lastUse map[*ir.Value]int) {
	p.free = map[int][][]float32{}
	p.releaseAt = map[*ir.Value]bool{}
	root := map[*ir.Value]*ir.Value{} // a view -> the value owning its buffer
	rootOf := func(v *ir.Value) *ir.Value {
		if r, ok := root[v]; ok {
			return r
		}
		return v
	}
	members := map[*ir.Value][]*ir.Value{}
	for _, n := range order {
		for _, v := range n.Outputs {
			r := v
			if n.Op == "reshape" {
				r = rootOf(n.Inputs[0])
				root[v] = r
			}
			members[r] = append(members[r], v)
		}
	}
	kept := map[*ir.Value]bool{}
	for _, o := range g.Outputs {
		kept[rootOf(o)] = true
	}
	for r, vs := range members {
		if kept[r] || r.Kind != ir.Activation || r.Type.DType == ir.I32 {
			continue
		}
		var last *ir.Value
		for _, v := range vs {
			u, read := lastUse[v]
			if !read {
				continue
			}
			if last == nil || u > lastUse[last] {
				last = v
			}
		}
		if last != nil {
			p.releaseAt[last] = true
		}
	}
}

// get returns a zeroed buffer of n floats.
func (p *bufPool) get(n int) []float32 {
	if bufs := p.free[n]; len(bufs) > 0 {
		b := bufs[len(bufs)-1]
		p.free[n] = bufs[:len(bufs)-1]
		clear(b)
		return b
	}
	return vec.AlignedFloats(n)
}

// release takes back the buffer of v, whose last reader has run, if no
// view of it is still to be read.
func (p *bufPool) release(v *ir.Value, buf []float32) {
	if p.releaseAt[v] && len(buf) > 0 {
		p.free[len(buf)] = append(p.free[len(buf)], buf)
	}
}
