package lower

import "fmt"

// Rules of matmul and its fused forms (ir/optable_fused.go), which MatMul's
// epilogues implement.

func init() {
	defRule("matmul", rule{launches: func(c *stepCtx) ([]Launch, error) {
		a, _, err := matmulArgs(c)
		if err != nil {
			return nil, err
		}
		return one(MatMul(a))
	}})
	defRule("matmul_swiglu", rule{launches: func(c *stepCtx) ([]Launch, error) {
		a, _, err := matmulArgs(c)
		if err != nil {
			return nil, err
		}
		a.N, a.SwiGLU = a.N/2, true
		return one(MatMul(a))
	}})
	defRule("matmul_add", rule{launches: matmulAdd})
	defRule("matmul_split", rule{launches: matmulSplit})
}

// matmulArgs is the step's y = x w^T with w [N,K]; it returns K too.
func matmulArgs(c *stepCtx) (MatMulArgs, int, error) {
	st := c.st
	w := st.In[1].Dims(0)
	if len(w) != 2 {
		return MatMulArgs{}, 0, fmt.Errorf("weight %s must be [N,K], is %v", st.In[1].Value, w)
	}
	return MatMulArgs{T: c.rows(st.In[0]), K: w[1], N: w[0], X: c.in[0], W: c.in[1], Y: c.out[0],
		XType: st.In[0].DType, WType: st.In[1].DType, YType: st.Out[0].DType, SMs: c.p.SMs}, w[1], nil
}

// matmulAdd: out = r + x w^T. The residual is copied into out (unless it
// is there already), and the GEMM accumulates into it.
func matmulAdd(c *stepCtx) ([]Launch, error) {
	st := c.st
	a, _, err := matmulArgs(c)
	if err != nil {
		return nil, err
	}
	if st.In[2].DType != st.Out[0].DType {
		return nil, fmt.Errorf("residual and output dtypes differ")
	}
	var ls []Launch
	if c.out[0] != c.in[2] {
		ls = append(ls, memcpy(c.out[0], c.in[2], int64(st.Out[0].Elems(c.T)*dtypeSize(st.Out[0].DType))))
	}
	a.Accumulate = true
	l, err := MatMul(a)
	if err != nil {
		return nil, err
	}
	return append(ls, l), nil
}

// matmulSplit: when the outputs are one row (decode: lower lays them out
// back to back), one GEMV over the whole weight writes that row; else one
// GEMM per row block of the concatenated weight.
func matmulSplit(c *stepCtx) ([]Launch, error) {
	st := c.st
	a, K, err := matmulArgs(c)
	if err != nil {
		return nil, err
	}
	rows := 0
	for _, o := range st.Out {
		rows += o.Last(0)
	}
	if c.T == 1 && st.SplitRow(1) && rows == a.N {
		return one(MatMul(a))
	}
	var ls []Launch
	row := 0
	for i, o := range st.Out {
		n := o.Last(0)
		b := a
		b.N, b.W, b.Y, b.YType = n, c.in[1].At(int64(row)*int64(K)*int64(dtypeSize(st.In[1].DType))), c.out[i], o.DType
		l, err := MatMul(b)
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		row += n
	}
	return ls, nil
}

// SplitRow reports whether a matmul_split step's outputs at t tokens are
// one contiguous row [1, sum(sizes)] in the order of the weight's row
// blocks, all of one dtype (the decode schedule lays them out so), which a
// single GEMV over the whole weight writes.
func (st *Step) SplitRow(t int) bool {
	if st.Op != "matmul_split" || t != 1 || len(st.Out) == 0 {
		return false
	}
	off := st.Out[0].Offset
	for _, o := range st.Out {
		if o.Kind != "activation" || o.DType != st.Out[0].DType || o.Offset != off {
			return false
		}
		off += int64(o.Elems(t) * dtypeSize(o.DType))
	}
	return true
}
