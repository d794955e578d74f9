package ir

import "fmt"

// The op table: one entry per op of docs/CONTRACTS.md. Activations are
// row-major; T is the number of tokens in the step. Frontends build graphs
// whose activations are f32; ops propagate the dtype of their activation
// input, so a later pass may narrow it.

func init() {
	defOp(&OpDef{Name: "embedding", Doc: "rows of table [V,H] selected by tokens i32[T] -> f32[T,H] (no scaling)",
		Inputs: []string{"tokens", "table"},
		Infer: func(in []Type, a Attrs) ([]Type, error) {
			if err := want(in, 0, "tokens", I32, 1); err != nil {
				return nil, err
			}
			if err := wantFloat(in, 1, "table", 2); err != nil {
				return nil, err
			}
			return []Type{{F32, Shape{in[0].Shape[0], in[1].Shape[1]}}}, nil
		}})
	defOp(&OpDef{Name: "rms_norm", Doc: "w * x / sqrt(mean(x^2) + eps) over the last axis of x [...,N] with w [N], in float32",
		Inputs: []string{"x", "w"},
		Attrs:  []AttrSpec{epsAttr},
		Infer:  inferRMSNorm})
	defOp(&OpDef{Name: "matmul", Doc: "y = x w^T for x [...,K] and a weight w [N,K] in HF layout -> [...,N]",
		Inputs: []string{"x", "w"},
		Infer: func(in []Type, a Attrs) ([]Type, error) {
			if err := wantFloat(in, 0, "x", -1); err != nil {
				return nil, err
			}
			if err := wantFloat(in, 1, "w", 2); err != nil {
				return nil, err
			}
			x, w := in[0].Shape, in[1].Shape
			if len(x) == 0 || x[len(x)-1] != w[1] {
				return nil, fmt.Errorf("x %s and w %s disagree on K", in[0], in[1])
			}
			out := x.Clone()
			out[len(out)-1] = w[0]
			return []Type{{in[0].DType, out}}, nil
		}})
	defOp(&OpDef{Name: "reshape", Doc: "view x with a new shape of the same number of elements (symbols must match)",
		Inputs: []string{"x"},
		Attrs:  []AttrSpec{{Name: "shape", Kind: AttrKindShape, Required: true}},
		Infer: func(in []Type, a Attrs) ([]Type, error) {
			to := a["shape"].(Shape)
			if !sameElems(in[0].Shape, to) {
				return nil, fmt.Errorf("cannot reshape %s to %s", in[0], to)
			}
			return []Type{{in[0].DType, to.Clone()}}, nil
		}})
	defOp(&OpDef{Name: "split", Doc: "cut x along axis into pieces of the given sizes (one output each)",
		Inputs: []string{"x"},
		Attrs:  []AttrSpec{{Name: "axis", Kind: AttrKindInt, Required: true}, {Name: "sizes", Kind: AttrKindInts, Required: true}},
		Infer: func(in []Type, a Attrs) ([]Type, error) {
			ax, err := axis(in[0].Shape, a["axis"].(int))
			if err != nil {
				return nil, err
			}
			sizes := a["sizes"].([]int)
			d := in[0].Shape[ax]
			sum := 0
			for _, s := range sizes {
				if s <= 0 {
					return nil, fmt.Errorf("split sizes must be positive, got %v", sizes)
				}
				sum += s
			}
			if !d.IsConst() || d.N != sum || len(sizes) == 0 {
				return nil, fmt.Errorf("sizes %v do not add up to axis %d of %s", sizes, ax, in[0])
			}
			out := make([]Type, len(sizes))
			for i, s := range sizes {
				sh := in[0].Shape.Clone()
				sh[ax] = C(s)
				out[i] = Type{in[0].DType, sh}
			}
			return out, nil
		}})
	defOp(&OpDef{Name: "concat", Doc: "join xs along axis; the other dimensions must agree",
		Inputs: []string{"xs..."},
		Attrs:  []AttrSpec{{Name: "axis", Kind: AttrKindInt, Required: true}},
		Infer: func(in []Type, a Attrs) ([]Type, error) {
			ax, err := axis(in[0].Shape, a["axis"].(int))
			if err != nil {
				return nil, err
			}
			out := in[0].Shape.Clone()
			total := 0
			for i, t := range in {
				if t.DType != in[0].DType || len(t.Shape) != len(out) {
					return nil, fmt.Errorf("input %d %s does not match input 0 %s", i, t, in[0])
				}
				for j, d := range t.Shape {
					if j != ax && d != out[j] {
						return nil, fmt.Errorf("input %d %s does not match input 0 %s off axis %d", i, t, in[0], ax)
					}
				}
				if !t.Shape[ax].IsConst() {
					return nil, fmt.Errorf("cannot concat along symbolic axis %d of %s", ax, t)
				}
				total += t.Shape[ax].N
			}
			out[ax] = C(total)
			return []Type{{in[0].DType, out}}, nil
		}})
	defOp(&OpDef{Name: "rope", Doc: "NeoX rotate-half rotary embedding of the first rotary_dim channels of x [T,n,d] at pos (default or YaRN)",
		Inputs: []string{"x", "pos"},
		Attrs:  ropeAttrs,
		Infer: func(in []Type, a Attrs) ([]Type, error) {
			return inferRoPE(in, 0, 1, a)
		}})
	defOp(&OpDef{Name: "attention", Doc: "append k,v at pos to KV cache `layer` (ring of `window` slots if window > 0), then causal GQA attention of q",
		Inputs:     []string{"q", "k", "v", "pos"},
		Attrs:      attentionAttrs,
		SideEffect: true,
		KVCache:    true,
		Infer:      inferAttention})
	defOp(&OpDef{Name: "softplus_gate", Doc: "x [T,nh,d] * softplus(g) with g [T,nh] (per-head) or [T,nh*d] (per-element), in float32",
		Inputs: []string{"x", "g"},
		Attrs:  []AttrSpec{gatingAttr},
		Infer: func(in []Type, a Attrs) ([]Type, error) {
			return inferSoftplusGate(in, 0, 1, a)
		}})
	unary := func(name, doc string) {
		defOp(&OpDef{Name: name, Doc: doc, Inputs: []string{"x"},
			Infer: func(in []Type, a Attrs) ([]Type, error) {
				if err := wantFloat(in, 0, "x", -1); err != nil {
					return nil, err
				}
				return []Type{in[0]}, nil
			}})
	}
	binary := func(name, doc string) {
		defOp(&OpDef{Name: name, Doc: doc, Inputs: []string{"a", "b"}, Commutative: true,
			Infer: func(in []Type, a Attrs) ([]Type, error) {
				if err := wantFloat(in, 0, "a", -1); err != nil {
					return nil, err
				}
				if !in[0].Equal(in[1]) {
					return nil, fmt.Errorf("operands differ: a %s, b %s", in[0], in[1])
				}
				return []Type{in[0]}, nil
			}})
	}
	unary("silu", "x * sigmoid(x), elementwise")
	binary("mul", "a * b, elementwise; same type")
	binary("add", "a + b, elementwise; same type")
	defOp(&OpDef{Name: "router_topk", Doc: "MoE router: softcap, sigmoid, top-k by score+bias, weights = score/sum * routed_scaling",
		Inputs: []string{"logits", "bias"},
		Attrs: []AttrSpec{
			{Name: "top_k", Kind: AttrKindInt, Required: true},
			{Name: "softcap", Kind: AttrKindFloat, Default: 0.0},
			{Name: "routed_scaling", Kind: AttrKindFloat, Default: 1.0},
		},
		Infer: func(in []Type, a Attrs) ([]Type, error) {
			if err := want(in, 0, "logits", F32, 2); err != nil {
				return nil, err
			}
			if err := wantFloat(in, 1, "bias", 1); err != nil {
				return nil, err
			}
			e := in[0].Shape[1]
			if in[1].Shape[0] != e {
				return nil, fmt.Errorf("bias %s does not match %s experts of logits %s", in[1], e, in[0])
			}
			k := a["top_k"].(int)
			if !e.IsConst() || k <= 0 || k > e.N {
				return nil, fmt.Errorf("top_k %d must be in [1, %s]", k, e)
			}
			t := in[0].Shape[0]
			return []Type{{F32, Shape{t, C(k)}}, {I32, Shape{t, C(k)}}}, nil
		}})
	defOp(&OpDef{Name: "moe_experts", Doc: "sum_j weights_j * down_e(silu(gate_e x) * up_e x) over the selected experts e = ids_j",
		Inputs: []string{"x", "weights", "ids", "gate", "up", "down"},
		Infer: func(in []Type, a Attrs) ([]Type, error) {
			if err := wantFloat(in, 0, "x", 2); err != nil {
				return nil, err
			}
			if err := want(in, 1, "weights", F32, 2); err != nil {
				return nil, err
			}
			if err := want(in, 2, "ids", I32, 2); err != nil {
				return nil, err
			}
			for i, n := range []string{"gate", "up", "down"} {
				if err := wantFloat(in, 3+i, n, 3); err != nil {
					return nil, err
				}
			}
			x, w, ids, g, u, d := in[0].Shape, in[1].Shape, in[2].Shape, in[3].Shape, in[4].Shape, in[5].Shape
			if !w.Equal(ids) || w[0] != x[0] {
				return nil, fmt.Errorf("weights %s and ids %s must both be [T,k] for x %s", in[1], in[2], in[0])
			}
			if !g.Equal(u) || g[2] != x[1] || d[0] != g[0] || d[1] != x[1] || d[2] != g[1] {
				return nil, fmt.Errorf("expert weights gate %s, up %s, down %s: expected [E,Ie,H], [E,Ie,H], [E,H,Ie] with H = %s", in[3], in[4], in[5], x[1])
			}
			return []Type{in[0]}, nil
		}})
	defOp(&OpDef{Name: "argmax", Doc: "index of the largest entry of the last axis of x [...,V] -> i32[...] (first on ties)",
		Inputs: []string{"x"},
		Infer: func(in []Type, a Attrs) ([]Type, error) {
			if err := wantFloat(in, 0, "x", -1); err != nil {
				return nil, err
			}
			if len(in[0].Shape) == 0 {
				return nil, fmt.Errorf("argmax of a scalar")
			}
			return []Type{{I32, in[0].Shape[:len(in[0].Shape)-1].Clone()}}, nil
		}})
}

