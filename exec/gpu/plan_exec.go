package gpu

import (
	"fmt"
	"math"

	"lagc/cuda"
	"lagc/lower"
	"lagc/prep"
)

// program is a schedule bound to the executor's memory: per step, the
// launcher calls with their pointers resolved, run for any T up to the
// schedule's Tokens.
type program struct {
	sch          *lower.Schedule
	steps        []boundStep
	logits, next lower.Buffer
}

type boundStep struct {
	st    *lower.Step
	calls []call
}

// call is one launcher invocation (one or a few kernels), the unit the
// profiler times.
type call struct {
	name string
	run  func(s Queue, T int) error
}

// run queues every step of p for T tokens on s.
func (e *Executor) run(p *program, T int) error {
	for i := range p.steps {
		bs := &p.steps[i]
		for _, c := range bs.calls {
			var err error
			if e.prof != nil {
				err = e.prof.timed(e.s, p.sch.Class, bs.st, c.name, func() error { return c.run(e.q, T) })
			} else {
				err = c.run(e.q, T)
			}
			if err != nil {
				return fmt.Errorf("%s %s (%s): %w", p.sch.Class, bs.st.Name, bs.st.Op, err)
			}
		}
	}
	return nil
}

func dtypeOf(s string) (cuda.DType, error) {
	switch s {
	case "f32":
		return cuda.F32, nil
	case "bf16":
		return cuda.BF16, nil
	case "f16":
		return cuda.F16, nil
	case "i32":
		return cuda.I32, nil
	}
	return 0, fmt.Errorf("dtype %q has no kernels", s)
}

// ptr resolves an operand: an activation in the arena, an input in the
// scalar buffers, a weight in the weight allocation.
func (e *Executor) ptr(o lower.Operand) (cuda.DevicePtr, error) {
	switch o.Kind {
	case "weight":
		if o.Offset < 0 {
			return 0, fmt.Errorf("weight %s is not uploaded", o.Value)
		}
		return e.weights.Add(o.Offset), nil
	case "input":
		switch o.Value {
		case "tokens":
			return e.tokens, nil
		case "pos":
			return e.pos, nil
		}
		return 0, fmt.Errorf("graph input %s is not tokens or pos", o.Value)
	}
	return e.arena.Add(o.Offset), nil
}

// bind resolves every step of a schedule.
func (e *Executor) bind(sch *lower.Schedule) (*program, error) {
	p := &program{sch: sch}
	var ok1, ok2 bool
	p.logits, ok1 = sch.Value("logits")
	p.next, ok2 = sch.Value("next")
	if !ok1 || !ok2 || p.logits.DType != "f32" || p.next.DType != "i32" {
		return nil, fmt.Errorf("the plan needs outputs logits (f32) and next (i32)")
	}
	for i := range sch.Steps {
		st := &sch.Steps[i]
		calls, err := e.bindStep(sch, st)
		if err != nil {
			return nil, fmt.Errorf("%s (%s): %w", st.Name, st.Op, err)
		}
		p.steps = append(p.steps, boundStep{st: st, calls: calls})
	}
	return p, nil
}

// operands resolves a step's pointers and dtypes.
type operands struct {
	in, out   []cuda.DevicePtr
	inT, outT []cuda.DType
}

func (e *Executor) operands(st *lower.Step) (*operands, error) {
	o := &operands{}
	for _, x := range st.In {
		p, err := e.ptr(x)
		if err != nil {
			return nil, err
		}
		dt, err := dtypeOf(x.DType)
		if err != nil {
			return nil, err
		}
		o.in, o.inT = append(o.in, p), append(o.inT, dt)
	}
	for _, x := range st.Out {
		p, err := e.ptr(x)
		if err != nil {
			return nil, err
		}
		dt, err := dtypeOf(x.DType)
		if err != nil {
			return nil, err
		}
		o.out, o.outT = append(o.out, p), append(o.outT, dt)
	}
	return o, nil
}

