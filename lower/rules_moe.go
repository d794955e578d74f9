package lower

import (
	"fmt"

	"lagc/ir"
)

// Rules of moe_experts and moe_grouped. moe_grouped runs on the same
// kernels: its fused gate_up stack is stored as separate gate and up stacks
// (LayoutGateUpSplit), its shared experts (at the end of the stacks) become
// extra routes of weight 1 appended to every token's by moe_add_shared, and
// the experts accumulate into its output, which holds the residual: its
// buffer when the memory plan wrote the output in place, else a copy.

func init() {
	// The expert stacks may stay block-quantised (moe_grouped's unfused
	// form reads gate, up, down at 3, 4, 5; fused, gate_up and down at 3, 4).
	defRule("moe_experts", rule{launches: moeRule, scratch: moeScratch, quantInputs: []int{3, 4, 5}, quantKeep: moeQuantKeep})
	defRule("moe_grouped", rule{launches: moeRule, scratch: moeScratch, quantInputs: []int{3, 4, 5}, quantKeep: moeQuantKeep, layout: func(n *ir.Node, i int) string {
		// The MoE kernels read gate and up stacks separately.
		if n.AttrString("gate_up") == ir.GateUpFused && i == 3 {
			return LayoutGateUpSplit
		}
		return ""
	}})
}

// moeQuantKeep: the expert stacks stay block-quantised only all together
// and only where the kernels read them so (moeArgs): each of a type with
// GPU kernels, gate and up (or the fused gate_up) of one type, the down of
// that or another (llama.cpp's Q4_K_M stores some layers' downs in Q6_K).
// Otherwise (a stack in f16, or in a type without kernels: llama-quantize
// falls back so on rows that are not whole blocks) all of them go to the
// plan's dtype, which the float kernels read.
func moeQuantKeep(n *ir.Node) bool {
	nd := len(n.Inputs) - 1 - n.AttrInt("residual") // as moeArgs: the down stack
	if nd < 4 {
		return false
	}
	for i, v := range n.Inputs[3 : nd+1] {
		if _, ok := QuantType(v.Type.DType.String()); !ok || v.Kind != ir.Weight {
			return false
		}
		if i+3 < nd && v.Type.DType != n.Inputs[3].Type.DType {
			return false
		}
	}
	return true
}

// moeArgs describes the step at c.T tokens, its routes as the step reads
// them (before moe_add_shared).
func moeArgs(c *stepCtx) (MoEArgs, error) {
	st := c.st
	res := st.Int("residual")
	nd := len(st.In) - 1 - res // down [E,H,I]
	if nd < 4 {
		return MoEArgs{}, fmt.Errorf("%s has %d inputs", st.Op, len(st.In))
	}
	d := st.In[nd].Dims(0)
	if len(d) != 3 {
		return MoEArgs{}, fmt.Errorf("down stack must be [E,H,I], is %v", d)
	}
	if st.In[1].DType != "f32" || st.In[2].DType != "i32" {
		return MoEArgs{}, fmt.Errorf("router weights must be f32 and ids i32")
	}
	// Gate and up (or the fused gate_up) share a type; the down may have
	// another where all are block-quantised (MoEArgs.DownType, which
	// validate checks).
	for _, o := range st.In[3:nd] {
		if o.DType != st.In[3].DType {
			return MoEArgs{}, fmt.Errorf("gate and up stacks of different dtypes (%s, %s)", st.In[3].DType, o.DType)
		}
	}
	var downType string
	if st.In[nd].DType != st.In[3].DType {
		downType = st.In[nd].DType
	}
	E, H, I := d[0], d[1], d[2]
	a := MoEArgs{
		T: c.rows(st.In[0]), H: H, I: I, E: E, TopK: st.In[1].Last(c.T) + st.Int("shared"),
		X: c.in[0], Weights: c.in[1], IDs: c.in[2], Down: c.in[nd], Out: c.out[0],
		XType: st.In[0].DType, WType: st.In[3].DType, DownType: downType, OutType: st.Out[0].DType, Workspace: Ptr{BaseWorkspace, 0},
		Accumulate: res != 0, SMs: c.p.SMs, CC: c.p.cc(), PrefillMMA: c.p.PrefillMMA, QMoE: c.p.QMoE,
	}
	if st.String("order") == "descending" {
		// The expert-order schedule; its GEMM tiles also run in N-bands
		// sized for L2 by the first stack (gate or gate_up, the larger
		// GEMM) as it is stored.
		a.Order = ExpertsByLoad
		w := st.In[3]
		if w.Weight < 0 || w.Weight >= len(c.p.Weights) || len(w.Shape) != 3 || w.Shape[0]*w.Shape[1] <= 0 {
			return MoEArgs{}, fmt.Errorf("expert stack %s must be a weight [E,N,K]", w.Value)
		}
		a.Band = MoEBand(w.Shape[1], c.p.Weights[w.Weight].Bytes/int64(w.Shape[0]*w.Shape[1]))
	}
	if IsQuantized(a.WType) {
		// Quantised stacks are rows of matrices in the device layout; a
		// fused gate_up stack is one matrix, gate rows then up rows.
		EI := E * I
		a.QDown = QMatrix{W: c.in[nd], Total: E * H}
		if st.Op == "moe_grouped" && st.String("gate_up") == "fused" {
			if w := st.In[3].Weight; w < 0 || w >= len(c.p.Weights) || !GateUpSplit(c.p.Weights[w].Layout) {
				return MoEArgs{}, fmt.Errorf("fused gate_up stack %s is not stored split", st.In[3].Value)
			}
			a.QGate, a.QUp = QMatrix{W: c.in[3], Total: 2 * EI}, QMatrix{W: c.in[3], Total: 2 * EI, Row0: EI}
		} else {
			a.QGate, a.QUp = QMatrix{W: c.in[3], Total: EI}, QMatrix{W: c.in[4], Total: EI}
		}
		return a, nil
	}
	switch {
	case st.Op == "moe_experts":
		a.Gate, a.Up = c.in[3], c.in[4]
	case st.String("gate_up") == "fused":
		if st.In[3].Weight < 0 || st.In[3].Weight >= len(c.p.Weights) || !GateUpSplit(c.p.Weights[st.In[3].Weight].Layout) {
			return MoEArgs{}, fmt.Errorf("fused gate_up stack %s is not stored split", st.In[3].Value)
		}
		a.Gate, a.Up = c.in[3], c.in[3].At(int64(E)*int64(I)*int64(H)*int64(dtypeSize(st.In[3].DType)))
	default:
		a.Gate, a.Up = c.in[3], c.in[4]
	}
	return a, nil
}

