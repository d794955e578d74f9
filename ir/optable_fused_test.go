package ir

import (
	"strings"
	"testing"
)

func TestFusedOpTypes(t *testing.T) {
	ty := func(s string) Type {
		t.Helper()
		v, err := ParseType(s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	x, m := ty("f32[T,32]"), ty("f32[T,32]")
	w, ids := ty("f32[T,2]"), ty("i32[T,2]")
	g, d := ty("bf16[6,16,32]"), ty("bf16[6,32,16]")
	gu := ty("bf16[6,32,32]")
	rope := Attrs{"eps": 1e-6, "rotary_dim": 4, "theta": 1e4}
	aq, akv, apos := ty("bf16[T,6,8]"), ty("bf16[T,2,8]"), ty("i32[T]")
	attn := func(gating string) Attrs { return Attrs{"layer": 3, "window": 4, "scale": 0.35, "gating": gating} }
	cases := []struct {
		op    string
		in    []Type
		attrs Attrs
		want  string // output types joined by " ", or an error substring
	}{
		{"matmul_split", []Type{x, ty("bf16[50,32]")}, Attrs{"sizes": []int{16, 16, 16, 2}}, "f32[T,16] f32[T,16] f32[T,16] f32[T,2]"},
		{"matmul_split", []Type{x, ty("bf16[50,32]")}, Attrs{"sizes": []int{16, 16, 16}}, "do not add up"},
		{"matmul_split", []Type{x, ty("bf16[50,32]")}, Attrs{"sizes": []int{50, 0}}, "must be positive"},
		{"matmul_split", []Type{x, ty("bf16[50,31]")}, Attrs{"sizes": []int{50}}, "disagree on K"},
		{"matmul_split", []Type{x, ty("bf16[50,32]")}, nil, "needs attribute sizes"},
		{"matmul_swiglu", []Type{x, ty("bf16[96,32]")}, nil, "f32[T,48]"},
		{"matmul_swiglu", []Type{x, ty("bf16[95,32]")}, nil, "even"},
		{"matmul_add", []Type{ty("f32[T,16]"), ty("bf16[32,16]"), x}, nil, "f32[T,32]"},
		{"matmul_add", []Type{ty("f32[T,16]"), ty("bf16[32,16]"), ty("f32[T,16]")}, nil, "residual r f32[T,16] must be f32[T,32]"},
		{"matmul_add", []Type{ty("f32[T,16]"), ty("bf16[32,16]"), ty("bf16[T,32]")}, nil, "must be f32[T,32]"},
		{"moe_grouped", []Type{m, w, ids, g, g, d}, nil, "f32[T,32]"},
		{"moe_grouped", []Type{m, w, ids, gu, d}, Attrs{"gate_up": "fused"}, "f32[T,32]"},
		{"moe_grouped", []Type{m, w, ids, gu, d, x}, Attrs{"gate_up": "fused", "residual": 1, "shared": 1, "order": "descending"}, "f32[T,32]"},
		{"moe_grouped", []Type{m, w, ids, gu, d}, nil, "takes 6 inputs, got 5"},
		{"moe_grouped", []Type{m, w, ids, g, g, d}, Attrs{"residual": 1}, "takes 7 inputs"},
		{"moe_grouped", []Type{m, w, ids, g, ty("bf16[6,16,31]"), d}, nil, "gate bf16[6,16,32] and up bf16[6,16,31] differ"},
		{"moe_grouped", []Type{m, w, ids, ty("bf16[6,31,32]"), d}, Attrs{"gate_up": "fused"}, "2I rows"},
		{"moe_grouped", []Type{m, w, ids, g, g, ty("bf16[5,32,16]")}, nil, "do not fit"},
		{"moe_grouped", []Type{m, w, ids, ty("bf16[1,16,32]"), ty("bf16[1,16,32]"), ty("bf16[1,32,16]")}, Attrs{"shared": 1}, "leaves none routed"},
		{"moe_grouped", []Type{m, w, ids, g, g, d}, Attrs{"shared": 2}, "must be 0 or 1"},
		{"moe_grouped", []Type{m, w, ids, g, g, d}, Attrs{"order": "random"}, "expected one of"},
		{"moe_grouped", []Type{m, w, ids, g, g, d, ty("f32[T,16]")}, Attrs{"residual": 1}, "must match x"},
		{"moe_grouped", []Type{m, w, ty("f32[T,2]"), g, g, d}, nil, "input ids: expected i32"},
		{"norm_rope", []Type{ty("f32[T,4,8]"), ty("f32[8]"), ty("i32[T]")}, rope, "f32[T,4,8]"},
		{"norm_rope", []Type{ty("bf16[T,4,8]"), ty("bf16[8]"), ty("i32[T]")}, Attrs{"eps": 1e-6, "rotary_dim": 8, "theta": 1e4, "rope_type": "yarn", "factor": 4.0, "original_context": 64}, "bf16[T,4,8]"},
		{"norm_rope", []Type{ty("f32[T,4,8]"), ty("f32[4]"), ty("i32[T]")}, rope, "does not match the last axis"},
		{"norm_rope", []Type{ty("f32[T,32]"), ty("f32[32]"), ty("i32[T]")}, rope, "input x: expected rank 3"},
		{"norm_rope", []Type{ty("f32[T,4,8]"), ty("f32[8]"), ty("i32[2]")}, rope, "expected i32[T]"},
		{"norm_rope", []Type{ty("f32[T,4,8]"), ty("f32[8]"), ty("i32[T]")}, Attrs{"eps": 0.0, "rotary_dim": 4, "theta": 1e4}, "eps must be positive"},
		{"norm_rope", []Type{ty("f32[T,4,8]"), ty("f32[8]"), ty("i32[T]")}, Attrs{"eps": 1e-6, "rotary_dim": 10, "theta": 1e4}, "rotary_dim 10 must be even"},
		{"norm_rope", []Type{ty("f32[T,4,8]"), ty("f32[8]"), ty("i32[T]")}, Attrs{"rotary_dim": 4, "theta": 1e4}, "needs attribute eps"},
		{"norm_rope", []Type{ty("f32[T,4,8]"), ty("f32[8]"), ty("i32[T]")}, Attrs{"eps": 1e-6, "rotary_dim": 4, "theta": 1e4, "rope_type": "yarn"}, "yarn rope needs"},
		{"attention_gate", []Type{aq, akv, akv, apos, ty("bf16[T,6]")}, attn("per-head"), "bf16[T,6,8]"},
		{"attention_gate", []Type{aq, akv, akv, apos, ty("bf16[T,48]")}, attn("per-element"), "bf16[T,6,8]"},
		{"attention_gate", []Type{aq, akv, akv, apos, ty("bf16[T,48]")}, attn("per-head"), "g bf16[T,48] does not fit x bf16[T,6,8] with per-head gating: expected [T,6]"},
		{"attention_gate", []Type{aq, akv, akv, apos, ty("bf16[T,6]")}, attn("per-element"), "expected [T,48]"},
		{"attention_gate", []Type{aq, akv, akv, apos, ty("bf16[T,6,1]")}, attn("per-head"), "input g: expected rank 2"},
		{"attention_gate", []Type{aq, ty("bf16[T,4,8]"), ty("bf16[T,4,8]"), apos, ty("bf16[T,6]")}, attn("per-head"), "must be a multiple of kv heads"},
		{"attention_gate", []Type{aq, akv, akv, ty("i32[2]"), ty("bf16[T,6]")}, attn("per-head"), "expected i32[T]"},
		{"attention_gate", []Type{aq, akv, akv, apos, ty("bf16[T,6]")}, Attrs{"layer": 0, "scale": 0.5}, "needs attribute gating"},
		{"attention_gate", []Type{aq, akv, akv, apos, ty("bf16[T,6]")}, Attrs{"layer": -1, "scale": 0.5, "gating": "per-head"}, "must be non-negative"},
		{"attention_gate", []Type{aq, akv, akv, apos}, attn("per-head"), "takes 5 inputs"},
	}
	for _, c := range cases {
		out, err := InferTypes(c.op, c.in, c.attrs)
		got := ""
		if err != nil {
			got = err.Error()
		} else {
			var parts []string
			for _, o := range out {
				parts = append(parts, o.String())
			}
			got = strings.Join(parts, " ")
		}
		if !strings.Contains(got, c.want) {
			t.Errorf("%s%v %v: got %q, want %q", c.op, c.in, c.attrs, got, c.want)
		}
	}
}

// TestFusedOpsText: multi-output and variadic fused nodes print and parse
// back.
func TestFusedOpsText(t *testing.T) {
	src := `graph g
sym T
input %x: f32[T,8]
input %w: f32[T,2]
input %ids: i32[T,2]
weight @wq: bf16[6,8]
weight @wo: bf16[8,4]
weight @gu: bf16[3,8,8]
weight @d: bf16[3,8,4]
%q: f32[T,4], %g: f32[T,2] = matmul_split(%x, @wq) {sizes=[4,2]}
%h: f32[T,8] = matmul_add(%q, @wo, %x)
%s: f32[T,3] = matmul_swiglu(%h, @wq)
%y: f32[T,8] = moe_grouped(%h, %w, %ids, @gu, @d, %x) {gate_up="fused", shared=1, residual=1, order="descending"}
output %y, %s, %g
`
	g, err := Parse(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := Verify(g); err != nil {
		t.Fatal(err)
	}
	if g.String() != src {
		t.Fatalf("round trip:\n%s\nwant\n%s", g, src)
	}
}