// rows returns the number of rows of an operand whose last axis is n.
func rows(o lower.Operand, T int) int { return o.Elems(T) / max(o.Last(T), 1) }

// bindStep turns one step into launcher calls; CONTRACTS.md and
// exec/cpu/ops.go define what each op computes.
func (e *Executor) bindStep(sch *lower.Schedule, st *lower.Step) ([]call, error) {
	ops, err := e.operands(st)
	if err != nil {
		return nil, err
	}
	in, out, inT, outT := ops.in, ops.out, ops.inT, ops.outT
	one := func(name string, f func(s Queue, T int) error) []call { return []call{{name, f}} }
	same := func(what string, dts ...cuda.DType) error {
		for _, d := range dts[1:] {
			if d != dts[0] {
				return fmt.Errorf("%s: mixed dtypes %v", what, dts)
			}
		}
		return nil
	}
	switch st.Op {
	case "embedding":
		tab := st.In[1].Dims(0)
		if err := same("embedding table and output", inT[1], outT[0]); err != nil {
			return nil, err
		}
		return one("Embedding", func(s Queue, T int) error {
			return e.k.Embedding(s, outT[0], out[0], in[0], in[1], T, tab[0], tab[1])
		}), nil
	case "rms_norm":
		if inT[1] != cuda.F32 {
			return nil, fmt.Errorf("norm weight %s must be f32 on the device, is %v", st.In[1].Value, inT[1])
		}
		eps := float32(st.Float("eps"))
		return one("RMSNorm", func(s Queue, T int) error {
			n := st.In[0].Last(T)
			return e.k.RMSNormCast(s, inT[0], outT[0], out[0], in[0], in[1], rows(st.In[0], T), n, eps)
		}), nil
	case "rope":
		r, err := e.rope(st)
		if err != nil {
			return nil, err
		}
		if err := same("rope", inT[0], outT[0]); err != nil {
			return nil, err
		}
		return one("RoPE", func(s Queue, T int) error {
			d := st.In[0].Dims(T)
			return e.k.RoPE(s, outT[0], out[0], in[0], in[1], d[0], d[1], d[2], r)
		}), nil
	case "attention":
		return e.bindAttention(sch, st, ops)
	case "softplus_gate":
		if err := same("softplus_gate", inT[0], inT[1], outT[0]); err != nil {
			return nil, err
		}
		return one("SoftplusGate", func(s Queue, T int) error {
			x := st.In[0].Dims(T)
			if len(x) != 3 {
				return fmt.Errorf("x must be [T,nh,d], is %v", x)
			}
			return e.k.SoftplusGate(s, outT[0], out[0], in[0], in[1], x[0], x[1], x[2], st.In[1].Last(T), 0)
		}), nil
	case "silu", "mul", "add":
		if err := same(st.Op, append(inT, outT[0])...); err != nil {
			return nil, err
		}
		return one(st.Op, func(s Queue, T int) error {
			n := st.Out[0].Elems(T)
			switch st.Op {
			case "silu":
				return e.k.SiLU(s, outT[0], out[0], in[0], n)
			case "mul":
				return e.k.Mul(s, outT[0], out[0], in[0], in[1], n)
			}
			return e.k.Add(s, outT[0], out[0], in[0], in[1], n)
		}), nil
	case "router_topk":
		if inT[1] != cuda.F32 || outT[0] != cuda.F32 {
			return nil, fmt.Errorf("router bias and weights must be f32")
		}
		k := st.Int("top_k")
		softcap, scaling := float32(st.Float("softcap")), float32(st.Float("routed_scaling"))
		return one("RouterTopK", func(s Queue, T int) error {
			E := st.In[0].Last(T)
			return e.k.RouterTopK(s, inT[0], out[0], out[1], in[0], in[1], rows(st.In[0], T), E, k, softcap, scaling)
		}), nil
	case "argmax":
		return one("ArgMax", func(s Queue, T int) error {
			return e.k.ArgMax(s, inT[0], out[0], in[0], rows(st.In[0], T), st.In[0].Last(T))
		}), nil
	case "matmul", "matmul_swiglu", "matmul_add", "matmul_split":
		return e.bindMatMul(st, ops)
	case "moe_experts", "moe_grouped":
		return e.bindMoE(st, ops)
	case "split", "concat", "reshape":
		return e.bindCopy(st, ops)
	}
	return nil, fmt.Errorf("the CUDA executor has no kernel for op %q", st.Op)
}

