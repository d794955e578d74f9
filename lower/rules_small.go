package lower

import "fmt"

// Rules of the ops with one kernel each, and of the copies (split, concat,
// a reshape of a weight). docs/CONTRACTS.md defines what each op computes.

func init() {
	// A block-quantised table stays so (the file's Q4_K_M token_embd: 165
	// MiB, 588 in bf16): qembedding dequantises the rows it reads.
	defRule("embedding", rule{launches: func(c *stepCtx) ([]Launch, error) {
		st := c.st
		tab := st.In[1].Dims(0)
		if len(tab) != 2 {
			return nil, fmt.Errorf("embedding table must be [V,H], is %v", tab)
		}
		if t, ok := QuantType(st.In[1].DType); ok {
			return one(QEmbedding(t, st.Out[0].DType, c.out[0], c.in[0], c.in[1], c.T, tab[0], tab[1]))
		}
		if err := same("embedding table and output", st.In[1].DType, st.Out[0].DType); err != nil {
			return nil, err
		}
		return one(Embedding(st.Out[0].DType, c.out[0], c.in[0], c.in[1], c.T, tab[0], tab[1]))
	}, quantInputs: []int{1}})
	defRule("rms_norm", rule{launches: func(c *stepCtx) ([]Launch, error) {
		st := c.st
		if st.In[1].DType != "f32" {
			return nil, fmt.Errorf("norm weight %s must be f32 on the device, is %s", st.In[1].Value, st.In[1].DType)
		}
		return one(RMSNorm(st.In[0].DType, st.Out[0].DType, c.out[0], c.in[0], c.in[1], c.rows(st.In[0]), st.In[0].Last(c.T), float32(st.Float("eps"))))
	}, f32Inputs: []int{1}, counters: func(c *stepCtx) (int64, error) {
		// A norm of one row may run in the GEMV before it (fuseGEMVNorm).
		if c.rows(c.st.In[0]) == 1 {
			return GEMVNormCounter, nil
		}
		return 0, nil
	}})
	defRule("softplus_gate", rule{launches: func(c *stepCtx) ([]Launch, error) {
		st := c.st
		if err := same("softplus_gate", st.In[0].DType, st.In[1].DType, st.Out[0].DType); err != nil {
			return nil, err
		}
		x := st.In[0].Dims(c.T)
		if len(x) != 3 {
			return nil, fmt.Errorf("x must be [T,nh,d], is %v", x)
		}
		return one(SoftplusGate(st.Out[0].DType, c.out[0], c.in[0], c.in[1], x[0], x[1], x[2], st.In[1].Last(c.T), 0))
	}})
	for _, op := range []string{"silu", "mul", "add"} {
		defRule(op, rule{launches: func(c *stepCtx) ([]Launch, error) {
			st := c.st
			dts := []string{st.Out[0].DType}
			for _, o := range st.In {
				dts = append(dts, o.DType)
			}
			if err := same(op, dts...); err != nil {
				return nil, err
			}
			return one(Elementwise(op, st.Out[0].DType, st.Out[0].Elems(c.T), append(append([]Ptr(nil), c.in...), c.out[0])...))
		}})
	}
	defRule("router_topk", rule{launches: func(c *stepCtx) ([]Launch, error) {
		st := c.st
		if st.In[1].DType != "f32" || st.Out[0].DType != "f32" {
			return nil, fmt.Errorf("router bias and weights must be f32")
		}
		return one(RouterTopK(st.In[0].DType, c.out[0], c.out[1], c.in[0], c.in[1], c.rows(st.In[0]), st.In[0].Last(c.T),
			st.Int("top_k"), float32(st.Float("softcap")), float32(st.Float("routed_scaling"))))
	}, counters: routerCounters, f32Inputs: []int{0, 1}, f32Outputs: true, outputs: 2})
	defRule("argmax", rule{launches: func(c *stepCtx) ([]Launch, error) {
		st := c.st
		var keep, pos Ptr
		if c.s.Class == Decode && !c.batch && c.T == 1 && st.In[0].DType == "f32" {
			keep, pos = Ptr{BaseKept, 0}, Ptr{BasePos, 0} // the row stays for the host (BaseKept)
		}
		return ArgMaxKeep(st.In[0].DType, c.out[0], c.in[0], Ptr{BaseWorkspace, 0}, c.rows(st.In[0]), st.In[0].Last(c.T), c.p.SMs, keep, pos)
	}, scratch: func(c *stepCtx) (int64, int64, error) {
		return ArgMaxWorkspace(c.rows(c.st.In[0]), c.st.In[0].Last(c.T), c.p.SMs), 0, nil
	}})
	for _, op := range []string{"split", "concat", "reshape"} {
		defRule(op, rule{launches: copies})
	}
}

// copies: split and concat along an axis copy each piece with a strided
// row copy; a reshape (of a weight: a reshape of an activation is a view
// and has no step) is a plain copy.
func copies(c *stepCtx) ([]Launch, error) {
	st := c.st
	dt := st.Out[0].DType
	for _, o := range append(append([]Operand(nil), st.In...), st.Out...) {
		if o.DType != dt {
			return nil, fmt.Errorf("%s of mixed dtypes", st.Op)
		}
	}
	esz := int64(dtypeSize(dt))
	if st.Op == "reshape" {
		return []Launch{memcpy(c.out[0], c.in[0], int64(st.Out[0].Elems(c.T))*esz)}, nil
	}
	whole, pieces := st.In[0], st.Out
	wp, pp := c.in[0], c.out
	if st.Op == "concat" {
		whole, pieces = st.Out[0], st.In
		wp, pp = c.out[0], c.in
	}
	wd := whole.Dims(c.T)
	axis := st.Int("axis")
	if axis < 0 {
		axis += len(wd)
	}
	if axis < 0 || axis >= len(wd) {
		return nil, fmt.Errorf("axis %d out of range for %v", st.Int("axis"), wd)
	}
	outer := int64(1)
	for _, d := range wd[:axis] {
		outer *= int64(d)
	}
	inner := int64(whole.Elems(c.T)) / max(outer, 1) // elements per outer row of the whole
	var ls []Launch
	var before int64
	for i, q := range pieces {
		cols := int64(q.Elems(c.T)) / max(outer, 1)
		src, ldi, dst, ldo := wp.At(before*esz), inner, pp[i], cols
		if st.Op == "concat" {
			src, ldi, dst, ldo = pp[i], cols, wp.At(before*esz), inner
		}
		ls = append(ls, CopyRows(dt, outer, cols, src, ldi, dst, ldo))
		before += cols
	}
	return ls, nil
}
