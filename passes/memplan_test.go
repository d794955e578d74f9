package passes

import (
	"maps"
	"testing"

	"lagc/ir"
)

// checkHolds runs g over p's arena symbolically: every node's outputs
// (views aside) overwrite their bytes, and every value a node reads must
// still be in its bytes then, as must the graph's outputs at the end. An
// output written in place is checked like any other: its input is read
// before the node writes.
func checkHolds(t *testing.T, g *ir.Graph, p *MemoryPlan) {
	t.Helper()
	order, err := g.Order()
	if err != nil {
		t.Fatal(err)
	}
	type resident struct {
		off, end int64
		v        *ir.Value
	}
	var mem []resident
	span := func(v *ir.Value) (int64, int64) {
		b := p.Buffers[p.byName[v.Name]]
		return b.Offset, b.Offset + b.Size
	}
	// content is the value whose bytes v reads: a view reads its source's.
	content := func(v *ir.Value) *ir.Value {
		for v.Def != nil && v.Def.Op == "reshape" && v.Def.Inputs[0].Kind != ir.Weight {
			v = v.Def.Inputs[0]
		}
		return v
	}
	write := func(v *ir.Value) {
		off, end := span(v)
		kept := mem[:0]
		for _, r := range mem {
			if r.end <= off || end <= r.off {
				kept = append(kept, r)
			}
		}
		mem = append(kept, resident{off, end, v})
	}
	holds := func(v *ir.Value) bool {
		off, end := span(v)
		for _, r := range mem {
			if r.v == content(v) && r.off <= off && end <= r.end {
				return true
			}
		}
		return false
	}
	for _, v := range g.Inputs {
		write(v)
	}
	for _, n := range order {
		for _, v := range n.Inputs {
			if v.Kind != ir.Weight && !holds(v) {
				t.Fatalf("T=%d %s: %%%s was overwritten before %s reads it", p.Tokens, p.DType, v.Name, n)
			}
		}
		if n.Op == "reshape" && n.Inputs[0].Kind != ir.Weight {
			continue
		}
		for _, v := range n.Outputs {
			write(v)
		}
	}
	for _, v := range g.Outputs {
		if !holds(v) {
			t.Fatalf("T=%d %s: output %%%s was overwritten", p.Tokens, p.DType, v.Name)
		}
	}
}

// inPlaceOf maps each output written in place to the owner of its buffer.
func inPlaceOf(p *MemoryPlan) map[string]string {
	out := map[string]string{}
	for _, b := range p.Buffers {
		if b.InPlace {
			out[b.Value] = b.Owner
		}
	}
	return out
}

func TestMemoryPlanInPlace(t *testing.T) {
	const head = `graph g
sym T
input %x: f32[T,8]
input %rw: f32[T,2]
input %ids: i32[T,2]
weight @w: bf16[8,8]
weight @gu: bf16[3,8,8]
weight @d: bf16[3,8,4]
%a: f32[T,8] = silu(%x)
%b: f32[T,8] = silu(%a)
`
	for _, c := range []struct {
		name, body string
		want       map[string]string // in-place output -> buffer owner
	}{
		{"residual dies", `%h: f32[T,8] = matmul_add(%b, @w, %a)
%y: f32[T,8] = silu(%h)
output %y
`, map[string]string{"h": "a"}},
		{"residual read later", `%h: f32[T,8] = matmul_add(%b, @w, %a)
%y: f32[T,8] = add(%h, %a)
output %y
`, map[string]string{}},
		{"a view of the residual read later", `%v: f32[T,2,4] = reshape(%a) {shape=[T,2,4]}
%h: f32[T,8] = matmul_add(%b, @w, %a)
%y: f32[T,2,4] = silu(%v)
output %y, %h
`, map[string]string{}},
		{"residual a view of a dead value", `%v: f32[T,2,4] = reshape(%a) {shape=[T,2,4]}
%u: f32[T,8] = reshape(%v) {shape=[T,8]}
%h: f32[T,8] = matmul_add(%b, @w, %u)
output %h
`, map[string]string{"h": "a"}},
		{"residual a graph input", `%h: f32[T,8] = matmul_add(%b, @w, %x)
output %h
`, map[string]string{}},
		{"residual a graph output", `%h: f32[T,8] = matmul_add(%b, @w, %a)
output %h, %a
`, map[string]string{}},
		{"x is the residual", `%h: f32[T,8] = matmul_add(%a, @w, %a)
output %h
`, map[string]string{}},
		{"x a view of the residual", `%v: f32[T,8] = reshape(%a) {shape=[T,8]}
%h: f32[T,8] = matmul_add(%v, @w, %a)
output %h
`, map[string]string{}},
		{"a chain of residuals", `%h1: f32[T,8] = matmul_add(%b, @w, %a)
%h2: f32[T,8] = matmul_add(%b, @w, %h1)
%h3: f32[T,8] = matmul_add(%h2, @w, %h2)
output %h3
`, map[string]string{"h1": "a", "h2": "a"}},
		{"moe residual", `%y: f32[T,8] = moe_grouped(%b, %rw, %ids, @gu, @d, %a) {gate_up="fused", residual=1}
output %y
`, map[string]string{"y": "a"}},
		{"moe without residual", `%y: f32[T,8] = moe_grouped(%b, %rw, %ids, @gu, @d) {gate_up="fused"}
%z: f32[T,8] = add(%y, %a)
output %z
`, map[string]string{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := parse(t, head+c.body)
			if err := ir.Verify(g); err != nil {
				t.Fatal(err)
			}
			for _, T := range []int{1, 5} {
				for _, dt := range []ir.DType{ir.F32, ir.BF16} {
					p, err := PlanMemory(g, T, dt)
					if err != nil {
						t.Fatal(err)
					}
					checkPlan(t, p)
					checkHolds(t, g, p)
					if got := inPlaceOf(p); !maps.Equal(got, c.want) {
						t.Fatalf("T=%d %s: in place %v, want %v", T, dt, got, c.want)
					}
					for v, o := range c.want {
						vo, _ := p.Offset(v)
						oo, _ := p.Offset(o)
						if owner, _ := p.Owner(v); vo != oo || owner != o {
							t.Errorf("T=%d %s: %%%s at %d (owner %s), %%%s at %d", T, dt, v, vo, owner, o, oo)
						}
					}
				}
			}
		})
	}
}
