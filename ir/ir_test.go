package ir

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"lagc/quant"
)

// small is a one-layer MoE-free model in the text form.
const small = `graph small
sym T
input %tokens: i32[T]
input %pos: i32[T]
weight @token_embd.weight: bf16[16,8]
weight @blk.0.attn_q.weight: bf16[8,8]
weight @blk.0.attn_k.weight: bf16[4,8]
weight @blk.0.attn_v.weight: bf16[4,8]
weight @blk.0.ffn_gate.weight: bf16[6,8]
weight @blk.0.ffn_up.weight: bf16[6,8]
weight @blk.0.ffn_down.weight: bf16[8,6]
weight @output.weight: bf16[16,8]
%h: f32[T,8] = embedding(%tokens, @token_embd.weight)
%q: f32[T,8] = matmul(%h, @blk.0.attn_q.weight)
%k: f32[T,4] = matmul(%h, @blk.0.attn_k.weight)
%v: f32[T,4] = matmul(%h, @blk.0.attn_v.weight)
%qh: f32[T,2,4] = reshape(%q) {shape=[T,2,4]}
%kh: f32[T,1,4] = reshape(%k) {shape=[T,1,4]}
%vh: f32[T,1,4] = reshape(%v) {shape=[T,1,4]}
%qr: f32[T,2,4] = rope(%qh, %pos) {rotary_dim=2, theta=10000.0}
%o: f32[T,2,4] = attention(%qr, %kh, %vh, %pos) {layer=0, window=0, scale=0.5}
%o2: f32[T,8] = reshape(%o) {shape=[T,8]}
%g: f32[T,6] = matmul(%o2, @blk.0.ffn_gate.weight)
%u: f32[T,6] = matmul(%o2, @blk.0.ffn_up.weight)
%gs: f32[T,6] = silu(%g)
%gu: f32[T,6] = mul(%gs, %u)
%d: f32[T,8] = matmul(%gu, @blk.0.ffn_down.weight)
%h2: f32[T,8] = add(%h, %d)
%logits: f32[T,16] = matmul(%h2, @output.weight)
%next: i32[T] = argmax(%logits)
output %logits, %next
`

func mustParse(t *testing.T, src string) *Graph {
	t.Helper()
	g, err := Parse(src)
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	return g
}

func TestTextRoundTrip(t *testing.T) {
	g := mustParse(t, small)
	out := g.String()
	if out != small {
		t.Fatalf("print(parse(small)) differs:\n%s", out)
	}
	g2 := mustParse(t, out)
	if g2.String() != out {
		t.Fatal("second round trip differs")
	}
}

func TestParseErrors(t *testing.T) {
	cases := []struct{ name, src, want string }{
		{"no graph line", "sym T\n", "line 1:1: expected `graph NAME` first"},
		{"bad dtype", "graph g\ninput %x: f33[T]\n", "line 2:11: expected a dtype"},
		{"missing colon", "graph g\ninput %x i32[T]\n", `line 2:10: expected ":", got "i32"`},
		{"bad dim", "graph g\ninput %x: i32[T,?]\n", "line 2:17: unexpected character"},
		{"twice", "graph g\nsym T\ninput %x: i32[T]\ninput %x: i32[T]\n", "line 4:7: value x defined twice"},
		{"unclosed attrs", "graph g\nsym T\ninput %x: f32[T,2]\n%y: f32[T,2] = silu(%x) {a=1\n", `line 4:29: expected "}", got end of line`},
		{"bad string", "graph g\n%y: f32[2] = silu(%x) {a=\"x}\n", "line 2:26: expected a closing quote"},
		{"sigil", "graph g\nweight @w: f32[2]\n%y: f32[2] = silu(%w)\n", "line 3:19: expected w to be written @w"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseUnverified(c.src)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want %q", err, c.want)
			}
		})
	}
}

