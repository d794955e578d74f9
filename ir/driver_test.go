package ir

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// chain is a graph for the rewrite tests: %s is read twice.
const chain = `graph chain
sym T
input %x: f32[T,4]
weight @w: bf16[4,4]
weight @v: bf16[4,4]
%m: f32[T,4] = matmul(%x, @w)
%s: f32[T,4] = silu(%m)
%a: f32[T,4] = add(%s, %x)
%b: f32[T,4] = mul(%s, %a)
%c: f32[T,4] = add(%x, %b)
output %c
`

func TestCommutativeMatch(t *testing.T) {
	g := mustParse(t, chain)
	v := func(name string) *Value { return g.Value(name) }
	isA := func(x *Value) bool { return x.Name == "a" }
	cases := []struct {
		name  string
		pat   *Pattern
		at    string
		binds []string // name=value of every match, in order
	}{
		{"given order", P("add", P("silu", Any("m")).As("s"), Any("r")), "a", []string{"m=m r=x s=s"}},
		{"swapped", P("add", Any("r"), P("silu", Any("m")).As("s")), "a", []string{"m=m r=x s=s"}},
		{"both orders of free operands", P("add", Any("p"), Any("q")), "c", []string{"p=x q=b", "p=b q=x"}},
		// The first order binds v to %x, then fails on w's condition; the
		// binding is undone before the second order binds v to %b.
		{"undo", P("add", Any("v"), Any("w").If(func(v *Value) bool { return v.Name == "x" })), "c", []string{"v=b w=x"}},
		{"no order fits", P("mul", Any("y").If(isA), P("add", Any("l"), Any("r"))), "b", nil},
		{"nested", P("mul", P("silu", Any("m")).As("first"), P("add", Any("p"), Any("q"))), "b", []string{"first=s m=m p=s q=x", "first=s m=m p=x q=s"}},
		{"condition picks the order", P("mul", Any("first").If(isA), Any("other")), "b", []string{"first=a other=s"}},
		{"not commutative", P("matmul", W("w"), Any("x")), "m", nil},
		{"same value twice", P("add", Any("p"), Any("p")), "c", nil},
	}
	for _, c := range cases {
		var got []string
		for _, m := range Matches(c.pat, v(c.at)) {
			var parts []string
			for k, x := range m {
				parts = append(parts, k+"="+x.Name)
			}
			slices.Sort(parts)
			got = append(got, strings.Join(parts, " "))
		}
		if strings.Join(got, "|") != strings.Join(c.binds, "|") {
			t.Errorf("%s: matches %q, want %q", c.name, got, c.binds)
		}
		m, ok := MatchValue(c.pat, v(c.at))
		if ok != (len(c.binds) > 0) || ok && len(m) != len(strings.Fields(c.binds[0])) {
			t.Errorf("%s: MatchValue %v %v", c.name, m, ok)
		}
	}
}

// checkUseDef compares the kept use-def information with a fresh count.
func checkUseDef(t *testing.T, g *Graph) {
	t.Helper()
	fresh := g.Uses()
	for _, v := range g.Values() {
		if got, want := g.Users(v), fresh[v]; !sameNodes(got, want) {
			t.Errorf("users of %s: %v, want %v", v, got, want)
		}
		var derivs []*Value
		for _, w := range g.Weights {
			if w.From != nil && slices.Contains(w.From.Srcs, v) {
				derivs = append(derivs, w)
			}
		}
		if got := g.Derivations(v); len(got) != len(derivs) || !slices.Equal(got, derivs) {
			t.Errorf("derivations of %s: %v, want %v", v, got, derivs)
		}
	}
}

// sameNodes compares node lists as multisets.
func sameNodes(a, b []*Node) bool {
	count := map[*Node]int{}
	for _, n := range a {
		count[n]++
	}
	for _, n := range b {
		count[n]--
	}
	for _, c := range count {
		if c != 0 {
			return false
		}
	}
	return len(a) == len(b)
}

func TestUseDefKept(t *testing.T) {
	steps := []struct {
		name string
		do   func(g *Graph) error
	}{
		{"add a node", func(g *Graph) error {
			_, err := g.Apply("mul", nil, "sq", g.Value("s"), g.Value("s"))
			return err
		}},
		{"replace uses", func(g *Graph) error {
			g.ReplaceUses(g.Value("s"), g.Value("m"))
			return nil
		}},
		{"erase a node", func(g *Graph) error {
			g.EraseNode(g.Value("s").Def)
			return nil
		}},
		{"derive a weight", func(g *Graph) error {
			_, err := g.DeriveWeight("wv", "concat", Attrs{"axis": 0}, g.Value("w"), g.Value("v"))
			return err
		}},
		{"erase a weight", func(g *Graph) error {
			g.EraseWeight(g.Value("wv"))
			return nil
		}},
		{"direct edit and Reindex", func(g *Graph) error {
			g.Value("c").Def.Inputs[0] = g.Value("m")
			g.Reindex()
			return nil
		}},
	}
	g := mustParse(t, chain)
	checkUseDef(t, g)
	for _, s := range steps {
		if err := s.do(g); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		checkUseDef(t, g)
		if t.Failed() {
			t.Fatalf("after %s:\n%s", s.name, g)
		}
	}
	if n := g.NumUses(g.Value("c")); n != 1 {
		t.Errorf("the graph output %%c has %d uses, want 1 (the output)", n)
	}
}

