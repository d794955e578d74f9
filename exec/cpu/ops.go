package cpu

import (
	"fmt"
	"maps"
	"slices"

	"lagc/ir"
	"lagc/quant"
)

// operands are one node's data for a step: its inputs with their concrete
// shapes and its outputs (float or int32 by dtype). Each node keeps its
// operands across steps; the shapes are evaluated again only when the
// step's token count changes.
type operands struct {
	f   [][]float32 // float inputs (f32 weights included)
	m   []*Matrix   // weight inputs, in their stored types
	i   [][]int32   // int32 inputs
	sh  [][]int     // input shapes
	osh [][]int     // output shapes
	out [][]float32 // float outputs
	ids [][]int32   // int32 outputs
	env int         // the step's token count sh and osh were evaluated for (0: none yet)
	// rows and last view the first input as [rows, last].
	rows, last int
}

// gather reads n's inputs from the step's values and allocates its outputs
// (none for reshape, whose output is a view of its input).
func (e *Executor) gather(n *ir.Node, env ir.Env, f32 map[*ir.Value][]float32, i32 map[*ir.Value][]int32) (*operands, error) {
	o := e.operands[n]
	if o == nil {
		o = &operands{f: make([][]float32, len(n.Inputs)), m: make([]*Matrix, len(n.Inputs)), i: make([][]int32, len(n.Inputs)),
			sh: make([][]int, len(n.Inputs)), osh: make([][]int, len(n.Outputs)), out: make([][]float32, len(n.Outputs)),
			ids: make([][]int32, len(n.Outputs))}
		e.operands[n] = o
	}
	if key := e.pool.tokens; key != o.env {
		for k, v := range n.Inputs {
			s, err := v.Type.Shape.Eval(env)
			if err != nil {
				return nil, err
			}
			o.sh[k] = s
		}
		for k, v := range n.Outputs {
			s, err := v.Type.Shape.Eval(env)
			if err != nil {
				return nil, err
			}
			o.osh[k] = s
		}
		o.env = key
	}
	for k, v := range n.Inputs {
		o.f[k], o.m[k], o.i[k] = nil, nil, nil
		if m, ok := e.weights[v]; ok {
			o.m[k] = m
			if m.Type == quant.F32 {
				o.f[k] = m.F32
			}
		} else if v.Type.DType == ir.I32 {
			o.i[k] = i32[v]
		} else {
			o.f[k] = f32[v]
		}
		if o.i[k] == nil && o.f[k] == nil && o.m[k] == nil {
			return nil, fmt.Errorf("input %d (%s) has no value", k, v)
		}
		if o.m[k] == nil && o.f[k] != nil && isMatrixInput(n.Op, k) {
			// An activation in a weight's place (a reshape node of a
			// weight, say): a float32 matrix of its rows.
			sh := o.sh[k]
			cols := sh[len(sh)-1]
			o.m[k] = MatrixF32(o.f[k], prodInts(sh)/max(cols, 1), cols)
		}
	}
	if n.Op == "reshape" {
		f32[n.Outputs[0]] = o.f[0]
		return o, nil
	}
	for k, v := range n.Outputs {
		o.out[k], o.ids[k] = nil, nil
		if v.Type.DType == ir.I32 {
			o.ids[k] = make([]int32, prodInts(o.osh[k]))
			i32[v] = o.ids[k]
		} else {
			o.out[k] = e.pool.get(prodInts(o.osh[k]))
			f32[v] = o.out[k]
		}
	}
	return o, nil
}

// run executes one node with the kernel registered for its op.
func (e *Executor) run(n *ir.Node, env ir.Env, f32 map[*ir.Value][]float32, i32 map[*ir.Value][]int32) error {
	k, ok := kernels[n.Op]
	if !ok {
		return fmt.Errorf("the CPU executor has no kernel for op %q", n.Op)
	}
	o, err := e.gather(n, env, f32, i32)
	if err != nil {
		return err
	}
	x := o.sh[0]
	o.last = x[len(x)-1]
	o.rows = prodInts(x) / max(o.last, 1)
	return k(e, n, env, o)
}

// kernel runs one node of an op on its gathered operands.
type kernel func(e *Executor, n *ir.Node, env ir.Env, o *operands) error

