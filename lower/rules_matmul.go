package lower

import (
	"fmt"

	"lagc/quant"
)

// Rules of matmul and its fused forms (ir/optable_fused.go), which MatMul's
// epilogues implement.

func init() {
	// The weight (input 1) may stay block-quantised: quantMatMul.
	quantW := []int{1}
	defRule("matmul", rule{launches: func(c *stepCtx) ([]Launch, error) {
		a, _, err := matmulArgs(c)
		if err != nil {
			return nil, err
		}
		return matmulOrQuant(c, a, a.N, 0)
	}, scratch: matmulScratch, quantInputs: quantW})
	defRule("matmul_swiglu", rule{launches: func(c *stepCtx) ([]Launch, error) {
		a, _, err := matmulArgs(c)
		if err != nil {
			return nil, err
		}
		rows := a.N
		a.N, a.SwiGLU = a.N/2, true
		return matmulOrQuant(c, a, rows, 0)
	}, scratch: matmulScratch, quantInputs: quantW})
	defRule("matmul_add", rule{launches: matmulAdd, scratch: matmulScratch, quantInputs: quantW})
	defRule("matmul_split", rule{launches: matmulSplit, scratch: matmulSplitScratch, quantInputs: quantW})
}

// matmulOrQuant is a's launches: MatMul's, or quantMatMul's when the
// weight is block-quantised (rows [row0, row0+N) of a matrix of wrows).
func matmulOrQuant(c *stepCtx, a MatMulArgs, wrows, row0 int) ([]Launch, error) {
	return c.gemvRows(a, func(b MatMulArgs) ([]Launch, error) {
		if IsQuantized(b.WType) {
			return quantMatMul(c.shadowPlan(), b, wrows, row0)
		}
		return one(MatMul(b))
	})
}

// shadowPlan is the plan whose bf16 weight copies (Plan.Shadows) a
// prefill step's quantised matmuls read, nil for decode and batched decode
// steps: those keep the quantised kernels.
func (c *stepCtx) shadowPlan() *Plan {
	if c.batch || c.s.Class != Prefill {
		return nil
	}
	return c.p
}

// gemvRows is f(a) over the runs of rows gemvRuns gives.
func (c *stepCtx) gemvRows(a MatMulArgs, f func(MatMulArgs) ([]Launch, error)) ([]Launch, error) {
	xs, ys := int64(a.K*dtypeSize(a.XType)), int64(a.N*dtypeSize(a.YType))
	return c.gemvRuns(a.T, func(r, n int) ([]Launch, error) {
		b := a
		b.T, b.X, b.Y = n, a.X.At(int64(r)*xs), a.Y.At(int64(r)*ys)
		return f(b)
	})
}

// From QDequantGEMMRows tokens a quantised prefill matmul dequantises its
// rows into the workspace and runs the bf16 GEMM rather than gemm_wgmma_q:
// since the bf16 wgmma GEMM's epilogue and ping-pong work, its rate
// outweighs writing and reading the bf16 copy at every S-2.1 shape.
// BenchmarkHopperQGEMM on the H200, us in registers / through the copy,
// q8_0 at T = 512, 1024, 2048: q,k,v,gate 102/81, 197/130, 352/221;
// o_proj 94/71, 188/113, 274/178; shared gate+up 37/26, 38/26, 71/43;
// shared down (K 1024, where the copy used to lose) 16.1/15.3, 27.5/19.4,
// 40.3/24.7. q4_k alike, but for q,k,v,gate at 512 (100/103).
const QDequantGEMMRows = 512

// quantMatMul is y = x w^T with w the rows [row0, row0+N) (2N with
// SwiGLU) of a block-quantised matrix of wrows rows: for a few tokens, x
// quantised into the workspace and the quantised GEMV; where p keeps a
// bf16 copy of the matrix (Plan.Shadows), the bf16 GEMM over its rows; on
// Hopper below QDequantGEMMRows (see there) the wgmma GEMM dequantising in
// registers; else the rows dequantised into the workspace and the GEMM of
// a's other dtypes over them. p may be nil (no shadows).
func quantMatMul(p *Plan, a MatMulArgs, wrows, row0 int) ([]Launch, error) {
	t, ok := QuantType(a.WType)
	if !ok {
		return nil, fmt.Errorf("matmul: no GPU kernels for %s weights", a.WType)
	}
	ws := Ptr{BaseWorkspace, 0}
	if a.T <= QGEMVMaxRows {
		q, err := Q8XQuantize(a.XType, a.X, ws, a.T, a.K)
		if err != nil {
			return nil, err
		}
		g, err := QGEMV(QGEMVArgs{T: a.T, K: a.K, N: a.N, XQ: ws, W: a.W, WType: t, WRows: wrows, Row0: row0,
			Y: a.Y, YType: a.YType, SwiGLU: a.SwiGLU, Accumulate: a.Accumulate, Groups: a.QGEMVGroups})
		if err != nil {
			return nil, err
		}
		return []Launch{q, g}, nil
	}
	if w, ok := p.shadowRows(a, row0); ok {
		b := a
		b.W, b.WType = w, "bf16"
		return one(MatMul(b))
	}
	if quantInRegs(a, t) {
		return []Launch{HopperQGEMM(a.T, a.N, a.K, a.X, a.W, t, wrows, row0, a.Y, a.YType, a.epilogue(), a.N, sms(a.SMs))}, nil
	}
	rows, dt := a.N, dequantDType(a.XType)
	if a.SwiGLU {
		rows *= 2
	}
	dq, err := QDequant(t, a.W, wrows, a.K, row0, rows, ws, dt)
	if err != nil {
		return nil, err
	}
	b := a
	b.W, b.WType = ws, dt
	l, err := MatMul(b)
	if err != nil {
		return nil, err
	}
	return []Launch{dq, l}, nil
}