func TestVerifyRejects(t *testing.T) {
	base := small
	cases := []struct {
		name string
		edit func(string) string
		want string
	}{
		{"shape mismatch", func(s string) string {
			return strings.Replace(s, "%k: f32[T,4] = matmul", "%k: f32[T,5] = matmul", 1)
		}, "node %k (matmul): output %k declared f32[T,5] but inputs give f32[T,4]"},
		{"operand shapes", func(s string) string {
			return strings.Replace(s, "%gu: f32[T,6] = mul(%gs, %u)", "%gu: f32[T,6] = mul(%gs, %q)", 1)
		}, "node %gu (mul): operands differ"},
		{"undefined value", func(s string) string {
			return strings.Replace(s, "silu(%g)", "silu(%nowhere)", 1)
		}, "node %gs (silu): input x reads undefined value %nowhere"},
		{"cycle", func(s string) string {
			return strings.Replace(s, "silu(%g)", "silu(%gu)", 1)
		}, "cycle through node %gs (silu), node %gu (mul)"},
		{"wrong dtype", func(s string) string {
			return strings.Replace(s, "input %tokens: i32[T]", "input %tokens: f32[T]", 1)
		}, "node %h (embedding): input tokens: expected i32, got f32[T]"},
		{"wrong output dtype", func(s string) string {
			return strings.Replace(s, "%next: i32[T]", "%next: f32[T]", 1)
		}, "node %next (argmax): output %next declared f32[T] but inputs give i32[T]"},
		{"unknown op", func(s string) string { return strings.Replace(s, "silu(%g)", "swish(%g)", 1) },
			`node %gs (swish): unknown op "swish"`},
		{"missing attribute", func(s string) string { return strings.Replace(s, "{layer=0, window=0, scale=0.5}", "{layer=0}", 1) },
			"node %o (attention): attention needs attribute scale"},
		{"wrong attribute type", func(s string) string { return strings.Replace(s, "rotary_dim=2,", `rotary_dim="two",`, 1) },
			`node %qr (rope): attribute rotary_dim of rope: expected int, got "two"`},
		{"bad reshape", func(s string) string { return strings.Replace(s, "{shape=[T,8]}", "{shape=[T,9]}", 1) },
			"node %o2 (reshape): cannot reshape f32[T,2,4] to [T,9]"},
		{"undeclared symbol", func(s string) string { return strings.Replace(s, "sym T\n", "", 1) },
			"undeclared symbol T"},
		{"no outputs", func(s string) string { return strings.Replace(s, "output %logits, %next\n", "", 1) },
			"has no outputs"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			src := c.edit(base)
			if src == base {
				t.Fatal("edit did not apply")
			}
			g, err := ParseUnverified(src)
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			err = Verify(g)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v\nwant %q", err, c.want)
			}
		})
	}
}

func TestVerifyProgrammatic(t *testing.T) {
	g := mustParse(t, small)
	// A value assigned by two nodes.
	c := g.Clone()
	n := c.Nodes[2]
	n.Outputs = append(n.Outputs, c.Nodes[1].Outputs[0])
	if err := Verify(c); err == nil || !strings.Contains(err.Error(), "assigned twice") {
		t.Fatalf("double assignment: %v", err)
	}
	// A node reading a value from another graph.
	c = g.Clone()
	c.Nodes[3].Inputs[0] = &Value{Name: "stray", Type: c.Nodes[3].Inputs[0].Type}
	if err := Verify(c); err == nil || !strings.Contains(err.Error(), "node %v (matmul): input x reads undefined value %stray") {
		t.Fatalf("stray value: %v", err)
	}
	// Self loop.
	c = g.Clone()
	c.Nodes[12].Inputs[0] = c.Nodes[12].Outputs[0]
	if err := Verify(c); err == nil || !strings.Contains(err.Error(), "cycle: node %gs (silu) reads its own output") {
		t.Fatalf("self loop: %v", err)
	}
	if err := Verify(g); err != nil {
		t.Fatalf("clone changed the original: %v", err)
	}
}