// want checks input i's dtype and rank (rank < 0: any).
func want(in []Type, i int, name string, dt DType, rank int) error {
	if in[i].DType != dt {
		return fmt.Errorf("input %s: expected %s, got %s", name, dt, in[i])
	}
	return wantRank(in, i, name, rank)
}

func wantFloat(in []Type, i int, name string, rank int) error {
	if !in[i].DType.IsFloat() {
		return fmt.Errorf("input %s: expected a float dtype, got %s", name, in[i])
	}
	return wantRank(in, i, name, rank)
}

func wantRank(in []Type, i int, name string, rank int) error {
	if rank >= 0 && len(in[i].Shape) != rank {
		return fmt.Errorf("input %s: expected rank %d, got %s", name, rank, in[i])
	}
	return nil
}

// wantPos checks that input i is the positions vector i32[t].
func wantPos(in []Type, i int, t Dim) error {
	if err := want(in, i, "pos", I32, 1); err != nil {
		return err
	}
	if in[i].Shape[0] != t {
		return fmt.Errorf("input pos %s: expected i32[%s]", in[i], t)
	}
	return nil
}

func axis(s Shape, a int) (int, error) {
	if a < 0 {
		a += len(s)
	}
	if a < 0 || a >= len(s) {
		return 0, fmt.Errorf("axis %d out of range for rank %d", a, len(s))
	}
	return a, nil
}