// dequantDType is what quantised weights are dequantised to for a GEMM
// with x of xType: bf16 for the tensor cores, f32 beside f32 activations.
func dequantDType(xType string) string {
	if xType == "f32" {
		return "f32"
	}
	return "bf16"
}

// matmulScratch is the workspace of a matmul step with quantised weights:
// x quantised (decode), or the weight dequantised (prefill without the
// quantised wgmma GEMM). quantMatMul decides which; this takes the larger
// of what it may need at c.T.
func matmulScratch(c *stepCtx) (ws, rt int64, err error) {
	a, K, err := matmulArgs(c)
	if err != nil || !IsQuantized(a.WType) {
		return 0, 0, err
	}
	if a.T <= QGEMVMaxRows {
		return Q8XBytes(a.T, K), 0, nil
	}
	t, _ := QuantType(a.WType)
	// Shadows (Plan.Shadows) do not shrink it: a batched decode step on
	// the prefill schedule's steps dequantises as before.
	if quantInRegs(a, t) {
		return 0, 0, nil
	}
	return int64(a.N) * int64(K) * int64(dtypeSize(dequantDType(a.XType))), 0, nil
}

// matmulSplitScratch is matmulScratch and, where a prefill step's split
// GEMM may normalise and rotate its q and k heads (fusePrefillGEMMNormRoPE),
// room after it for their cosines and sines (RoPECSBytes).
func matmulSplitScratch(c *stepCtx) (ws, rt int64, err error) {
	ws, rt, err = matmulScratch(c)
	if err == nil && c.T > GEMVMaxRows {
		ws = align(ws) + RoPECSBytes(c.T)
	}
	return ws, rt, err
}

// quantInRegs says whether a (more than QGEMVMaxRows tokens) runs on
// gemm_wgmma_q, dequantising in registers.
func quantInRegs(a MatMulArgs, t quant.Type) bool {
	return hopperQOK(a.CC, a.PrefillMMA, t, a.XType, a.K) == nil && !(a.SwiGLU && a.Accumulate) && a.T < QDequantGEMMRows
}

// matmulArgs is the step's y = x w^T with w [N,K]; it returns K too.
func matmulArgs(c *stepCtx) (MatMulArgs, int, error) {
	st := c.st
	w := st.In[1].Dims(0)
	if len(w) != 2 {
		return MatMulArgs{}, 0, fmt.Errorf("weight %s must be [N,K], is %v", st.In[1].Value, w)
	}
	return MatMulArgs{T: c.rows(st.In[0]), K: w[1], N: w[0], X: c.in[0], W: c.in[1], Y: c.out[0],
		XType: st.In[0].DType, WType: st.In[1].DType, YType: st.Out[0].DType, SMs: c.p.SMs, CC: c.p.cc(),
		PrefillMMA: c.p.PrefillMMA, CublasLt: c.p.CublasLt, QGEMVGroups: c.p.QGEMVGroups}, w[1], nil
}

// matmulAdd: out = r + x w^T. The residual is copied into out unless the
// memory plan wrote out in place over it, and the GEMM accumulates into it.
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
	ms, err := matmulOrQuant(c, a, a.N, 0)
	if err != nil {
		return nil, err
	}
	return append(ls, ms...), nil
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
		return matmulOrQuant(c, a, a.N, 0)
	}
	if ls, ok, err := splitGEMM(c, a, rows); ok || err != nil {
		return ls, err
	}
	if ls, ok, err := splitGEMV(c, a, rows); ok || err != nil {
		return ls, err
	}
	var ls []Launch
	row := 0
	for i, o := range st.Out {
		n := o.Last(0)
		b := a
		b.N, b.Y, b.YType = n, c.out[i], o.DType
		if IsQuantized(a.WType) {
			// A row block of a quantised matrix is not a byte offset (the
			// device layout keeps heads apart): the kernels take its rows.
			r0 := row
			qs, err := c.gemvRows(b, func(b MatMulArgs) ([]Launch, error) { return quantMatMul(c.shadowPlan(), b, a.N, r0) })
			if err != nil {
				return nil, err
			}
			ls = append(ls, qs...)
			row += n
			continue
		}
		b.W = c.in[1].At(int64(row) * int64(K) * int64(dtypeSize(st.In[1].DType)))
		b.WholeN = a.N // each row's sums in the order of the decode schedule's one GEMV
		l, err := c.gemvRows(b, func(b MatMulArgs) ([]Launch, error) { return one(MatMul(b)) })
		if err != nil {
			return nil, err
		}
		ls = append(ls, l...)
		row += n
	}
	return ls, nil
}

