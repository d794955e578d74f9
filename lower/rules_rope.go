package lower

import "fmt"

// Rules of rope and norm_rope: one qk_norm_rope launch each (norm_rope
// passes its norm weight and eps). Two norm_rope steps in a row whose heads
// lie back to back in one token row (a decode step's q and k, which lower
// places in place in the row their matmul_split writes) share one launch:
// the first step launches both heads' groups (NQ and NK with WQ and WK)
// and the second launches nothing.

func init() {
	defRule("rope", rule{launches: ropeLaunches})
	defRule("norm_rope", rule{launches: ropeLaunches, f32Inputs: []int{1}})
}

func ropeLaunches(c *stepCtx) ([]Launch, error) {
	a, err := ropeArgs(c)
	if err != nil {
		return nil, err
	}
	if c.st.Op != "norm_rope" || c.T != 1 {
		return one(NormRoPE(a))
	}
	i := c.stepIndex()
	if i > 0 && c.pairsWith(i-1) {
		return nil, nil // launched by the previous step
	}
	if c.pairsWith(i) {
		next, err := c.p.newCtx(c.s, &c.s.Steps[i+1], c.T)
		if err != nil {
			return nil, err
		}
		b, err := ropeArgs(next)
		if err != nil {
			return nil, err
		}
		a.NK, a.WK, a.LD = b.NQ, b.WQ, (a.NQ+b.NQ)*a.D
	}
	return one(NormRoPE(a))
}

// ropeArgs are the arguments of a rope or norm_rope step's own launch.
func ropeArgs(c *stepCtx) (NormRoPEArgs, error) {
	st := c.st
	tab, err := c.p.ropeFor(st)
	if err != nil {
		return NormRoPEArgs{}, err
	}
	if err := same(st.Op, st.In[0].DType, st.Out[0].DType); err != nil {
		return NormRoPEArgs{}, err
	}
	d := st.In[0].Dims(c.T)
	if len(d) != 3 {
		return NormRoPEArgs{}, fmt.Errorf("%s input must be [T,n,d], is %v", st.Op, d)
	}
	a := NormRoPEArgs{DType: st.Out[0].DType, Out: c.out[0], X: c.in[0], LD: d[1] * d[2], T: d[0], NQ: d[1], D: d[2],
		Pos: c.in[1], Table: tab, SMs: c.p.SMs}
	if st.Op == "norm_rope" {
		if st.In[1].DType != "f32" {
			return NormRoPEArgs{}, fmt.Errorf("norm weight %s must be f32 on the device, is %s", st.In[1].Value, st.In[1].DType)
		}
		a.WQ, a.Eps, a.Pos = c.in[1], float32(st.Float("eps")), c.in[2]
	}
	return a, nil
}

// stepIndex is the index of c's step in its schedule (-1 if it is not one
// of the schedule's steps).
func (c *stepCtx) stepIndex() int {
	for i := range c.s.Steps {
		if &c.s.Steps[i] == c.st {
			return i
		}
	}
	return -1
}

// pairsWith reports whether steps i and i+1 of c's schedule at c.T = 1
// tokens run as one qk_norm_rope launch: both norm_rope, step i first in
// its run of norm_ropes (so a run pairs the same way from either step),
// with the same dtype, head width, rope table, eps and positions; step
// i+1's heads follow step i's in the input row and in the output row; and
// the output row is the input row itself (in place, each head read and
// written by one warp) or disjoint from it. Nothing runs between two
// adjacent steps, so launching step i+1's heads early reads and writes
// what it would have.
func (c *stepCtx) pairsWith(i int) bool {
	s := c.s
	if i < 0 || i+1 >= len(s.Steps) || c.T != 1 {
		return false
	}
	if s.Steps[i].Op != "norm_rope" || s.Steps[i+1].Op != "norm_rope" || (i > 0 && s.Steps[i-1].Op == "norm_rope") {
		return false
	}
	var args [2]NormRoPEArgs
	for k := range args {
		sc, err := c.p.newCtx(s, &s.Steps[i+k], 1)
		if err != nil {
			return false
		}
		if args[k], err = ropeArgs(sc); err != nil {
			return false
		}
	}
	a, b := args[0], args[1]
	if a.DType != b.DType || a.D != b.D || a.Table != b.Table || a.Eps != b.Eps || a.Pos != b.Pos {
		return false
	}
	qBytes := int64(a.NQ*a.D) * int64(dtypeSize(a.DType))
	if b.X != a.X.At(qBytes) || b.Out != a.Out.At(qBytes) {
		return false
	}
	row := qBytes + int64(b.NQ*b.D)*int64(dtypeSize(a.DType))
	disjoint := a.Out.Base != a.X.Base || a.Out.Offset+row <= a.X.Offset || a.X.Offset+row <= a.Out.Offset
	return a.Out == a.X || disjoint
}