// rope uploads (once per distinct parameters) the inverse frequencies.
func (e *Executor) rope(st *lower.Step) (Rope, error) {
	p := prep.RopeParams{
		RotaryDim: st.Int("rotary_dim"), Theta: st.Float("theta"), Type: st.String("rope_type"),
		Factor: st.Float("factor"), OriginalContext: st.Int("original_context"),
		BetaFast: st.Float("beta_fast"), BetaSlow: st.Float("beta_slow"), AttentionFactor: st.Float("attention_factor"),
	}
	key := fmt.Sprintf("%+v", p)
	if r, ok := e.ropes[key]; ok {
		return r, nil
	}
	tab, err := prep.NewRopeTable(p)
	if err != nil {
		return Rope{}, err
	}
	n := RopeTableBytes(tab)
	mem, err := e.alloc(n)
	if err != nil {
		return Rope{}, err
	}
	var off int64
	if k := len(e.ropeMem); k > 0 {
		off = e.ropeMem[k-1].off + align(e.ropeMem[k-1].size)
	}
	e.ropeMem = append(e.ropeMem, region{"rope", mem, n, off})
	r, err := UploadRope(e.q, mem, tab)
	if err != nil {
		return Rope{}, err
	}
	e.ropes[key] = r
	return r, nil
}

// bindAttention: decode appends the token's k, v and attends over the
// cache in one launch (and the split combine); prefill attends over the cache and the chunk's own keys, then
// stores the chunk (a ring keeps the last window of it).
func (e *Executor) bindAttention(sch *lower.Schedule, st *lower.Step, ops *operands) ([]call, error) {
	if st.KV < 0 || st.KV >= len(e.kv) {
		return nil, fmt.Errorf("no KV cache for layer %d", st.Layer)
	}
	c := e.kv[st.KV]
	in, out, dt := ops.in, ops.out, ops.outT[0]
	for _, d := range append(ops.inT[:3:3], dt) {
		if d != e.act {
			return nil, fmt.Errorf("attention operands must be %v (the cache dtype), have %v", e.act, d)
		}
	}
	q, kx, vx, pos := in[0], in[1], in[2], in[3]
	nh := st.In[0].Dims(1)[1]
	scale := float32(st.Float("scale"))
	if sch.Class == lower.Decode {
		// The attention kernel appends this token's k, v itself.
		return []call{{"AttentionDecode", func(s Queue, T int) error {
			if T != 1 {
				return fmt.Errorf("decode attention runs one token, got %d", T)
			}
			return e.k.AttentionDecodeAppend(s, dt, c, out[0], q, kx, vx, pos, nh, scale, e.ws)
		}}}, nil
	}
	store := call{"KVAppend", func(s Queue, T int) error { return e.k.KVAppend(s, dt, c, kx, vx, 0, pos, T) }}
	if c.Window > 0 {
		store = call{"KVCompactRing", func(s Queue, T int) error { return e.k.KVCompactRing(s, dt, c, kx, vx, 0, pos, T) }}
	}
	return []call{
		{"AttentionPrefill", func(s Queue, T int) error {
			return e.k.AttentionPrefill(s, dt, c, out[0], q, kx, vx, 0, 0, pos, T, nh, scale)
		}},
		store,
	}, nil
}

