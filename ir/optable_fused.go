package ir

import "fmt"

// Fused ops: the forms the fusion passes (passes/fuse_*.go) rewrite the
// graph into. Each runs as one GPU kernel where its parts ran as several
// (a GEMM with an epilogue, the MoE grouped GEMM, a head norm with its
// rope, an attention with its output gate) and computes exactly what its
// unfused composition does; docs/CONTRACTS.md ("Fused ops") is the
// contract.

// MoE grouped-GEMM schedules (the `order` attribute of moe_grouped).
const (
	OrderIndex      = "index"      // experts in ascending index
	OrderDescending = "descending" // most tokens routed this step first
)

// moe_grouped weight layouts (the `gate_up` attribute).
const (
	GateUpSplit = "split" // stacks gate [E,I,H], up [E,I,H], down [E,H,I]
	GateUpFused = "fused" // stacks gate_up [E,2I,H] (gate rows first), down [E,H,I]
)

func init() {
	defOp(&OpDef{Name: "matmul_split", Doc: "y_i = x w_i^T for the row blocks w_i (sizes) of one concatenated weight w [sum(sizes),K]: one GEMM, one output per block",
		Inputs: []string{"x", "w"},
		Attrs:  []AttrSpec{{Name: "sizes", Kind: AttrKindInts, Required: true}},
		Infer: func(in []Type, a Attrs) ([]Type, error) {
			x, w, err := matmulOperands(in)
			if err != nil {
				return nil, err
			}
			sizes := a["sizes"].([]int)
			sum := 0
			for _, s := range sizes {
				if s <= 0 {
					return nil, fmt.Errorf("sizes must be positive, got %v", sizes)
				}
				sum += s
			}
			if len(sizes) == 0 || !w[0].IsConst() || w[0].N != sum {
				return nil, fmt.Errorf("sizes %v do not add up to the %s rows of w %s", sizes, w[0], in[1])
			}
			out := make([]Type, len(sizes))
			for i, s := range sizes {
				sh := x.Clone()
				sh[len(sh)-1] = C(s)
				out[i] = Type{in[0].DType, sh}
			}
			return out, nil
		}})
	defOp(&OpDef{Name: "matmul_swiglu", Doc: "silu(x g^T) * (x u^T) for w [2N,K] = gate rows g then up rows u -> [...,N]: a GEMM with a silu*mul epilogue",
		Inputs: []string{"x", "w"},
		Infer: func(in []Type, a Attrs) ([]Type, error) {
			x, w, err := matmulOperands(in)
			if err != nil {
				return nil, err
			}
			if !w[0].IsConst() || w[0].N%2 != 0 || w[0].N == 0 {
				return nil, fmt.Errorf("w %s must have an even, constant number of rows (gate then up)", in[1])
			}
			out := x.Clone()
			out[len(out)-1] = C(w[0].N / 2)
			return []Type{{in[0].DType, out}}, nil
		}})
	defOp(&OpDef{Name: "matmul_add", Doc: "r + x w^T for x [...,K], w [N,K], r [...,N]: a GEMM whose epilogue accumulates into the residual r",
		Inputs:  []string{"x", "w", "r"},
		InPlace: func(*Node) int { return 2 },
		Infer: func(in []Type, a Attrs) ([]Type, error) {
			x, w, err := matmulOperands(in)
			if err != nil {
				return nil, err
			}
			if err := wantFloat(in, 2, "r", -1); err != nil {
				return nil, err
			}
			want := x.Clone()
			want[len(want)-1] = w[0]
			if in[2].DType != in[0].DType || !in[2].Shape.Equal(want) {
				return nil, fmt.Errorf("residual r %s must be %s", in[2], Type{in[0].DType, want})
			}
			return []Type{in[2]}, nil
		}})
	defOp(&OpDef{Name: "norm_rope", Doc: "rope(rms_norm(x, w), pos) for x [T,n,d], w [d]: each head's d channels normalised, then rotated, in float32",
		Inputs: []string{"x", "w", "pos"},
		Attrs:  append([]AttrSpec{epsAttr}, ropeAttrs...),
		Infer: func(in []Type, a Attrs) ([]Type, error) {
			if _, err := inferRMSNorm(in, a); err != nil {
				return nil, err
			}
			return inferRoPE(in, 0, 2, a)
		}})
	defOp(&OpDef{Name: "attention_gate", Doc: "softplus_gate(attention(q, k, v, pos), g): the attention (appending k, v to KV cache `layer`) with its output gate applied as it writes",
		Inputs:     []string{"q", "k", "v", "pos", "g"},
		Attrs:      append(append([]AttrSpec(nil), attentionAttrs...), gatingAttr),
		SideEffect: true,
		KVCache:    true,
		Infer: func(in []Type, a Attrs) ([]Type, error) {
			if _, err := inferAttention(in, a); err != nil {
				return nil, err
			}
			return inferSoftplusGate(in, 0, 4, a)
		}})
	defOp(&OpDef{Name: "moe_grouped", Doc: "routed experts (+ `shared` always-selected experts of weight 1 at the end of the stacks, + residual r) as one grouped GEMM; order schedules it",
		Inputs: []string{"x", "weights", "ids", "stacks..."},
		Attrs: []AttrSpec{
			// split: stacks gate, up, down; fused: gate_up, down.
			{Name: "gate_up", Kind: AttrKindString, Default: GateUpSplit, Enum: []string{GateUpSplit, GateUpFused}},
			// Experts at the end of the stacks applied to every token with weight 1.
			{Name: "shared", Kind: AttrKindInt, Default: 0},
			// 1: one more input r [T,H]; the result is r + the experts' sum.
			{Name: "residual", Kind: AttrKindInt, Default: 0},
			// Schedule only (results never depend on it): the order the
			// grouped GEMM visits experts.
			{Name: "order", Kind: AttrKindString, Default: OrderIndex, Enum: []string{OrderIndex, OrderDescending}},
		},
		// The residual, when there is one, is the last input.
		InPlace: func(n *Node) int {
			if n.AttrInt("residual") == 0 {
				return -1
			}
			return len(n.Inputs) - 1
		},
		Infer: inferMoEGrouped})
}