// routes are where moe_add_shared writes the extended weights and ids.
func routes(a MoEArgs) (w, ids Ptr) {
	return Ptr{BaseRoutes, 0}, Ptr{BaseRoutes, align(4 * int64(a.T) * int64(a.TopK))}
}

func moeRule(c *stepCtx) ([]Launch, error) {
	st := c.st
	a, err := moeArgs(c)
	if err != nil {
		return nil, err
	}
	var ls []Launch
	if st.Int("residual") != 0 {
		r := len(st.In) - 1
		if st.In[r].DType != st.Out[0].DType {
			return nil, fmt.Errorf("residual and output dtypes differ")
		}
		if c.in[r] != c.out[0] {
			ls = append(ls, memcpy(c.out[0], c.in[r], int64(st.Out[0].Elems(c.T)*dtypeSize(st.Out[0].DType))))
		}
	}
	if shared := st.Int("shared"); shared > 0 {
		w2, ids2 := routes(a)
		ls = append(ls, MoEAddShared(a.T, a.TopK-shared, shared, a.E-shared, a.Weights, a.IDs, w2, ids2))
		a.Weights, a.IDs = w2, ids2
	}
	// A batched decode step: the decode kernels over runs of rows, as
	// for matmuls.
	xs, outs := int64(a.H*dtypeSize(a.XType)), int64(a.H*dtypeSize(a.OutType))
	rs := 4 * int64(a.TopK)
	runs := c.gemvRuns
	if c.batch && c.p.BatchGEMM && a.T > GEMVMaxRows && IsQuantized(a.WType) {
		// The tensor-core GEMMs would dequantise stacks of a type without
		// a grouped wgmma GEMM (before Hopper; q6_k, q5_k switched off) at
		// every step, gigabytes for a few rows: the GEMVs read the blocks,
		// in runs.
		if q, err := a.quantPath(); err == nil && (q == moeQuantDequant || q == moeQuantHopperBF16Down) {
			runs = c.rowRuns
		}
	}
	ms, err := runs(a.T, func(r, n int) ([]Launch, error) {
		b := a
		b.T, b.X, b.Out = n, a.X.At(int64(r)*xs), a.Out.At(int64(r)*outs)
		b.Weights, b.IDs = a.Weights.At(int64(r)*rs), a.IDs.At(int64(r)*rs)
		return MoE(b)
	})
	if err != nil {
		return nil, err
	}
	return append(ls, ms...), nil
}

func moeScratch(c *stepCtx) (ws, rt int64, err error) {
	a, err := moeArgs(c)
	if err != nil {
		return 0, 0, err
	}
	if ws, err = MoEWorkspace(a); err != nil {
		return 0, 0, err
	}
	if c.st.Int("shared") > 0 {
		rt = 2 * align(4*int64(a.T)*int64(a.TopK))
	}
	return ws, rt, nil
}