// bindMatMul covers matmul and the fused forms of ir/optable_fused.go that
// MatMul's epilogues implement.
func (e *Executor) bindMatMul(st *lower.Step, ops *operands) ([]call, error) {
	in, out, inT, outT := ops.in, ops.out, ops.inT, ops.outT
	w := st.In[1].Dims(0)
	if len(w) != 2 {
		return nil, fmt.Errorf("weight %s must be [N,K], is %v", st.In[1].Value, w)
	}
	N, K := w[0], w[1]
	base := func(T int) MatMulArgs {
		return MatMulArgs{T: rows(st.In[0], T), K: K, N: N, X: in[0], W: in[1], Y: out[0], XType: inT[0], WType: inT[1], YType: outT[0]}
	}
	switch st.Op {
	case "matmul":
		return []call{{"MatMul", func(s Queue, T int) error { return e.k.MatMul(s, base(T)) }}}, nil
	case "matmul_swiglu":
		return []call{{"MatMul", func(s Queue, T int) error {
			a := base(T)
			a.N, a.SwiGLU = N/2, true
			return e.k.MatMul(s, a)
		}}}, nil
	case "matmul_add":
		// out = r + x w^T: copy the residual into out, accumulate there.
		if inT[2] != outT[0] {
			return nil, fmt.Errorf("residual and output dtypes differ")
		}
		return []call{{"MatMul", func(s Queue, T int) error {
			if out[0] != in[2] {
				if err := s.CopyDtoD(out[0], in[2], int64(st.Out[0].Elems(T)*outT[0].Size())); err != nil {
					return err
				}
			}
			a := base(T)
			a.Accumulate = true
			return e.k.MatMul(s, a)
		}}}, nil
	}
	// matmul_split: one GEMM per row block of the concatenated weight, or,
	// when the outputs are one row (decode: lower lays them out back to
	// back), one GEMV over the whole weight writing that row.
	var calls []call
	row := int64(0)
	for i := range st.Out {
		n := st.Out[i].Last(0)
		wOff := row * int64(K) * int64(inT[1].Size())
		yi, yt := out[i], outT[i]
		calls = append(calls, call{"MatMul", func(s Queue, T int) error {
			a := base(T)
			a.N, a.W, a.Y, a.YType = n, in[1].Add(wOff), yi, yt
			return e.k.MatMul(s, a)
		}})
		row += int64(n)
	}
	if !st.SplitRow(1) || row != int64(N) {
		return calls, nil
	}
	return []call{{"MatMul", func(s Queue, T int) error {
		if T != 1 { // the row layout holds for one token only
			for _, c := range calls {
				if err := c.run(s, T); err != nil {
					return err
				}
			}
			return nil
		}
		return e.k.MatMul(s, base(T))
	}}}, nil
}