func TestAttrGetters(t *testing.T) {
	g := mustParse(t, small)
	qr := g.Value("qr").Def
	cases := []struct {
		got, want any
	}{
		{qr.AttrInt("rotary_dim"), 2},
		{qr.AttrFloat("theta"), 10000.0},
		{qr.AttrString("rope_type"), "default"}, // default from the schema
		{qr.AttrFloat("beta_fast"), 32.0},
		{qr.AttrFloat("attention_factor"), 1.0},
		{g.Value("o").Def.AttrInt("window"), 0},
		{g.Value("qh").Def.AttrShape("shape").String(), "[T,2,4]"},
		{qr.AttrInt("nope"), 0},
	}
	for i, c := range cases {
		if c.got != c.want {
			t.Errorf("case %d: got %v, want %v", i, c.got, c.want)
		}
	}
	sh, err := g.Value("qh").Type.Shape.Eval(g.Env(7))
	if err != nil || len(sh) != 3 || sh[0] != 7 || sh[1] != 2 {
		t.Fatalf("Eval: %v %v", sh, err)
	}
	if _, err := g.Value("qh").Type.Shape.Eval(Env{}); err == nil {
		t.Fatal("Eval without T succeeded")
	}
}

func TestTypesAndDTypes(t *testing.T) {
	for _, s := range []string{"f32[T,3072]", "bf16[100352,3072]", "i32[]", "q8_0[64,32]"} {
		ty, err := ParseType(s)
		if err != nil || ty.String() != s {
			t.Errorf("ParseType(%q) = %v, %v", s, ty, err)
		}
	}
	for _, s := range []string{"f32", "f32[", "x[1]", "f32[-1]", "f32[1,,2]"} {
		if _, err := ParseType(s); err == nil {
			t.Errorf("ParseType(%q) succeeded", s)
		}
	}
	if got := Q8_0.Bytes(64); got != 68 {
		t.Errorf("q8_0 bytes of 64 = %d", got)
	}
	if got := BF16.Bytes(10); got != 20 {
		t.Errorf("bf16 bytes of 10 = %d", got)
	}
}

func TestOpTableComplete(t *testing.T) {
	// The op set of docs/CONTRACTS.md.
	want := []string{"add", "argmax", "attention", "attention_gate", "concat", "embedding", "matmul", "matmul_add", "matmul_split",
		"matmul_swiglu", "moe_experts", "moe_grouped", "mul", "norm_rope", "reshape", "rms_norm", "rope", "router_topk", "silu",
		"softplus_gate", "split"}
	got := OpNames()
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("ops %v, want %v", got, want)
	}
	for _, n := range got {
		d, _ := Op(n)
		if d.Doc == "" || strings.Contains(d.Doc, "\n") || d.Infer == nil {
			t.Errorf("op %s needs a one-line doc and an inference rule", n)
		}
		// The KV-cache ops: attention and its fused forms, which own a cache.
		attends := n == "attention" || n == "attention_gate"
		if got := IsAttention(&Node{Op: n}); got != attends || d.KVCache != attends || (attends && !d.SideEffect) {
			t.Errorf("op %s: IsAttention %v, KVCache %v, SideEffect %v", n, got, d.KVCache, d.SideEffect)
		}
		if attends && (len(d.Inputs) < 4 || strings.Join(d.Inputs[:4], ",") != "q,k,v,pos") {
			t.Errorf("op %s: inputs %v do not begin q, k, v, pos", n, d.Inputs)
		}
	}
}