// TestOrderKeptIsChecked: a direct edit that makes a cycle is found by
// Verify even when Order had kept the order of the graph before the edit.
func TestOrderKeptIsChecked(t *testing.T) {
	g := mustParse(t, chain)
	if _, err := g.Order(); err != nil {
		t.Fatal(err)
	}
	g.Value("m").Def.Inputs[0] = g.Value("a") // m -> s -> a -> m
	if err := Verify(g); err == nil || !strings.Contains(err.Error(), "cycle through") {
		t.Fatalf("Verify after a cycle-making edit: %v", err)
	}
}

// TestRewriteFixpoint: a rewrite that frees a value makes a pattern that
// declined at its producer apply when that producer is visited again.
func TestRewriteFixpoint(t *testing.T) {
	g := mustParse(t, chain)
	fresh := map[*Node]bool{}
	// silu-once: a silu read by one node is replaced by a new one.
	siluOnce := &RewritePattern{Name: "silu-once", Roots: []string{"silu"}, Apply: func(rw *Rewriter, n *Node) (Outcome, error) {
		if fresh[n] {
			return NoMatch, nil
		}
		if rw.NumUses(n.Outputs[0]) != 1 {
			return Declined, nil
		}
		r, err := rw.Replace([]*Node{n}, "silu", n.Inputs, nil, n.Outputs[0])
		fresh[r] = true
		return Applied, err
	}}
	// drop-add: add(silu(m), x) -> an identity view of x.
	dropAdd := &RewritePattern{Name: "drop-add", Roots: []string{"add"}, Apply: func(rw *Rewriter, n *Node) (Outcome, error) {
		m, ok := MatchValue(P("add", P("silu", Any("m")), Any("x")), n.Outputs[0])
		if !ok {
			return NoMatch, nil
		}
		_, err := rw.Replace([]*Node{n}, "reshape", []*Value{m["x"]}, Attrs{"shape": m["x"].Type.Shape}, n.Outputs[0])
		return Applied, err
	}}
	st, err := g.Rewrite(siluOnce, dropAdd)
	if err != nil {
		t.Fatal(err)
	}
	if st.Applied["drop-add"] != 1 || st.Applied["silu-once"] != 1 || st.Declined["silu-once"] != 0 {
		t.Errorf("stats %+v\n%s", st, g)
	}
	if err := Verify(g); err != nil {
		t.Fatal(err)
	}
	checkUseDef(t, g)
	if !fresh[g.Value("s").Def] || g.Value("a").Def.Op != "reshape" || len(g.Nodes) != 5 {
		t.Errorf("silu was not rewritten after its second reader went:\n%s", g)
	}
}

func TestRewriteErrors(t *testing.T) {
	replaceSame := func(rw *Rewriter, n *Node) (Outcome, error) {
		_, err := rw.Replace([]*Node{n}, n.Op, n.Inputs, n.Attrs, n.Outputs...)
		return Applied, err
	}
	cases := []struct {
		name string
		pat  *RewritePattern
		want string
	}{
		{"endless", &RewritePattern{Name: "again", Roots: []string{"silu"}, Apply: replaceSame},
			"rewriting did not converge: 105 rewrites in a graph of 5 nodes (last: again at node %s (silu))"},
		{"declined after a change", &RewritePattern{Name: "liar", Roots: []string{"silu"}, Apply: func(rw *Rewriter, n *Node) (Outcome, error) {
			_, err := replaceSame(rw, n)
			return Declined, err
		}}, "liar at node %s (silu): changed the graph but reported no rewrite"},
		{"pattern error", &RewritePattern{Name: "broken", Roots: []string{"mul"}, Apply: func(rw *Rewriter, n *Node) (Outcome, error) {
			return NoMatch, fmt.Errorf("no luck")
		}}, "broken at node %b (mul): no luck"},
	}
	for _, c := range cases {
		g := mustParse(t, chain)
		if _, err := g.Rewrite(c.pat); err == nil || err.Error() != c.want {
			t.Errorf("%s: got %v, want %q", c.name, err, c.want)
		}
	}
}

// TestRewriteDeclinedDropsWeights: weights derived by an attempt that
// declines are dropped; Derive reuses an identical derivation.
func TestRewriteDeclinedDropsWeights(t *testing.T) {
	g := mustParse(t, chain)
	var first, again *Value
	pat := &RewritePattern{Name: "derive", Roots: []string{"matmul"}, Apply: func(rw *Rewriter, n *Node) (Outcome, error) {
		var err error
		if first, err = rw.Derive("wv", "concat", Attrs{"axis": 0}, g.Value("w"), g.Value("v")); err != nil {
			return NoMatch, err
		}
		if again, err = rw.Derive("wv2", "concat", Attrs{"axis": 0}, g.Value("w"), g.Value("v")); err != nil {
			return NoMatch, err
		}
		return Declined, nil
	}}
	st, err := g.Rewrite(pat)
	if err != nil {
		t.Fatal(err)
	}
	if first == nil || again != first || len(g.Weights) != 2 || g.Value("wv") != nil || st.Declined["derive"] != 1 {
		t.Errorf("derived %v then %v; weights %v; stats %+v", first, again, g.Weights, st)
	}
	checkUseDef(t, g)
}