// moeArgs describes a moe_experts or moe_grouped step at T tokens. For
// moe_grouped the gate_up stack is stored split (lower.LayoutGateUpSplit),
// shared experts are extra routes (see bindMoE), and the residual is in
// the output before the experts accumulate into it.
func (e *Executor) moeArgs(st *lower.Step, ops *operands, T int) (MoEArgs, error) {
	res := st.Int("residual")
	nd := len(st.In) - 1 - res // down [E,H,I]
	d := st.In[nd].Dims(0)
	if len(d) != 3 {
		return MoEArgs{}, fmt.Errorf("down stack must be [E,H,I], is %v", d)
	}
	if ops.inT[1] != cuda.F32 || ops.inT[2] != cuda.I32 {
		return MoEArgs{}, fmt.Errorf("router weights must be f32 and ids i32")
	}
	for _, dt := range ops.inT[3 : nd+1] {
		if dt != ops.inT[nd] {
			return MoEArgs{}, fmt.Errorf("expert stacks of mixed dtypes")
		}
	}
	E, H, I := d[0], d[1], d[2]
	a := MoEArgs{
		T: rows(st.In[0], T), H: H, I: I, E: E, TopK: st.In[1].Last(T) + st.Int("shared"),
		X: ops.in[0], Weights: ops.in[1], IDs: ops.in[2], Down: ops.in[nd], Out: ops.out[0],
		XType: ops.inT[0], WType: ops.inT[nd], OutType: ops.outT[0], Workspace: e.ws,
		Accumulate: res != 0,
	}
	if st.String("order") == "descending" {
		a.Order = ExpertsByLoad
	}
	a.Band = st.Int("band")
	switch {
	case st.Op == "moe_experts":
		a.Gate, a.Up = ops.in[3], ops.in[4]
	case st.String("gate_up") == "fused":
		if st.In[3].Weight < 0 || e.plan.Weights[st.In[3].Weight].Layout != lower.LayoutGateUpSplit {
			return MoEArgs{}, fmt.Errorf("fused gate_up stack %s is not stored split", st.In[3].Value)
		}
		a.Gate, a.Up = ops.in[3], ops.in[3].Add(int64(E)*int64(I)*int64(H)*int64(ops.inT[3].Size()))
	default:
		a.Gate, a.Up = ops.in[3], ops.in[4]
	}
	return a, nil
}

func (e *Executor) bindMoE(st *lower.Step, ops *operands) ([]call, error) {
	if _, err := e.moeArgs(st, ops, 1); err != nil {
		return nil, err
	}
	shared := st.Int("shared")
	res := st.Int("residual")
	var calls []call
	if res != 0 {
		r := ops.in[len(ops.in)-1]
		if ops.inT[len(ops.in)-1] != ops.outT[0] {
			return nil, fmt.Errorf("residual and output dtypes differ")
		}
		calls = append(calls, call{"residual", func(s Queue, T int) error {
			if r == ops.out[0] {
				return nil
			}
			return s.CopyDtoD(ops.out[0], r, int64(st.Out[0].Elems(T)*ops.outT[0].Size()))
		}})
	}
	if shared > 0 {
		kn, err := e.k.op("executor.cu", "moe_add_shared", nil)
		if err != nil {
			return nil, err
		}
		calls = append(calls, call{"moe_add_shared", func(s Queue, T int) error {
			a, err := e.moeArgs(st, ops, T)
			if err != nil {
				return err
			}
			k := a.TopK - shared
			w2, ids2 := e.aux, e.aux.Add(align(4*int64(a.T)*int64(a.TopK)))
			g, b := grid1D(int64(a.T) * int64(a.TopK))
			return s.Launch(kn, g, b, 0, int32(a.T), int32(k), int32(shared), int32(a.E-shared), a.Weights, a.IDs, w2, ids2)
		}})
	}
	calls = append(calls, call{"MoEExperts", func(s Queue, T int) error {
		a, err := e.moeArgs(st, ops, T)
		if err != nil {
			return err
		}
		if shared > 0 {
			a.Weights, a.IDs = e.aux, e.aux.Add(align(4*int64(a.T)*int64(a.TopK)))
		}
		return e.k.MoEExperts(s, a)
	}})
	return calls, nil
}