// TestRewriteGateUp fuses the gate and up matmuls into one matmul against a
// derived concatenated weight plus a split: the shape of a fusion pass.
func TestRewriteGateUp(t *testing.T) {
	g := mustParse(t, small)
	pat := P("mul", P("silu", P("matmul", Any("x"), W("wg")).As("g")), P("matmul", Any("x"), W("wu")).As("u")).As("out")
	ms := g.FindAll(pat)
	if len(ms) != 1 {
		t.Fatalf("%d matches", len(ms))
	}
	m := ms[0]
	wg, wu := m["wg"], m["wu"]
	w, err := g.DeriveWeight("blk.0.ffn_gate_up.weight", "concat", Attrs{"axis": 0}, wg, wu)
	if err != nil {
		t.Fatal(err)
	}
	gu, err := g.Apply("matmul", nil, "gu_fused", m["x"], w)
	if err != nil {
		t.Fatal(err)
	}
	parts, err := g.AddNode("split", []*Value{gu}, Attrs{"axis": -1, "sizes": []int{6, 6}}, "g2", "u2")
	if err != nil {
		t.Fatal(err)
	}
	s, _ := g.Apply("silu", nil, "gs2", parts.Outputs[0])
	prod, _ := g.Apply("mul", nil, "gu2", s, parts.Outputs[1])
	g.ReplaceUses(m["out"], prod)
	live := g.Live()
	dead := map[*Node]bool{}
	for _, n := range g.Nodes {
		if !live[n] {
			dead[n] = true
		}
	}
	g.RemoveNodes(dead)
	if err := Verify(g); err != nil {
		t.Fatalf("verify after rewrite: %v\n%s", err, g)
	}
	text := g.String()
	if !strings.Contains(text, "weight @blk.0.ffn_gate_up.weight: bf16[12,8] = concat(@blk.0.ffn_gate.weight, @blk.0.ffn_up.weight) {axis=0}") {
		t.Fatalf("derived weight not printed:\n%s", text)
	}
	g2 := mustParse(t, text)
	if g2.String() != text {
		t.Fatal("rewritten graph does not round-trip")
	}
	total, active := g.ParamCount()
	if total != 16*8+8*8+4*8*2+6*8*3+16*8 || active != total-16*8 {
		t.Fatalf("params %d/%d", total, active)
	}
}

func TestDOTAndJSON(t *testing.T) {
	g := mustParse(t, small)
	var b bytes.Buffer
	if err := WriteDOT(&b, g); err != nil {
		t.Fatal(err)
	}
	d := b.String()
	if !strings.HasPrefix(d, "strict digraph small {") || !strings.Contains(d, "attention") {
		t.Fatalf("DOT:\n%s", d)
	}
	if n := strings.Count(d, "->"); n < len(g.Nodes) {
		t.Fatalf("DOT has %d edges for %d nodes", n, len(g.Nodes))
	}
	b.Reset()
	if err := WriteJSON(&b, g); err != nil {
		t.Fatal(err)
	}
	var jg jsonGraph
	if err := json.Unmarshal(b.Bytes(), &jg); err != nil {
		t.Fatal(err)
	}
	if len(jg.Nodes) != len(g.Nodes) || jg.Nodes[4].Attrs["shape"] != "[T,2,4]" {
		t.Fatalf("JSON nodes %d, attrs %v", len(jg.Nodes), jg.Nodes[4].Attrs)
	}
}

// FuzzParse feeds the IR-text parser: it must never panic, and whatever it
// accepts and verifies must print back to text that parses to the same text.
func FuzzParse(f *testing.F) {
	f.Add(small)
	f.Add("graph g\nsym T\ninput %x: f32[T,2]\n%y: f32[T,2] = silu(%x) {a=[1,T], b=-1e-06, c=\"s\"}\noutput %y\n")
	f.Add("graph g\nweight @w: bf16[4,2] = concat(@a, @b) {axis=0}\nweight @a: bf16[2,2]\nweight @b: bf16[2,2]\n")
	f.Fuzz(func(t *testing.T, src string) {
		g, err := Parse(src)
		if err != nil {
			return
		}
		out := g.String()
		g2, err := Parse(out)
		if err != nil {
			t.Fatalf("printed graph does not parse: %v\n%s", err, out)
		}
		if g2.String() != out {
			t.Fatalf("round trip differs:\n%s\n---\n%s", out, g2.String())
		}
	})
}

func TestShapes(t *testing.T) {
	g := mustParse(t, small)
	m, err := g.Shapes(Env{"T": 3})
	if err != nil {
		t.Fatal(err)
	}
	if got := m[g.Value("qh")]; len(got) != 3 || got[0] != 3 || got[1] != 2 || got[2] != 4 {
		t.Fatalf("qh bound to %v", got)
	}
	if got := m[g.Value("token_embd.weight")]; got[0] != 16 || got[1] != 8 {
		t.Fatalf("weight bound to %v", got)
	}
}