// kernels binds each ir op (docs/CONTRACTS.md) to its kernel in this
// package. Weight matrices (o.m) are in their stored types.
var kernels = map[string]kernel{
	"reshape": func(e *Executor, n *ir.Node, env ir.Env, o *operands) error {
		return nil // a view, bound by gather
	},
	"embedding": func(e *Executor, n *ir.Node, env ir.Env, o *operands) error {
		return embedding(o.out[0], o.i[0], o.m[1])
	},
	"rms_norm": func(e *Executor, n *ir.Node, env ir.Env, o *operands) error {
		return RMSNorm(o.out[0], o.f[0], o.f[1], o.rows, o.last, float32(n.AttrFloat("eps")))
	},
	"matmul": func(e *Executor, n *ir.Node, env ir.Env, o *operands) error {
		return MatMulMatrix(o.out[0], o.f[0], o.m[1], o.rows)
	},
	"split": func(e *Executor, n *ir.Node, env ir.Env, o *operands) error {
		outer, sizes := axisSplit(o.osh, n.AttrInt("axis"))
		return Split(o.out, o.f[0], outer, sizes)
	},
	"concat": func(e *Executor, n *ir.Node, env ir.Env, o *operands) error {
		outer, sizes := axisSplit(o.sh, n.AttrInt("axis"))
		return Concat(o.out[0], o.f, outer, sizes)
	},
	"rope": func(e *Executor, n *ir.Node, env ir.Env, o *operands) error {
		x := o.sh[0]
		return RoPE(o.out[0], o.f[0], o.i[1], x[0], x[1], x[2], e.ropes[n])
	},
	"attention": func(e *Executor, n *ir.Node, env ir.Env, o *operands) error {
		x := o.sh[0]
		return BatchAttention(o.out[0], o.f[0], o.f[1], o.f[2], o.i[3], x[0], x[1], o.sh[1][1], x[2],
			n.AttrInt("window"), float32(n.AttrFloat("scale")), e.attnSeqs(n.AttrInt("layer")))
	},
	"attention_gate": func(e *Executor, n *ir.Node, env ir.Env, o *operands) error {
		x := o.sh[0]
		g := o.sh[4]
		return AttentionGate(o.out[0], o.f[0], o.f[1], o.f[2], o.f[4], o.i[3], x[0], x[1], o.sh[1][1], x[2], g[len(g)-1],
			n.AttrInt("window"), float32(n.AttrFloat("scale")), e.attnSeqs(n.AttrInt("layer")))
	},
	"softplus_gate": func(e *Executor, n *ir.Node, env ir.Env, o *operands) error {
		x := o.sh[0]
		if len(x) != 3 {
			return fmt.Errorf("softplus_gate input must be [T,nh,d], got %v", x)
		}
		g := o.sh[1]
		return SoftplusGate(o.out[0], o.f[0], o.f[1], x[0], x[1], x[2], g[len(g)-1])
	},
	"silu": func(e *Executor, n *ir.Node, env ir.Env, o *operands) error { return SiLU(o.out[0], o.f[0]) },
	"mul":  func(e *Executor, n *ir.Node, env ir.Env, o *operands) error { return Mul(o.out[0], o.f[0], o.f[1]) },
	"add":  func(e *Executor, n *ir.Node, env ir.Env, o *operands) error { return Add(o.out[0], o.f[0], o.f[1]) },
	"router_topk": func(e *Executor, n *ir.Node, env ir.Env, o *operands) error {
		return RouterTopK(o.out[0], o.ids[1], o.f[0], o.f[1], o.rows, o.last, n.AttrInt("top_k"),
			float32(n.AttrFloat("softcap")), float32(n.AttrFloat("routed_scaling")))
	},
	"moe_experts": func(e *Executor, n *ir.Node, env ir.Env, o *operands) error {
		gate := o.sh[3]
		return moeExperts(o.out[0], o.f[0], o.f[1], o.i[2], o.m[3], o.m[4], o.m[5], o.rows, o.last, gate[0], gate[1], o.sh[1][1])
	},
	"argmax": func(e *Executor, n *ir.Node, env ir.Env, o *operands) error {
		return ArgMax(o.ids[0], o.f[0], o.rows, o.last)
	},
	// Fused ops (passes/fuse_*.go).
	"matmul_split": func(e *Executor, n *ir.Node, env ir.Env, o *operands) error {
		return matmulSplit(o.out, o.f[0], o.m[1], o.rows, n.AttrInts("sizes"))
	},
	"matmul_swiglu": func(e *Executor, n *ir.Node, env ir.Env, o *operands) error {
		return matmulSwiGLU(o.out[0], o.f[0], o.m[1], o.rows)
	},
	"matmul_add": func(e *Executor, n *ir.Node, env ir.Env, o *operands) error {
		return matmulAdd(o.out[0], o.f[0], o.f[2], o.m[1], o.rows)
	},
	"moe_grouped": func(e *Executor, n *ir.Node, env ir.Env, o *operands) error {
		return moeGrouped(n, o, o.rows, o.last)
	},
	"norm_rope": func(e *Executor, n *ir.Node, env ir.Env, o *operands) error {
		x := o.sh[0]
		return NormRoPE(o.out[0], o.f[0], o.f[1], o.i[2], x[0], x[1], x[2], float32(n.AttrFloat("eps")), e.ropes[n])
	},
}

// Ops lists the ops this package has a kernel for, sorted.
func Ops() []string { return slices.Sorted(maps.Keys(kernels)) }

// moeGrouped binds moe_grouped, whose inputs depend on its layout
// attributes: x, weights, ids, gate and up (or gate_up), down, [residual].
func moeGrouped(n *ir.Node, o *operands, rows, last int) error {
	layout, residual := n.AttrString("gate_up"), n.AttrInt("residual")
	if len(n.Inputs) != ir.MoEGroupedInputs(layout, residual) {
		return fmt.Errorf("moe_grouped with gate_up=%s residual=%d has %d inputs", layout, residual, len(n.Inputs))
	}
	down := len(n.Inputs) - 1 - residual
	ds := o.sh[down] // [E,H,I]
	m := &GroupedMoE{T: rows, H: last, I: ds[2], K: o.sh[1][1], E: ds[0], Shared: n.AttrInt("shared"),
		Down: o.m[down], Descending: n.AttrString("order") == ir.OrderDescending}
	if layout == ir.GateUpFused {
		m.GateUp = o.m[3]
	} else {
		m.Gate, m.Up = o.m[3], o.m[4]
	}
	if residual != 0 {
		m.Residual = o.f[len(n.Inputs)-1]
	}
	return MoEGrouped(o.out[0], o.f[0], o.f[1], o.i[2], m)
}
