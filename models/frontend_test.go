package models

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"lagc/config"
	"lagc/ir"
)

func preset(t testing.TB, name string) *config.Config {
	t.Helper()
	c, err := config.Preset(name)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func build(t testing.TB, c *config.Config) *ir.Graph {
	t.Helper()
	g, err := BuildLaguna(c)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestLagunaS21 checks the numbers LAGUNA.md gives for Laguna-S-2.1 and
// its layer pattern, as read back from the built graph.
func TestLagunaS21(t *testing.T) {
	g := build(t, preset(t, "laguna-s-2.1"))
	total, active := g.ParamCount()
	if got := fmt.Sprintf("%.2fB total, %.2fB active", float64(total)/1e9, float64(active)/1e9); got != "117.56B total, 8.14B active" {
		t.Errorf("parameters: %s (%d, %d)", got, total, active)
	}
	layers := LayerTable(g)
	if len(layers) != 48 {
		t.Fatalf("%d layers", len(layers))
	}
	for _, li := range layers {
		full := li.Layer%4 == 0
		wantHeads, wantWindow, wantMLP := 72, 512, "moe"
		if full {
			wantHeads, wantWindow = 48, 0
		}
		if li.Layer == 0 {
			wantMLP = config.MLPDense
		}
		if li.Sliding == full || li.Heads != wantHeads || li.Window != wantWindow || li.KVHeads != 8 || li.MLP != wantMLP {
			t.Errorf("layer %d: %+v", li.Layer, li)
		}
	}
	counts := g.OpCounts()
	want := map[string]int{"attention": 48, "moe_experts": 47, "router_topk": 47, "rope": 96, "embedding": 1, "argmax": 1, "softplus_gate": 48}
	for op, n := range want {
		if counts[op] != n {
			t.Errorf("%s: %d nodes, want %d", op, counts[op], n)
		}
	}
}

func TestLagunaXS2Layers(t *testing.T) {
	layers := LayerTable(build(t, preset(t, "laguna-xs-2")))
	heads := [4]int{48, 64, 64, 64}
	if len(layers) != 40 {
		t.Fatalf("%d layers", len(layers))
	}
	for _, li := range layers {
		if li.Heads != heads[li.Layer%4] || li.Sliding != (li.Layer%4 != 0) {
			t.Errorf("layer %d: %+v", li.Layer, li)
		}
	}
}

// TestTextRoundTrip prints the whole graph, parses it back, prints again.
func TestTextRoundTrip(t *testing.T) {
	for _, name := range []string{"synthetic-tiny", "laguna-s-2.1"} {
		t.Run(name, func(t *testing.T) {
			g := build(t, preset(t, name))
			text := g.String()
			g2, err := ir.Parse(text)
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			if text2 := g2.String(); text2 != text {
				t.Fatalf("round trip differs (%d vs %d bytes)", len(text), len(text2))
			}
		})
	}
}

// TestTinyGraph checks the small model end to end; on failure it prints
// the whole graph.
func TestTinyGraph(t *testing.T) {
	c := preset(t, "synthetic-tiny")
	g := build(t, c)
	text := g.String()
	wants := []string{
		"%e: f32[T,32] = embedding(%tokens, @token_embd.weight)",
		"%blk.0.qh: f32[T,4,8] = reshape(%blk.0.q) {shape=[T,4,8]}",
		`%blk.0.qr: f32[T,4,8] = rope(%blk.0.qn, %pos) {rotary_dim=4, theta=500000.0, rope_type="yarn", factor=4.0, original_context=16, beta_fast=32.0, beta_slow=1.0, attention_factor=1.138629436111989}`,
		`%blk.1.kr: f32[T,2,8] = rope(%blk.1.kn, %pos) {rotary_dim=8, theta=10000.0, rope_type="default"`,
		"%blk.0.o: f32[T,4,8] = attention(%blk.0.qr, %blk.0.kr, %blk.0.vh, %pos) {layer=0, window=0, scale=0.35355339059327373}",
		"%blk.3.o: f32[T,2,8] = attention(%blk.3.qr, %blk.3.kr, %blk.3.vh, %pos) {layer=3, window=5,",
		`%blk.2.og: f32[T,2,8] = softplus_gate(%blk.2.o, %blk.2.g) {gating="per-head"}`,
		"%blk.0.mo: f32[T,32] = matmul(%blk.0.mm, @blk.0.ffn_down.weight)",
		"%blk.1.rw: f32[T,2], %blk.1.ids: i32[T,2] = router_topk(%blk.1.rl, @blk.1.exp_probs_b.bias) {top_k=2, softcap=30.0, routed_scaling=2.5}",
		"weight @blk.1.ffn_down_exps.weight: bf16[6,32,16]",
		"weight @blk.1.exp_probs_b.bias: f32[6]",
		"%blk.3.out: f32[T,32] = add(%blk.3.h, %blk.3.mo)",
		"%logits: f32[T,64] = matmul(%hn, @output.weight)",
		"output %logits, %next",
	}
	for _, w := range wants {
		if !strings.Contains(text, w) {
			t.Errorf("graph lacks %q", w)
		}
	}
	if strings.Contains(text, "@blk.0.ffn_gate_exps") || strings.Contains(text, "@blk.1.ffn_gate.weight") {
		t.Error("a dense layer has experts or an MoE layer a dense MLP")
	}
	if t.Failed() {
		t.Log("\n" + text)
	}
}

// TestConfigVariants: tied embeddings, per-element gating, no shared expert.
func TestConfigVariants(t *testing.T) {
	c := preset(t, "synthetic-tiny")
	c.TieWordEmbeddings, c.Gating, c.SharedExpertSize = true, config.GatingPerElement, 0
	g := build(t, c)
	text := g.String()
	for _, w := range []string{
		"%logits: f32[T,64] = matmul(%hn, @token_embd.weight)",
		"weight @blk.1.attn_gate.weight: bf16[16,32]",
		`%blk.1.og: f32[T,2,8] = softplus_gate(%blk.1.o, %blk.1.g) {gating="per-element"}`,
		"%blk.1.mo: f32[T,32] = reshape(%blk.1.re) {shape=[T,32]}",
	} {
		if !strings.Contains(text, w) {
			t.Errorf("graph lacks %q", w)
		}
	}
	if g.Value("output.weight") != nil || g.Value("blk.1.ffn_up_shexp.weight") != nil {
		t.Error("unused weights were declared")
	}
	total, active := g.ParamCount()
	if active <= 0 || active >= total+int64(64*32) {
		t.Errorf("tied: total %d active %d", total, active)
	}
}

// TestBadYAML runs testdata/yaml: each file's first line says the error
// position and message expected, "# want: LINE:COL: message".
func TestBadYAML(t *testing.T) {
	files, err := filepath.Glob("../testdata/yaml/*.yaml")
	if err != nil || len(files) < 10 {
		t.Fatalf("bad-YAML cases: %v %v", files, err)
	}
	c := preset(t, "synthetic-tiny")
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			first, _, _ := strings.Cut(string(src), "\n")
			want, ok := strings.CutPrefix(first, "# want: ")
			if !ok {
				t.Fatalf("first line must be `# want: LINE:COL: message`")
			}
			_, err = Build(filepath.Base(f), src, c, BuildOptions{})
			var pe *Error
			if !errors.As(err, &pe) {
				t.Fatalf("got %v, want a positioned error", err)
			}
			if !strings.HasPrefix(err.Error(), filepath.Base(f)+":"+want) {
				t.Fatalf("got  %v\nwant %s:%s", err, filepath.Base(f), want)
			}
		})
	}
}

