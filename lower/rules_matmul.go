package lower

import "fmt"

// Rules of matmul and its fused forms (ir/optable_fused.go), which MatMul's
// epilogues implement.

func init() {
	for _, op := range []string{"matmul", "matmul_swiglu", "matmul_add", "matmul_split"} {
		defRule(op, rule{launches: matmulRule})
	}
}

func matmulRule(c *stepCtx) ([]Launch, error) {
	st := c.st
	w := st.In[1].Dims(0)
	if len(w) != 2 {
		return nil, fmt.Errorf("weight %s must be [N,K], is %v", st.In[1].Value, w)
	}
	N, K := w[0], w[1]
	a := MatMulArgs{T: c.rows(st.In[0]), K: K, N: N, X: c.in[0], W: c.in[1], Y: c.out[0],
		XType: st.In[0].DType, WType: st.In[1].DType, YType: st.Out[0].DType, SMs: c.p.SMs}
	switch st.Op {
	case "matmul":
		return one(MatMul(a))
	case "matmul_swiglu":
		a.N, a.SwiGLU = N/2, true
		return one(MatMul(a))
	case "matmul_add":
		// out = r + x w^T: the residual is copied into out (unless it is
		// there already), and the GEMM accumulates into it.
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
	// matmul_split: when the outputs are one row (decode: lower lays them
	// out back to back), one GEMV over the whole weight writes that row;
	// else one GEMM per row block of the concatenated weight.
	rows := 0
	for _, o := range st.Out {
		rows += o.Last(0)
	}
	if c.T == 1 && st.SplitRow(1) && rows == N {
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
