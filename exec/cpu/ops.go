package cpu

import (
	"fmt"

	"lagc/ir"
)

// run executes one node: the binding of each ir op (docs/CONTRACTS.md) to
// its kernel in this package.
func (e *Executor) run(n *ir.Node, env ir.Env, f32 map[*ir.Value][]float32, i32 map[*ir.Value][]int32) error {
	shape := func(v *ir.Value) ([]int, error) { return v.Type.Shape.Eval(env) }
	in := func(i int) []float32 { return f32[n.Inputs[i]] }
	out := func(i int) ([]float32, error) {
		s, err := shape(n.Outputs[i])
		if err != nil {
			return nil, err
		}
		buf := make([]float32, prodInts(s))
		f32[n.Outputs[i]] = buf
		return buf, nil
	}
	for i, v := range n.Inputs {
		if v.Type.DType == ir.I32 {
			if i32[v] == nil {
				return fmt.Errorf("input %d (%s) has no value", i, v)
			}
		} else if f32[v] == nil {
			return fmt.Errorf("input %d (%s) has no value", i, v)
		}
	}
	xs, err := shape(n.Inputs[0])
	if err != nil {
		return err
	}
	last := xs[len(xs)-1]
	rows := prodInts(xs) / max(last, 1)

	switch n.Op {
	case "embedding":
		ts, err := shape(n.Inputs[1])
		if err != nil {
			return err
		}
		o, err := out(0)
		if err != nil {
			return err
		}
		return Embedding(o, i32[n.Inputs[0]], in(1), ts[0], ts[1])
	case "rms_norm":
		o, err := out(0)
		if err != nil {
			return err
		}
		return RMSNorm(o, in(0), in(1), rows, last, float32(n.AttrFloat("eps")))
	case "matmul":
		ws, err := shape(n.Inputs[1])
		if err != nil {
			return err
		}
		o, err := out(0)
		if err != nil {
			return err
		}
		return MatMul(o, in(0), in(1), rows, last, ws[0])
	case "reshape":
		// A view: same data, new shape.
		f32[n.Outputs[0]] = in(0)
		return nil
	case "split":
		parts := make([][]float32, len(n.Outputs))
		shapes := make([][]int, len(n.Outputs))
		for i := range n.Outputs {
			if parts[i], err = out(i); err != nil {
				return err
			}
			if shapes[i], err = shape(n.Outputs[i]); err != nil {
				return err
			}
		}
		outer, sizes := axisSplit(shapes, n.AttrInt("axis"))
		return Split(parts, in(0), outer, sizes)
	case "concat":
		parts := make([][]float32, len(n.Inputs))
		shapes := make([][]int, len(n.Inputs))
		for i := range n.Inputs {
			parts[i] = in(i)
			if shapes[i], err = shape(n.Inputs[i]); err != nil {
				return err
			}
		}
		o, err := out(0)
		if err != nil {
			return err
		}
		outer, sizes := axisSplit(shapes, n.AttrInt("axis"))
		return Concat(o, parts, outer, sizes)
	case "rope":
		o, err := out(0)
		if err != nil {
			return err
		}
		return RoPE(o, in(0), i32[n.Inputs[1]], xs[0], xs[1], xs[2], e.ropes[n])
	case "attention":
		ks, err := shape(n.Inputs[1])
		if err != nil {
			return err
		}
		o, err := out(0)
		if err != nil {
			return err
		}
		return Attention(o, in(0), in(1), in(2), i32[n.Inputs[3]], xs[0], xs[1], ks[1], xs[2],
			n.AttrInt("window"), float32(n.AttrFloat("scale")), e.caches[n.AttrInt("layer")])
	case "softplus_gate":
		gs, err := shape(n.Inputs[1])
		if err != nil {
			return err
		}
		if len(xs) != 3 {
			return fmt.Errorf("softplus_gate input must be [T,nh,d], got %v", xs)
		}
		o, err := out(0)
		if err != nil {
			return err
		}
		return SoftplusGate(o, in(0), in(1), xs[0], xs[1], xs[2], gs[len(gs)-1])
	case "silu":
		o, err := out(0)
		if err != nil {
			return err
		}
		return SiLU(o, in(0))
	case "mul", "add":
		o, err := out(0)
		if err != nil {
			return err
		}
		if n.Op == "mul" {
			return Mul(o, in(0), in(1))
		}
		return Add(o, in(0), in(1))
	case "router_topk":
		k := n.AttrInt("top_k")
		w, err := out(0)
		if err != nil {
			return err
		}
		ids := make([]int32, rows*k)
		i32[n.Outputs[1]] = ids
		return RouterTopK(w, ids, in(0), in(1), rows, last, k, float32(n.AttrFloat("softcap")), float32(n.AttrFloat("routed_scaling")))
	case "moe_experts":
		gs, err := shape(n.Inputs[3])
		if err != nil {
			return err
		}
		ws, err := shape(n.Inputs[1])
		if err != nil {
			return err
		}
		o, err := out(0)
		if err != nil {
			return err
		}
		return MoEExperts(o, in(0), in(1), i32[n.Inputs[2]], in(3), in(4), in(5), rows, last, gs[0], gs[1], ws[1])
	case "matmul_split", "matmul_swiglu", "matmul_add", "moe_grouped":
		return e.runFused(n, env, rows, last, f32, i32, out)
	case "argmax":
		ids := make([]int32, rows)
		i32[n.Outputs[0]] = ids
		return ArgMax(ids, in(0), rows, last)
	}
	return fmt.Errorf("the CPU executor has no kernel for op %q", n.Op)
}