func TestBadYAMLLaguna(t *testing.T) {
	c := preset(t, "synthetic-tiny")
	cases := []struct{ old, new, want string }{
		{"    nh: num_attention_heads_per_layer[l]", "    nh: num_attention_heads_per_layer[l + 100]", "expected an index in [0, 4)"},
		{"rot: int(head_dim * rope.partial_rotary_factor)", "rot: int(head_dim * rope.partial_factor)", "expected a field of {attention_factor, attention_scaling, beta_fast"},
		{"  input: x\n", "  input: y\n", `expected a defined value, input or weight, got "x"`},
		{"- out = add(h, mo)", "- result = add(h, mo)", `layer 0 defines no value "out"`},
		{"{top_k: k, softcap", "{top_k: 1.5, softcap", "expected int for attribute top_k, got 1.5"},
		{"attn_q.weight: [nh * d, H]", "attn_q.weight: [nh * d, \"H\"]", `expected an integer dimension, got string "H"`},
		{"scale: 1 / sqrt(d)", "scale: 1 / sqrt(d", "expected )"},
	}
	for _, tc := range cases {
		src := strings.Replace(string(LagunaYAML), tc.old, tc.new, 1)
		if src == string(LagunaYAML) {
			t.Fatalf("edit %q did not apply", tc.old)
		}
		_, err := Build("laguna.yaml", []byte(src), c, BuildOptions{})
		var pe *Error
		if !errors.As(err, &pe) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("edit %q: got %v, want %q", tc.new, err, tc.want)
			continue
		}
		// The reported line must hold the edited text (or, for a missing
		// definition, be inside the file).
		lines := strings.Split(src, "\n")
		if pe.Line < 1 || pe.Line > len(lines) || pe.Col < 1 {
			t.Errorf("edit %q: position %d:%d outside the file", tc.new, pe.Line, pe.Col)
		}
	}
}

