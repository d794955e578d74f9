package passes

import (
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"lagc/config"
	"lagc/ir"
	"lagc/models"
)

// layerNodes returns the nodes of layer l (outputs named blk.l.*).
func layerNodes(g *ir.Graph, l int) []*ir.Node {
	prefix := "blk." + strconv.Itoa(l) + "."
	var out []*ir.Node
	for _, n := range g.Nodes {
		if strings.HasPrefix(n.Outputs[0].Name, prefix) {
			out = append(out, n)
		}
	}
	return out
}

// layerOps counts the op kinds of layer l.
func layerOps(g *ir.Graph, l int) map[string]int {
	m := map[string]int{}
	for _, n := range layerNodes(g, l) {
		m[n.Op]++
	}
	return m
}

// readers returns the ops of the nodes reading the named weight directly.
func readers(g *ir.Graph, weight string) []string {
	var ops []string
	for _, n := range g.Nodes {
		for _, v := range n.Inputs {
			if v.Kind == ir.Weight && v.Name == weight {
				ops = append(ops, n.Op)
			}
		}
	}
	return ops
}

// moeNode returns layer l's routed-experts node.
func moeNode(t *testing.T, g *ir.Graph, l int) *ir.Node {
	t.Helper()
	for _, n := range layerNodes(g, l) {
		if n.Op == "moe_experts" || n.Op == "moe_grouped" {
			return n
		}
	}
	t.Fatalf("layer %d has no MoE node", l)
	return nil
}