// sameElems reports whether two shapes hold the same number of elements:
// equal constant products and the same symbols with the same multiplicity.
func sameElems(a, b Shape) bool {
	pa, pb := 1, 1
	syms := map[string]int{}
	for _, d := range a {
		if d.IsConst() {
			pa *= d.N
		} else {
			syms[d.Sym]++
		}
	}
	for _, d := range b {
		if d.IsConst() {
			pb *= d.N
		} else {
			syms[d.Sym]--
		}
	}
	for _, n := range syms {
		if n != 0 {
			return false
		}
	}
	return pa == pb
}

// epsAttr is the epsilon of rms_norm (and of norm_rope).
var epsAttr = AttrSpec{Name: "eps", Kind: AttrKindFloat, Required: true}

// inferRMSNorm checks x [...,N] (input 0), w [N] (input 1) and eps; the
// result is x's type.
func inferRMSNorm(in []Type, a Attrs) ([]Type, error) {
	if eps, ok := a["eps"].(float64); ok && !(eps > 0) {
		return nil, fmt.Errorf("eps must be positive, got %g", eps)
	}
	if err := wantFloat(in, 0, "x", -1); err != nil {
		return nil, err
	}
	if err := wantFloat(in, 1, "w", 1); err != nil {
		return nil, err
	}
	if len(in[0].Shape) == 0 || in[0].Shape[len(in[0].Shape)-1] != in[1].Shape[0] {
		return nil, fmt.Errorf("w %s does not match the last axis of x %s", in[1], in[0])
	}
	return []Type{in[0]}, nil
}