func TestExpressions(t *testing.T) {
	env := map[string]any{"a": 6, "b": 4, "f": 0.5, "s": "yarn", "l": []any{10, 20}, "r": map[string]any{"x": 3}}
	lookup := func(n string) (any, error) {
		if v, ok := env[n]; ok {
			return v, nil
		}
		return nil, fmt.Errorf("unknown %s", n)
	}
	cases := []struct {
		src  string
		want any
	}{
		{"a * b + 1", 25}, {"a / b", 1.5}, {"a // b", 1}, {"-a // b", -2}, {"a % b", 2},
		{"int(a * f)", 3}, {"1 / sqrt(b)", 0.5}, {"s == \"yarn\"", true}, {"s != 'yarn' || a >= 6", true},
		{"l[1] + r.x", 23}, {"if(a > b, a, b)", 6}, {"if(a < b, l[9], 7)", 7}, {"min(a, b)", 4}, {"max(f, 1)", 1.0},
		{"!(a == 6) && true", false}, {"1e-6", 1e-6}, {"(a + b) * 2", 20},
	}
	for _, c := range cases {
		got, err := evalExpr(c.src, lookup)
		if err != nil || got != c.want {
			t.Errorf("%s = %v (%T), %v; want %v", c.src, got, got, err, c.want)
		}
	}
	bad := []struct {
		src string
		off int
	}{{"a +", 3}, {"a + zz", 4}, {"a / 0", 2}, {"s * 2", 2}, {"l[5]", 1}, {"foo(1)", 0}, {"if(a, 1, 2)", 0}, {"a b", 2},
		// Integers do not wrap: a shape of V**12 would silently become [0, H].
		{"a * 4611686018427387904", 2}, {"1 + 9223372036854775807", 2}, {"-9223372036854775807 - 2", 21},
		{"(0 - 9223372036854775807 - 1) // -1", 30}, {"b * b * b * b * b * b * b * b * b * b * b * b * b * b * b * b * b * b * b * b * b * b * b * b * b * b * b * b * b * b * b * b * b", 122}}
	// Nesting deep enough to overflow the stack of a recursive parser is an
	// error where it passes the limit, not a crash.
	if got, err := evalExpr(strings.Repeat("(", maxExprDepth-1)+"a"+strings.Repeat(")", maxExprDepth-1), lookup); err != nil || got != 6 {
		t.Errorf("%d nested parentheses: %v, %v; want 6", maxExprDepth-1, got, err)
	}
	for _, c := range []struct{ open, close string }{{"(", ")"}, {"-", ""}, {"!", ""}, {"l[", "]"}, {"min(1, ", ")"}} {
		src := strings.Repeat(c.open, 1_000_000) + "a" + strings.Repeat(c.close, 1_000_000)
		_, err := evalExpr(src, lookup)
		var ee *exprError
		if !errors.As(err, &ee) || !strings.Contains(ee.msg, "nested at most") {
			t.Errorf("%q x 1e6 around a: got %v, want a nesting error", c.open, err)
		}
	}
	for _, c := range bad {
		_, err := evalExpr(c.src, lookup)
		var ee *exprError
		if !errors.As(err, &ee) || ee.off != c.off {
			t.Errorf("%s: got %v (offset %v), want an error at %d", c.src, err, ee, c.off)
		}
	}
}

// FuzzBuild feeds the YAML frontend: no panics, and any graph it builds
// verifies and round-trips through the text form.
func FuzzBuild(f *testing.F) {
	f.Add(string(LagunaYAML))
	files, _ := filepath.Glob("../testdata/yaml/*.yaml")
	for _, p := range files {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(string(b))
		}
	}
	c, err := config.Preset("synthetic-tiny")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, src string) {
		g, err := Build("fuzz.yaml", []byte(src), c, BuildOptions{})
		if err != nil {
			return
		}
		text := g.String()
		g2, err := ir.Parse(text)
		if err != nil {
			t.Fatalf("built graph does not parse back: %v", err)
		}
		if g2.String() != text {
			t.Fatal("round trip differs")
		}
	})
}