// Every block type the quant package converts is an IR dtype with its
// name and sizes, and maps back to its storage type.
func TestQuantDTypes(t *testing.T) {
	n := 0
	for q := range quant.Type(256) {
		if !q.Quantized() || !q.Supported() {
			continue
		}
		n++
		d, err := ParseDType(q.String())
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		want, err := q.RowBytes(4 * q.BlockElems())
		if err != nil {
			t.Fatal(err)
		}
		if !d.IsQuantized() || !d.IsFloat() || d.Quant() != q || d.BlockSize() != q.BlockElems() || d.Bytes(int64(4*q.BlockElems())) != want {
			t.Errorf("%s: dtype %v quant %v block %d bytes %d, want block %d bytes %d", q, d, d.Quant(), d.BlockSize(),
				d.Bytes(int64(4*q.BlockElems())), q.BlockElems(), want)
		}
		if back, ok := FromQuant(q); !ok || back != d {
			t.Errorf("FromQuant(%s) = %v, %v", q, back, ok)
		}
	}
	if n == 0 {
		t.Fatal("quant converts no block type")
	}
	for _, d := range []DType{F32, F16, BF16} {
		if back, ok := FromQuant(d.Quant()); !ok || back != d || d.IsQuantized() {
			t.Errorf("%s: FromQuant(%v) = %v, %v", d, d.Quant(), back, ok)
		}
	}
}

// TestDeriveQuantisedWeights: load-time transforms of quantised weights
// must join or keep whole blocks (blocks of 32 for q8_0).
func TestDeriveQuantisedWeights(t *testing.T) {
	g := NewGraph("q")
	a, _ := g.AddWeight("a", Type{DType: Q8_0, Shape: Consts(4, 64)})
	b, _ := g.AddWeight("b", Type{DType: Q8_0, Shape: Consts(2, 64)})
	c, _ := g.AddWeight("c", Type{DType: Q8_0, Shape: Consts(4, 32)})
	d, _ := g.AddWeight("d", Type{DType: BF16, Shape: Consts(4, 64)})
	for _, tc := range []struct {
		name  string
		op    string
		attrs Attrs
		srcs  []*Value
		err   string
	}{
		{"rows", "concat", Attrs{"axis": 0}, []*Value{a, b}, ""},
		{"columns of whole blocks", "concat", Attrs{"axis": 1}, []*Value{a, c}, ""},
		{"columns of whole blocks, axis -1", "concat", Attrs{"axis": -1}, []*Value{a, c}, ""},
		{"stack of rows", "reshape", Attrs{"shape": Consts(1, 4, 64)}, []*Value{a}, ""},
		{"rows of one block", "reshape", Attrs{"shape": Consts(8, 32)}, []*Value{a}, ""},
		{"half blocks", "reshape", Attrs{"shape": Consts(16, 16)}, []*Value{a}, "rows of 16 elements, not whole q8_0 blocks of 32"},
		{"mixed dtypes", "concat", Attrs{"axis": 0}, []*Value{a, d}, "bf16[4,64] does not match input 0 q8_0[4,64]"},
	} {
		_, err := g.DeriveWeight(g.UniqueName("w"), tc.op, tc.attrs, tc.srcs...)
		if tc.err == "" && err != nil {
			t.Errorf("%s: %v", tc.name, err)
		}
		if tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s: got %v, want an error containing %q", tc.name, err, tc.err)
		}
	}
	// A run that is not whole blocks: a [4,16] q8_0 source joined along
	// the columns (such a weight cannot come from a checkpoint, but the
	// check must not rely on that).
	e, _ := g.AddWeight("e", Type{DType: Q8_0, Shape: Consts(4, 16)})
	if _, err := g.DeriveWeight("ae", "concat", Attrs{"axis": 1}, c, e); err == nil || !strings.Contains(err.Error(), "runs of 16 elements of e") {
		t.Errorf("concat of half blocks: %v", err)
	}
}