// bindCopy: split and concat along an axis copy each piece with a strided
// row copy; a reshape of a weight is a plain copy.
func (e *Executor) bindCopy(st *lower.Step, ops *operands) ([]call, error) {
	kn, err := e.k.op("executor.cu", "copy_rows", []cuda.DType{ops.outT[0]})
	if err != nil {
		return nil, err
	}
	for _, d := range append(ops.inT, ops.outT...) {
		if d != ops.outT[0] {
			return nil, fmt.Errorf("%s of mixed dtypes", st.Op)
		}
	}
	esz := int64(ops.outT[0].Size())
	if st.Op == "reshape" {
		return []call{{"copy", func(s Queue, T int) error {
			return s.CopyDtoD(ops.out[0], ops.in[0], int64(st.Out[0].Elems(T))*esz)
		}}}, nil
	}
	whole, pieces := st.In[0], st.Out
	wp, pp := ops.in[0], ops.out
	if st.Op == "concat" {
		whole, pieces = st.Out[0], st.In
		wp, pp = ops.out[0], ops.in
	}
	axis := st.Int("axis")
	if r := len(whole.Shape); axis < 0 {
		axis += r
	}
	var calls []call
	for i := range pieces {
		i := i
		calls = append(calls, call{"copy_rows", func(s Queue, T int) error {
			wd := whole.Dims(T)
			if axis < 0 || axis >= len(wd) {
				return fmt.Errorf("axis %d out of range for %v", axis, wd)
			}
			outer := int64(1)
			for _, d := range wd[:axis] {
				outer *= int64(d)
			}
			inner := int64(whole.Elems(T)) / max(outer, 1) // elements per outer row of the whole
			var before int64
			for _, q := range pieces[:i] {
				before += int64(q.Elems(T)) / max(outer, 1)
			}
			cols := int64(pieces[i].Elems(T)) / max(outer, 1)
			src, ldi, dst, ldo := wp.Add(before*esz), inner, pp[i], cols
			if st.Op == "concat" {
				src, ldi, dst, ldo = pp[i], cols, wp.Add(before*esz), inner
			}
			g, b := grid1D(outer * cols)
			return s.Launch(kn, g, b, 0, outer, cols, src, ldi, dst, ldo)
		}})
	}
	return calls, nil
}

// workspaceBytes sizes the scratch the steps share (they run one at a
// time): the largest split-KV decode attention or MoE workspace, then the
// routes moe_grouped extends with its shared experts (aux).
func (e *Executor) workspaceBytes() (ws, aux int64, err error) {
	for _, sch := range []*lower.Schedule{e.plan.Decode, e.plan.Prefill} {
		for i := range sch.Steps {
			st := &sch.Steps[i]
			switch st.Op {
			case "attention":
				if sch.Class == lower.Decode && st.KV >= 0 && st.KV < len(e.kv) {
					ws = max(ws, e.k.DecodeWorkspaceBytes(e.kv[st.KV], st.In[0].Dims(1)[1]))
				}
			case "moe_experts", "moe_grouped":
				ops := &operands{in: make([]cuda.DevicePtr, len(st.In)), out: make([]cuda.DevicePtr, 1)}
				for _, o := range st.In {
					dt, err := dtypeOf(o.DType)
					if err != nil {
						return 0, 0, err
					}
					ops.inT = append(ops.inT, dt)
				}
				dt, err := dtypeOf(st.Out[0].DType)
				if err != nil {
					return 0, 0, err
				}
				ops.outT = []cuda.DType{dt}
				if st.Op == "moe_grouped" && st.String("gate_up") == "fused" {
					ops.in[3] = lower.Alignment // stands for the (aligned) stack; not dereferenced
				}
				for _, T := range []int{1, min(GEMVMaxRows, sch.Tokens), min(GEMVMaxRows+1, sch.Tokens), sch.Tokens} {
					a, err := e.moeArgs(st, ops, T)
					if err != nil {
						return 0, 0, fmt.Errorf("%s: %w", st.Name, err)
					}
					n, err := MoEWorkspaceBytes(a)
					if err != nil {
						return 0, 0, fmt.Errorf("%s: %w", st.Name, err)
					}
					ws = max(ws, n)
					if st.Int("shared") > 0 {
						aux = max(aux, 2*align(4*int64(a.T)*int64(a.TopK)))
					}
				}
			}
		}
	}
	if ws > math.MaxInt64/4 || aux > math.MaxInt64/4 {
		return 0, 0, fmt.Errorf("workspace of %d bytes", ws)
	}
	return align(ws), aux, nil
}