// dumpAfter runs shapes then pass on synthetic-tiny, dumping after both, and
// returns the two dumps parsed back (the text form must round-trip).
func dumpAfter(t *testing.T, pass string) (before, after *ir.Graph) {
	t.Helper()
	dir := t.TempDir()
	res, err := Run(laguna(t, "synthetic-tiny"), Options{Passes: []string{"shapes", pass}, DumpAfter: []string{"shapes", pass}, DumpDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Dumps) != 2 || filepath.Base(res.Dumps[1]) != "02-"+pass+".txt" {
		t.Fatalf("dumps %v", res.Dumps)
	}
	var gs []*ir.Graph
	for _, p := range res.Dumps {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		g, err := ir.Parse(string(b))
		if err != nil {
			t.Fatalf("%s does not parse: %v", p, err)
		}
		if err := ir.Verify(g); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		gs = append(gs, g)
	}
	return gs[0], gs[1]
}

// TestFusionDumps: the dump of synthetic-tiny's layers 0 (dense) and 1 (MoE)
// after each pass shows the fused node kinds, and the originals are gone.
func TestFusionDumps(t *testing.T) {
	cases := []struct {
		pass  string
		check func(t *testing.T, g *ir.Graph)
	}{
		{"qkvg-concat", func(t *testing.T, g *ir.Graph) {
			for l := 0; l < 4; l++ {
				if ops := layerOps(g, l); ops["matmul_split"] != 1 {
					t.Errorf("layer %d: %d matmul_split", l, ops["matmul_split"])
				}
				for _, w := range []string{"attn_q", "attn_k", "attn_v", "attn_gate"} {
					if r := readers(g, blk(l, w)); len(r) != 0 {
						t.Errorf("layer %d: %s still read by %v", l, w, r)
					}
				}
				if r := readers(g, blk(l, "attn_qkvg")); !slices.Equal(r, []string{"matmul_split"}) {
					t.Errorf("layer %d: attn_qkvg read by %v", l, r)
				}
				w := g.Value(blk(l, "attn_qkvg"))
				if w.From == nil || w.From.Op != "concat" || len(w.From.Srcs) != 4 || w.From.Srcs[3].Name != blk(l, "attn_gate") {
					t.Errorf("layer %d: qkvg weight %v not the concatenation q, k, v, gate", l, w.From)
				}
			}
		}},
		{"norm-rope", func(t *testing.T, g *ir.Graph) {
			for l := 0; l < 4; l++ {
				if ops := layerOps(g, l); ops["norm_rope"] != 2 || ops["rope"] != 0 || ops["rms_norm"] != 2 {
					t.Errorf("layer %d: ops %v", l, ops)
				}
				for _, w := range []string{"attn_q_norm", "attn_k_norm"} {
					if r := readers(g, blk(l, w)); !slices.Equal(r, []string{"norm_rope"}) {
						t.Errorf("layer %d: %s read by %v", l, w, r)
					}
				}
			}
		}},
		{"attention-gate", func(t *testing.T, g *ir.Graph) {
			for l := 0; l < 4; l++ {
				if ops := layerOps(g, l); ops["attention_gate"] != 1 || ops["attention"] != 0 || ops["softplus_gate"] != 0 {
					t.Errorf("layer %d: ops %v", l, ops)
				}
			}
		}},
		{"gate-up-fuse", func(t *testing.T, g *ir.Graph) {
			for l := 0; l < 4; l++ {
				ops := layerOps(g, l)
				if ops["silu"] != 0 || ops["mul"] != 0 || ops["matmul_swiglu"] != 1 || ops["moe_experts"] != 0 {
					t.Errorf("layer %d: ops %v", l, ops)
				}
			}
			for _, w := range []string{"blk.0.ffn_gate.weight", "blk.0.ffn_up.weight", "blk.1.ffn_gate_shexp.weight", "blk.1.ffn_up_shexp.weight",
				"blk.1.ffn_gate_exps.weight", "blk.1.ffn_up_exps.weight"} {
				if r := readers(g, w); len(r) != 0 {
					t.Errorf("%s still read by %v", w, r)
				}
			}
			if r := readers(g, "blk.0.ffn_gate_up.weight"); !slices.Equal(r, []string{"matmul_swiglu"}) {
				t.Errorf("dense gate_up read by %v", r)
			}
			moe := moeNode(t, g, 1)
			if moe.Op != "moe_grouped" || moe.AttrString("gate_up") != ir.GateUpFused || moe.Inputs[3].Name != "blk.1.ffn_gate_up_exps.weight" {
				t.Errorf("MoE node %s %v reads %s", moe.Op, moe.Attrs, moe.Inputs[3])
			}
			if got := g.Value("blk.1.ffn_gate_up_exps.weight").Type.Shape.String(); got != "[6,32,32]" {
				t.Errorf("gate_up stack %s, want [6,32,32]", got)
			}
		}},
		{"shared-expert-merge", func(t *testing.T, g *ir.Graph) {
			for l := 1; l < 4; l++ {
				ops := layerOps(g, l)
				// The shared MLP (gate, up, silu, mul, down) and add(routed,
				// shared) are gone: q, k, v, g, o and the router stay.
				if ops["silu"] != 0 || ops["mul"] != 0 || ops["matmul"] != 6 || ops["add"] != 2 {
					t.Errorf("layer %d: ops %v", l, ops)
				}
				for _, w := range []string{"ffn_gate_shexp", "ffn_up_shexp", "ffn_down_shexp"} {
					if r := readers(g, blk(l, w)); len(r) != 0 {
						t.Errorf("layer %d: %s still read by %v", l, w, r)
					}
				}
				moe := moeNode(t, g, l)
				if moe.Op != "moe_grouped" || moe.AttrInt("shared") != 1 || moe.Inputs[5].Name != blk(l, "ffn_down_exps_shexp") ||
					moe.Inputs[5].Type.Shape.String() != "[7,32,16]" {
					t.Errorf("layer %d: MoE node %s %v, down %s", l, moe.Op, moe.Attrs, moe.Inputs[5].Type)
				}
			}
		}},
		{"residual-fold", func(t *testing.T, g *ir.Graph) {
			if ops := layerOps(g, 0); ops["add"] != 0 || ops["matmul_add"] != 2 {
				t.Errorf("dense layer: ops %v", ops)
			}
			for l := 1; l < 4; l++ {
				// o_proj and the shared down fold; add(h, routed + shared) stays.
				if ops := layerOps(g, l); ops["add"] != 1 || ops["matmul_add"] != 2 {
					t.Errorf("layer %d: ops %v", l, ops)
				}
			}
			for _, w := range []string{"blk.0.attn_output.weight", "blk.0.ffn_down.weight", "blk.2.ffn_down_shexp.weight"} {
				if r := readers(g, w); !slices.Equal(r, []string{"matmul_add"}) {
					t.Errorf("%s read by %v", w, r)
				}
			}
		}},
		{"expert-order", func(t *testing.T, g *ir.Graph) {
			for l := 1; l < 4; l++ {
				moe := moeNode(t, g, l)
				if moe.Op != "moe_grouped" || moe.AttrString("order") != ir.OrderDescending {
					t.Errorf("layer %d: MoE node %s %v", l, moe.Op, moe.Attrs)
				}
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.pass, func(t *testing.T) {
			before, after := dumpAfter(t, c.pass)
			if before.String() == after.String() {
				t.Fatal("the pass changed nothing")
			}
			c.check(t, after)
		})
	}
}

func blk(l int, local string) string {
	return "blk." + strconv.Itoa(l) + "." + local + ".weight"
}

// TestFusedLayers: with every fusion a dense layer launches norm,
// matmul_split, q and k norm_ropes, attention with its gate, matmul_add,
// norm, matmul_swiglu, matmul_add; a MoE layer ends in norm, router,
// top-k and one moe_grouped (shared expert merged, residual folded,
// scheduled).
func TestFusedLayers(t *testing.T) {
	for _, preset := range []string{"synthetic-tiny", "laguna-s-2.1"} {
		g := laguna(t, preset)
		if _, err := Run(g, Options{}); err != nil {
			t.Fatal(err)
		}
		attn := map[string]int{"rms_norm": 1, "matmul_split": 1, "reshape": 4, "norm_rope": 2, "attention_gate": 1, "matmul_add": 1}
		dense := map[string]int{"rms_norm": 2, "matmul_split": 1, "reshape": 4, "norm_rope": 2, "attention_gate": 1, "matmul_add": 2, "matmul_swiglu": 1}
		moe := map[string]int{"matmul": 1, "router_topk": 1, "moe_grouped": 1}
		for k, v := range attn {
			moe[k] += v
		}
		moe["rms_norm"]++
		for l, want := range []map[string]int{dense, moe} {
			if got := layerOps(g, l); !equalCounts(got, want) {
				t.Errorf("%s layer %d: ops %v, want %v", preset, l, got, want)
			}
		}
		n := moeNode(t, g, 1)
		a := n.Attrs
		if a["gate_up"] != ir.GateUpFused || a["shared"] != 1 || a["residual"] != 1 || a["order"] != ir.OrderDescending {
			t.Errorf("%s: MoE attrs %v", preset, a)
		}
		// The text form of the fused graph round-trips.
		back, err := ir.Parse(g.String())
		if err != nil {
			t.Fatal(err)
		}
		if back.String() != g.String() {
			t.Errorf("%s: fused graph does not print back identically", preset)
		}
	}
}

func equalCounts(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestFusionPreconditions: a pass whose precondition fails leaves that part
// of the graph alone and rewrites the rest.
// quantiseRows makes w q8_0 where its rows are whole q8_0 blocks (of 32),
// as llama-quantize's fallback leaves narrower rows in another type.
func quantiseRows(w *ir.Value) {
	if sh := w.Type.Shape; len(sh) >= 2 && sh[len(sh)-1].N%32 == 0 {
		w.Type.DType = ir.Q8_0
	}
}

func TestFusionPreconditions(t *testing.T) {
	cases := []struct {
		name  string
		pass  string
		cfg   func(c *config.Config)
		graph func(g *ir.Graph)
		check func(t *testing.T, g *ir.Graph, notes []string)
	}{
		{"shared width differs from expert width", "shared-expert-merge", func(c *config.Config) { c.SharedExpertSize = 24 }, nil,
			func(t *testing.T, g *ir.Graph, notes []string) {
				for l := 1; l < 4; l++ {
					if ops := layerOps(g, l); ops["moe_grouped"] != 0 || ops["silu"] != 1 {
						t.Errorf("layer %d merged: %v", l, ops)
					}
				}
				if !slices.Contains(notes, "shared-expert-merge: 0 shared experts merged, 3 skipped (precondition)") {
					t.Errorf("notes %q", notes)
				}
			}},
		{"no shared expert", "shared-expert-merge", func(c *config.Config) { c.SharedExpertSize = 0 }, nil,
			func(t *testing.T, g *ir.Graph, notes []string) {
				if !slices.Contains(notes, "shared-expert-merge: 0 shared experts merged, 0 skipped (precondition)") {
					t.Errorf("notes %q", notes)
				}
			}},
		{"no shared expert: residual folds through the view", "residual-fold", func(c *config.Config) { c.SharedExpertSize = 0 }, nil,
			func(t *testing.T, g *ir.Graph, notes []string) {
				for l := 1; l < 4; l++ {
					if ops := layerOps(g, l); ops["add"] != 0 || ops["reshape"] != 4 || moeNode(t, g, l).AttrInt("residual") != 1 {
						t.Errorf("layer %d: %v", l, ops)
					}
				}
			}},
		{"gate and up of different dtypes", "gate-up-fuse", nil, func(g *ir.Graph) {
			g.Value("blk.0.ffn_up.weight").Type.DType = ir.F32
			g.Value("blk.2.ffn_up_exps.weight").Type.DType = ir.F32
		}, func(t *testing.T, g *ir.Graph, notes []string) {
			if ops := layerOps(g, 0); ops["matmul_swiglu"] != 0 || ops["silu"] != 1 {
				t.Errorf("dense layer fused: %v", ops)
			}
			if n := moeNode(t, g, 2); n.Op != "moe_experts" {
				t.Errorf("layer 2 experts fused: %s %v", n.Op, n.Attrs)
			}
			if n := moeNode(t, g, 1); n.AttrString("gate_up") != ir.GateUpFused {
				t.Errorf("layer 1 experts not fused: %s", n.Op)
			}
			if !slices.Contains(notes, "gate-up-fuse: 3 MLPs and 2 expert stacks fused, 2 skipped (2: dtypes differ, e.g. blk.0.ffn_gate.weight is bf16, blk.0.ffn_up.weight f32)") {
				t.Errorf("notes %q", notes)
			}
		}},
		// q, k and the gate concatenated, v apart (llama.cpp's Q4_K_S keeps
		// attn_v in q5_k): q and k still one row.
		{"v of another dtype", "qkvg-concat", nil, func(g *ir.Graph) { g.Value("blk.1.attn_v.weight").Type.DType = ir.F16 },
			func(t *testing.T, g *ir.Graph, notes []string) {
				if ops := layerOps(g, 1); ops["matmul_split"] != 1 || ops["matmul"] != 6 {
					t.Errorf("layer 1: %v, want q, k, g in one matmul_split and v apart", ops)
				}
				var split *ir.Node
				for _, n := range g.Nodes {
					if n.Op == "matmul_split" && strings.HasPrefix(n.Inputs[1].Name, "blk.1.") {
						split = n
					}
				}
				if split == nil || split.Inputs[1].Name != "blk.1.attn_qkg.weight" || len(split.Outputs) != 3 ||
					split.Outputs[0].Name != "blk.1.q" || split.Outputs[1].Name != "blk.1.k" || split.Outputs[2].Name != "blk.1.g" {
					t.Errorf("layer 1's split: %v", split)
				}
				if !slices.Contains(notes, "qkvg-concat: 4 attentions fused (1 in part: a projection of another dtype stays apart, e.g. blk.1.attn_q.weight is bf16, blk.1.attn_v.weight f16), 0 skipped (precondition)") {
					t.Errorf("notes %q", notes)
				}
			}},
		// k of another dtype than q: nothing concatenates (q and k would
		// come out apart either way).
		{"k of another dtype", "qkvg-concat", nil, func(g *ir.Graph) { g.Value("blk.1.attn_k.weight").Type.DType = ir.F16 },
			func(t *testing.T, g *ir.Graph, notes []string) {
				if ops := layerOps(g, 1); ops["matmul_split"] != 0 || ops["matmul"] != 9 {
					t.Errorf("layer 1 fused: %v", ops)
				}
				if !slices.Contains(notes, "qkvg-concat: 3 attentions fused, 1 skipped (1: dtypes differ, e.g. blk.1.attn_q.weight is bf16, blk.1.attn_k.weight f16)") {
					t.Errorf("notes %q", notes)
				}
			}},
		{"quantised shared expert of another type than the stacks", "shared-expert-merge", nil, func(g *ir.Graph) {
			for _, w := range g.Weights {
				quantiseRows(w)
				if strings.Contains(w.Name, "_shexp") && strings.HasPrefix(w.Name, "blk.2.") {
					w.Type.DType = ir.F16
				}
			}
		}, func(t *testing.T, g *ir.Graph, notes []string) {
			if n := moeNode(t, g, 1); n.AttrInt("shared") != 1 {
				t.Errorf("layer 1 (all q8_0) not merged: %v", n.Attrs)
			}
			if n := moeNode(t, g, 2); n.Op != "moe_experts" {
				t.Errorf("layer 2 (f16 shared, q8_0 stacks) merged: %v", n.Attrs)
			}
			if !slices.Contains(notes, "shared-expert-merge: 2 shared experts merged, 1 skipped (1: dtypes differ, e.g. blk.2.ffn_gate_exps.weight is q8_0, blk.2.ffn_gate_shexp.weight f16)") {
				t.Errorf("notes %q", notes)
			}
		}},
		{"quantised matrices: all fusions apply", "gate-up-fuse", nil, func(g *ir.Graph) {
			for _, w := range g.Weights {
				quantiseRows(w)
			}
		}, func(t *testing.T, g *ir.Graph, notes []string) {
			if !slices.Contains(notes, "gate-up-fuse: 4 MLPs and 3 expert stacks fused, 0 skipped (precondition)") {
				t.Errorf("notes %q", notes)
			}
			quantised := 0
			for _, w := range g.Weights {
				if w.From != nil && w.Type.DType != w.From.Srcs[0].Type.DType {
					t.Errorf("derived %s is %s, its source %s", w.Name, w.Type.DType, w.From.Srcs[0].Type.DType)
				}
				if w.From != nil && w.Type.DType == ir.Q8_0 {
					quantised++
				}
			}
			if quantised != 7 { // 4 MLPs (dense, 3 shared), 3 expert stacks
				t.Errorf("%d derived q8_0 weights, want 7", quantised)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := config.Preset("synthetic-tiny")
			if err != nil {
				t.Fatal(err)
			}
			if c.cfg != nil {
				c.cfg(cfg)
			}
			g, err := models.BuildLaguna(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if c.graph != nil {
				c.graph(g)
				if err := run1(g, "shapes"); err != nil {
					t.Fatal(err)
				}
			}
			res, err := Run(g, Options{Passes: []string{"shapes", c.pass}})
			if err != nil {
				t.Fatal(err)
			}
			c.check(t, g, res.State.Notes)
		})
	}
}

// run1 runs one pass (and the verifier).
func run1(g *ir.Graph, pass string) error {
	_, err := Run(g, Options{Passes: []string{pass}})
	return err
}

// TestResidualFoldNeedsSingleUse: a product read elsewhere is not folded.
func TestResidualFoldNeedsSingleUse(t *testing.T) {
	g := parse(t, `graph g
sym T
input %x: f32[T,4]
weight @w: bf16[4,4]
%p: f32[T,4] = matmul(%x, @w)
%y: f32[T,4] = add(%x, %p)
%z: f32[T,4] = silu(%p)
output %y, %z
`)
	res, err := Run(g, Options{Passes: []string{"residual-fold"}})
	if err != nil {
		t.Fatal(err)
	}
	if g.OpCounts()["matmul_add"] != 0 || res.State.Notes[0] != "residual-fold: 0 matmuls and 0 MoE nodes accumulate into their residual" {
		t.Fatalf("folded a shared product:\n%s", g)
	}
	g = parse(t, strings.Replace(g.String(), "%z: f32[T,4] = silu(%p)", "%z: f32[T,4] = silu(%x)", 1))
	if _, err := Run(g, Options{Passes: []string{"residual-fold"}}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(g.String(), "%y: f32[T,4] = matmul_add(%x, @w, %x)") {
		t.Fatalf("not folded:\n%s", g)
	}
}

// TestNormRoPEAttrs: each norm_rope carries its rope's attributes and its
// norm's eps, and reads the norm's input and weight.
func TestNormRoPEAttrs(t *testing.T) {
	before, after := dumpAfter(t, "norm-rope")
	n := 0
	for _, fused := range after.Nodes {
		if fused.Op != "norm_rope" {
			continue
		}
		n++
		rope := before.Value(fused.Outputs[0].Name).Def
		norm := rope.Inputs[0].Def
		if rope.Op != "rope" || norm.Op != "rms_norm" {
			t.Fatalf("%s replaced %s of %s", fused, rope.Op, norm.Op)
		}
		want := ir.Attrs{"eps": norm.Attrs["eps"]}
		maps.Copy(want, rope.Attrs)
		if fused.Attrs.Key() != want.Key() {
			t.Errorf("%s: attrs %s, want %s", fused.Outputs[0].Name, fused.Attrs.Key(), want.Key())
		}
		for i, v := range []*ir.Value{norm.Inputs[0], norm.Inputs[1], rope.Inputs[1]} {
			if fused.Inputs[i].Name != v.Name {
				t.Errorf("%s: input %d is %s, want %s", fused.Outputs[0].Name, i, fused.Inputs[i].Name, v.Name)
			}
		}
	}
	if n != 8 {
		t.Errorf("%d norm_rope nodes, want 8 (q and k of 4 layers)", n)
	}
}

// TestNormRoPENeedsSingleUse: a norm whose output is read elsewhere stays
// unfused.
func TestNormRoPENeedsSingleUse(t *testing.T) {
	src := `graph g
sym T
input %x: f32[T,2,8]
input %pos: i32[T]
weight @w: f32[8]
%n: f32[T,2,8] = rms_norm(%x, @w) {eps=1e-06}
%r: f32[T,2,8] = rope(%n, %pos) {rotary_dim=4, theta=10000}
%s: f32[T,2,8] = silu(%n)
output %r, %s
`
	g := parse(t, src)
	res, err := Run(g, Options{Passes: []string{"norm-rope"}})
	if err != nil {
		t.Fatal(err)
	}
	if g.OpCounts()["norm_rope"] != 0 || res.State.Notes[0] != "norm-rope: 0 head norms fused into their rope, 1 skipped (the norm's output is read elsewhere)" {
		t.Fatalf("fused a shared norm (%q):\n%s", res.State.Notes, g)
	}
	g = parse(t, strings.Replace(src, "silu(%n)", "silu(%x)", 1))
	res, err = Run(g, Options{Passes: []string{"norm-rope"}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(g.String(), "%r: f32[T,2,8] = norm_rope(%x, @w, %pos) {eps=1e-06, rotary_dim=4, theta=10000.0}") ||
		g.OpCounts()["rms_norm"] != 0 || res.State.Notes[0] != "norm-rope: 1 head norms fused into their rope, 0 skipped (the norm's output is read elsewhere)" {
		t.Fatalf("not fused (%q):\n%s", res.State.Notes, g)
	}
}

// TestNormRoPEEitherSideOfQKVG: qkvg-concat finds the projections through
// norm_rope as through rms_norm and rope, so the two passes commute.
func TestNormRoPEEitherSideOfQKVG(t *testing.T) {
	var counts []map[string]int
	for _, order := range [][]string{{"shapes", "qkvg-concat", "norm-rope"}, {"shapes", "norm-rope", "qkvg-concat"}} {
		g := laguna(t, "synthetic-tiny")
		if _, err := Run(g, Options{Passes: order}); err != nil {
			t.Fatal(err)
		}
		counts = append(counts, g.OpCounts())
	}
	if !equalCounts(counts[0], counts[1]) || counts[0]["norm_rope"] != 8 || counts[0]["matmul_split"] != 4 {
		t.Errorf("ops %v, in the other order %v", counts[0], counts[1])
	}
}

// TestAttentionGateAttrs: each attention_gate carries its attention's
// attributes and its gate's gating, and reads the attention's inputs and
// the gate.
func TestAttentionGateAttrs(t *testing.T) {
	before, after := dumpAfter(t, "attention-gate")
	n := 0
	for _, fused := range after.Nodes {
		if fused.Op != "attention_gate" {
			continue
		}
		n++
		gate := before.Value(fused.Outputs[0].Name).Def
		at := gate.Inputs[0].Def
		if gate.Op != "softplus_gate" || at.Op != "attention" {
			t.Fatalf("%s replaced %s of %s", fused, gate.Op, at.Op)
		}
		want := maps.Clone(at.Attrs)
		want["gating"] = gate.Attrs["gating"]
		if fused.Attrs.Key() != want.Key() {
			t.Errorf("%s: attrs %s, want %s", fused.Outputs[0].Name, fused.Attrs.Key(), want.Key())
		}
		for i, v := range append(append([]*ir.Value(nil), at.Inputs...), gate.Inputs[1]) {
			if fused.Inputs[i].Name != v.Name {
				t.Errorf("%s: input %d is %s, want %s", fused.Outputs[0].Name, i, fused.Inputs[i].Name, v.Name)
			}
		}
	}
	if n != 4 {
		t.Errorf("%d attention_gate nodes, want 4 (one per layer)", n)
	}
}

// TestAttentionGateNeedsSingleUse: an attention whose output is read
// elsewhere keeps its separate gate.
func TestAttentionGateNeedsSingleUse(t *testing.T) {
	src := `graph g
sym T
input %q: f32[T,4,8]
input %k: f32[T,2,8]
input %pos: i32[T]
input %g: f32[T,4]
%o: f32[T,4,8] = attention(%q, %k, %k, %pos) {layer=0, scale=0.35}
%og: f32[T,4,8] = softplus_gate(%o, %g) {gating="per-head"}
%s: f32[T,4,8] = silu(%o)
output %og, %s
`
	g := parse(t, src)
	res, err := Run(g, Options{Passes: []string{"attention-gate"}})
	if err != nil {
		t.Fatal(err)
	}
	if g.OpCounts()["attention_gate"] != 0 || res.State.Notes[0] != "attention-gate: 0 output gates fused into their attention, 1 skipped (the attention's output is read elsewhere)" {
		t.Fatalf("fused a shared attention output (%q):\n%s", res.State.Notes, g)
	}
	g = parse(t, strings.Replace(src, "silu(%o)", "silu(%q)", 1))
	res, err = Run(g, Options{Passes: []string{"attention-gate"}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(g.String(), `%og: f32[T,4,8] = attention_gate(%q, %k, %k, %pos, %g) {layer=0, scale=0.35, gating="per-head"}`) ||
		g.OpCounts()["attention"] != 0 || res.State.Notes[0] != "attention-gate: 1 output gates fused into their attention, 0 skipped (the attention's output is read elsewhere)" {
		t.Fatalf("not fused (%q):\n%s", res.State.Notes, g)
	}
}

// TestAttentionGateEitherSideOfQKVG: qkvg-concat finds the gate projection
// through attention_gate as through softplus_gate, so the two passes
// commute.
func TestAttentionGateEitherSideOfQKVG(t *testing.T) {
	var counts []map[string]int
	for _, order := range [][]string{{"shapes", "qkvg-concat", "attention-gate"}, {"shapes", "attention-gate", "qkvg-concat"}} {
		g := laguna(t, "synthetic-tiny")
		if _, err := Run(g, Options{Passes: order}); err != nil {
			t.Fatal(err)
		}
		counts = append(counts, g.OpCounts())
		for l := 0; l < 4; l++ {
			if r := readers(g, blk(l, "attn_gate")); len(r) != 0 {
				t.Errorf("%v: layer %d: attn_gate still read by %v", order, l, r)
			}
		}
	}
	if !equalCounts(counts[0], counts[1]) || counts[0]["attention_gate"] != 4 || counts[0]["matmul_split"] != 4 {
		t.Errorf("ops %v, in the other order %v", counts[0], counts[1])
	}
}

// TestFusionIdempotent: a second run of every fusion finds nothing to do.
func TestFusionIdempotent(t *testing.T) {
	g := laguna(t, "synthetic-tiny")
	if _, err := Run(g, Options{Passes: append([]string{"shapes"}, FusionPasses...)}); err != nil {
		t.Fatal(err)
	}
	once := g.String()
	for _, p := range FusionPasses {
		if err := run1(g, p); err != nil {
			t.Fatal(err)
		}
	}
	if g.String() != once {
		t.Fatal("a second run changed the graph")
	}
}

func TestFusionOrdering(t *testing.T) {
	for _, c := range []struct {
		passes []string
		want   string
	}{
		{[]string{"shapes", "residual-fold", "shared-expert-merge"}, "pass shared-expert-merge must run before residual-fold"},
		{[]string{"shapes", "cse", "qkvg-concat"}, "pass qkvg-concat must run before cse"},
		{[]string{"shapes", "expert-order", "gate-up-fuse"}, "pass gate-up-fuse must run before expert-order"},
		{[]string{"memplan", "expert-order"}, "pass expert-order must run before memplan"},
	} {
		_, err := Run(laguna(t, "synthetic-tiny"), Options{Passes: c.passes})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: got %v, want %q", c.passes, err, c.want)
		}
	}
	// Each fusion is selectable alone and can be disabled from the default.
	for _, p := range FusionPasses {
		res, err := Run(laguna(t, "synthetic-tiny"), Options{Disable: []string{p}})
		if err != nil {
			t.Fatal(err)
		}
		for _, tm := range res.Timings {
			if tm.Name == p {
				t.Errorf("disabled %s ran", p)
			}
		}
	}
}

// TestFusionOperandOrder: with the operands of every add and mul swapped,
// the fusions match as before (add and mul are commutative), so the fused
// graph has the same ops.
func TestFusionOperandOrder(t *testing.T) {
	swap := regexp.MustCompile(`= (add|mul)\((%[^,]+), (%[^)]+)\)`)
	src := laguna(t, "synthetic-tiny").String()
	swapped := swap.ReplaceAllString(src, "= $1($3, $2)")
	if n := len(swap.FindAllString(src, -1)); n < 10 || swapped == src {
		t.Fatalf("%d adds and muls swapped", n)
	}
	counts := map[string]map[string]int{}
	var notes []string
	for _, text := range []string{src, swapped} {
		g := parse(t, text)
		res, err := Run(g, Options{})
		if err != nil {
			t.Fatal(err)
		}
		counts[text] = g.OpCounts()
		notes = append(notes, strings.Join(res.State.Notes[1:7], "; "))
	}
	if !equalCounts(counts[src], counts[swapped]) || notes[0] != notes[1] || counts[src]["moe_grouped"] != 3 {
		t.Errorf("ops %v, with operands swapped %v\nnotes %q", counts[src], counts[swapped], notes)
	}
}