// matmulOperands checks x [...,K] and w [N,K] and returns their shapes.
func matmulOperands(in []Type) (Shape, Shape, error) {
	if err := wantFloat(in, 0, "x", -1); err != nil {
		return nil, nil, err
	}
	if err := wantFloat(in, 1, "w", 2); err != nil {
		return nil, nil, err
	}
	x, w := in[0].Shape, in[1].Shape
	if len(x) == 0 || x[len(x)-1] != w[1] {
		return nil, nil, fmt.Errorf("x %s and w %s disagree on K", in[0], in[1])
	}
	return x, w, nil
}

// MoEGroupedInputs returns how many inputs a moe_grouped node with these
// attributes takes: x, weights, ids, the stacks, and the residual.
func MoEGroupedInputs(gateUp string, residual int) int {
	n := 3 + 3
	if gateUp == GateUpFused {
		n = 3 + 2
	}
	if residual != 0 {
		n++
	}
	return n
}

func inferMoEGrouped(in []Type, a Attrs) ([]Type, error) {
	layout, shared, residual := a["gate_up"].(string), a["shared"].(int), a["residual"].(int)
	if shared < 0 || shared > 1 || residual < 0 || residual > 1 {
		return nil, fmt.Errorf("shared and residual must be 0 or 1, got %d, %d", shared, residual)
	}
	if n := MoEGroupedInputs(layout, residual); len(in) != n {
		return nil, fmt.Errorf("gate_up=%s residual=%d takes %d inputs, got %d", layout, residual, n, len(in))
	}
	if err := wantFloat(in, 0, "x", 2); err != nil {
		return nil, err
	}
	if err := want(in, 1, "weights", F32, 2); err != nil {
		return nil, err
	}
	if err := want(in, 2, "ids", I32, 2); err != nil {
		return nil, err
	}
	x, w, ids := in[0].Shape, in[1].Shape, in[2].Shape
	if !w.Equal(ids) || w[0] != x[0] {
		return nil, fmt.Errorf("weights %s and ids %s must both be [T,k] for x %s", in[1], in[2], in[0])
	}
	H := x[1]
	var gate, down Shape
	var iw Dim // the expert width I
	if layout == GateUpFused {
		for i, n := range []string{"gate_up", "down"} {
			if err := wantFloat(in, 3+i, n, 3); err != nil {
				return nil, err
			}
		}
		gate, down = in[3].Shape, in[4].Shape
		if !gate[1].IsConst() || gate[1].N%2 != 0 {
			return nil, fmt.Errorf("gate_up %s must have 2I rows per expert", in[3])
		}
		iw = C(gate[1].N / 2)
	} else {
		for i, n := range []string{"gate", "up", "down"} {
			if err := wantFloat(in, 3+i, n, 3); err != nil {
				return nil, err
			}
		}
		gate, down = in[3].Shape, in[5].Shape
		if !gate.Equal(in[4].Shape) {
			return nil, fmt.Errorf("gate %s and up %s differ", in[3], in[4])
		}
		iw = gate[1]
	}
	if gate[2] != H || down[0] != gate[0] || down[1] != H || down[2] != iw {
		return nil, fmt.Errorf("expert stacks %s and down %s do not fit H = %s", gate, down, H)
	}
	if !gate[0].IsConst() || gate[0].N <= shared {
		return nil, fmt.Errorf("stack of %s experts leaves none routed with %d shared", gate[0], shared)
	}
	if residual != 0 {
		r := len(in) - 1
		if err := wantFloat(in, r, "r", 2); err != nil {
			return nil, err
		}
		if !in[r].Equal(in[0]) {
			return nil, fmt.Errorf("residual r %s must match x %s", in[r], in[0])
		}
	}
	return []Type{in[0]}, nil
}