// ropeAttrs are the rotary parameters of rope (and of norm_rope).
var ropeAttrs = []AttrSpec{
	{Name: "rotary_dim", Kind: AttrKindInt, Required: true},
	{Name: "theta", Kind: AttrKindFloat, Required: true},
	{Name: "rope_type", Kind: AttrKindString, Default: "default", Enum: []string{"default", "yarn"}},
	{Name: "factor", Kind: AttrKindFloat, Default: 1.0},
	{Name: "original_context", Kind: AttrKindInt, Default: 0},
	{Name: "beta_fast", Kind: AttrKindFloat, Default: 32.0},
	{Name: "beta_slow", Kind: AttrKindFloat, Default: 1.0},
	// The resolved multiplier of cos and sin (1 for default rope).
	{Name: "attention_factor", Kind: AttrKindFloat, Default: 1.0},
}

// inferRoPE checks the rotated input x [T,n,d] (input xi) and the
// positions (input pi) against the rotary attributes; the result is x's
// type.
func inferRoPE(in []Type, xi, pi int, a Attrs) ([]Type, error) {
	if err := wantFloat(in, xi, "x", 3); err != nil {
		return nil, err
	}
	if err := wantPos(in, pi, in[xi].Shape[0]); err != nil {
		return nil, err
	}
	d, r := in[xi].Shape[2], a["rotary_dim"].(int)
	if !d.IsConst() || r <= 0 || r%2 != 0 || r > d.N {
		return nil, fmt.Errorf("rotary_dim %d must be even and in (0, %s]", r, d)
	}
	if a["rope_type"] == "yarn" && (a["factor"].(float64) <= 0 || a["original_context"].(int) <= 0) {
		return nil, fmt.Errorf("yarn rope needs factor > 0 and original_context > 0")
	}
	return []Type{in[xi]}, nil
}

// attentionAttrs are the attributes of attention (and of attention_gate).
var attentionAttrs = []AttrSpec{
	{Name: "layer", Kind: AttrKindInt, Required: true},
	{Name: "window", Kind: AttrKindInt, Default: 0},
	{Name: "scale", Kind: AttrKindFloat, Required: true},
}

// inferAttention checks q [T,nh,d], k and v [T,nkv,d] and pos (inputs 0
// to 3) and the attributes; the result is q's type.
func inferAttention(in []Type, a Attrs) ([]Type, error) {
	for i, n := range []string{"q", "k", "v"} {
		if err := wantFloat(in, i, n, 3); err != nil {
			return nil, err
		}
	}
	q, k, v := in[0].Shape, in[1].Shape, in[2].Shape
	if !k.Equal(v) || k[0] != q[0] || k[2] != q[2] {
		return nil, fmt.Errorf("q %s, k %s, v %s: expected [T,nh,d], [T,nkv,d], [T,nkv,d]", in[0], in[1], in[2])
	}
	if !q[1].IsConst() || !k[1].IsConst() || k[1].N == 0 || q[1].N%k[1].N != 0 {
		return nil, fmt.Errorf("query heads %s must be a multiple of kv heads %s", q[1], k[1])
	}
	if err := wantPos(in, 3, q[0]); err != nil {
		return nil, err
	}
	if a["layer"].(int) < 0 || a["window"].(int) < 0 {
		return nil, fmt.Errorf("layer and window must be non-negative")
	}
	return []Type{in[0]}, nil
}

// gatingAttr is the gate granularity of softplus_gate (and of
// attention_gate).
var gatingAttr = AttrSpec{Name: "gating", Kind: AttrKindString, Required: true, Enum: []string{"per-head", "per-element"}}

// inferSoftplusGate checks the gated x [T,nh,d] (input xi) and the gate g
// (input gi) against the gating; the result is x's type.
func inferSoftplusGate(in []Type, xi, gi int, a Attrs) ([]Type, error) {
	if err := wantFloat(in, xi, "x", 3); err != nil {
		return nil, err
	}
	if err := wantFloat(in, gi, "g", 2); err != nil {
		return nil, err
	}
	x, g := in[xi].Shape, in[gi].Shape
	want := x[1]
	if a["gating"] == "per-element" {
		if !x[1].IsConst() || !x[2].IsConst() {
			return nil, fmt.Errorf("per-element gating needs constant heads and head_dim in %s", in[xi])
		}
		want = C(x[1].N * x[2].N)
	}
	if g[0] != x[0] || g[1] != want {
		return nil, fmt.Errorf("g %s does not fit x %s with %s gating: expected [%s,%s]", in[gi], in[xi], a["gating"], x[0], want)
	}
	return []Type{in[xi]}, nil
}