// splitGEMM is a prefill matmul_split as one wgmma GEMM over the whole
// weight whose epilogue sends each output its columns (MatMulArgs.Split;
// quantised weights dequantised whole first): the small GEMMs of k, v and
// the gate ran at a fraction of the large one's rate. ok is false where
// that does not apply (decode rows, other GPUs, mixed output dtypes, the
// in-register quantised path, more than MaxSplit outputs, batched decode
// steps, outputs but the last not a multiple of 128 wide): the caller
// runs one GEMM an output.
func splitGEMM(c *stepCtx, a MatMulArgs, rows int) ([]Launch, bool, error) {
	st := c.st
	if c.batch || c.s.Class != Prefill || c.T <= GEMVMaxRows || len(st.Out) < 2 || len(st.Out) > MaxSplit || rows != a.N ||
		c.p.DisableSplitGEMM {
		return nil, false, nil
	}
	b := a
	var ok bool
	if b.Split, ok = c.splitOuts(); !ok {
		return nil, false, nil
	}
	b.Y, b.YType = Ptr{}, st.Out[0].DType
	if !SplitFits(b.Split, 128) {
		return nil, false, nil
	}
	var dq []Launch
	if w, ok := c.shadowPlan().shadowRows(a, 0); ok {
		b.W, b.WType = w, "bf16"
	} else if t, q := QuantType(a.WType); q {
		if quantInRegs(a, t) || dequantDType(a.XType) != "bf16" {
			return nil, false, nil
		}
		ws := Ptr{BaseWorkspace, 0}
		l, err := QDequant(t, a.W, a.N, a.K, 0, a.N, ws, "bf16")
		if err != nil {
			return nil, true, err
		}
		dq = append(dq, l)
		b.W, b.WType = ws, "bf16"
	}
	if hopperOK(b) != nil {
		return nil, false, nil
	}
	l, err := HopperGEMM(b)
	if err != nil {
		return nil, true, err
	}
	return append(dq, l), true, nil
}

// splitOuts is a matmul_split step's outputs as one split GEMM's or
// GEMV's (each its columns' width); false where their dtypes differ.
func (c *stepCtx) splitOuts() ([]SplitOut, bool) {
	outs := make([]SplitOut, len(c.st.Out))
	for i, o := range c.st.Out {
		if o.DType != c.st.Out[0].DType {
			return nil, false
		}
		outs[i] = SplitOut{Y: c.out[i], N: o.Last(0)}
	}
	return outs, true
}

// splitGEMV is a matmul_split of a few rows (a batched decode step, a
// short prefill chunk) as one GEMV over the whole weight sending each
// output its columns: quantised weights through QGEMVSplit after x's
// quantisation, float ones through GEMVSplitLaunch where
// Options.DisableFloatSplitGEMV does not say otherwise. The GEMVs of k, v and
// the gate, one launch each, cost their launches' latency more than their
// bytes. ok is false where it does not apply (more rows, mixed output
// dtypes, more than MaxSplit outputs, Options.DisableSplitGEMM): the
// caller runs a GEMV an output, each splitting K as the whole GEMV does.
// Each value is the whole GEMV's of the step's rows, as the decode
// schedule's one GEMV computes it (TestQGEMVSplitGPU, TestGEMVSplitGPU,
// TestBatchStepGPU).
func splitGEMV(c *stepCtx, a MatMulArgs, rows int) ([]Launch, bool, error) {
	st := c.st
	t, q := QuantType(a.WType)
	if (!q && c.p.DisableFloatSplitGEMV) || c.T > min(QGEMVMaxRows, GEMVMaxRows) || len(st.Out) < 2 || len(st.Out) > MaxSplit ||
		rows != a.N || c.p.DisableSplitGEMM || a.SwiGLU || a.Accumulate {
		return nil, false, nil
	}
	outs, ok := c.splitOuts()
	if !ok {
		return nil, false, nil
	}
	if !q {
		a.YType = st.Out[0].DType
		l, err := GEMVSplitLaunch(a, outs)
		if err != nil {
			return nil, true, err
		}
		return []Launch{l}, true, nil
	}
	ws := Ptr{BaseWorkspace, 0}
	qz, err := Q8XQuantize(a.XType, a.X, ws, a.T, a.K)
	if err != nil {
		return nil, true, err
	}
	g, err := QGEMVSplit(QGEMVArgs{T: a.T, K: a.K, N: a.N, XQ: ws, W: a.W, WType: t, WRows: a.N, YType: st.Out[0].DType}, outs)
	if err != nil {
		return nil, true, err
	}
	return []Launch{qz, g}, true, nil
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
