package lower

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"lagc/ir"
)

// bf16Plan lowers the first layers of a preset in bf16 with o.
func bf16Plan(t *testing.T, preset string, layers int, o Options) *Plan {
	t.Helper()
	p, err := quantPlan(t, preset, layers, "", o)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestFusePrefillGEMMNormRoPE: in S-2.1 prefill plans (bf16, and q4_k_m
// with its dense weights' bf16 copies) at 2048 and 300 tokens, every
// attention layer's split GEMM becomes rope_cs_table and gemm_wgmma_nr,
// exactly GEMMNormRoPE of the unfused plan's GEMM and q and k
// qk_norm_rope launches (the q heads over their own rows, the k heads
// into their rotated buffer, the table at the workspace's start), the
// norm_rope steps launch nothing, the attention is the unfused one (NR 0)
// reading the q rows the GEMM wrote; nothing else changes against the plan
// without this fusion, decode included. In the q4_k_m plan without copies
// the table goes after the weight the step dequantises into the workspace.
func TestFusePrefillGEMMNormRoPE(t *testing.T) {
	o := Options{DType: ir.BF16, Chunk: 2048, MaxContext: 4096, SMs: 132}
	// off: without this fusion (the attention then takes the q heads);
	// raw: without either, the launches this one takes.
	off, raw := o, o
	off.DisableFusions = []string{"fusePrefillGEMMNormRoPE"}
	raw.DisableFusions = []string{"fusePrefillGEMMNormRoPE", "fusePrefillNormRoPEAttention"}
	q4 := func(o Options) *Plan {
		o.PrefillBF16 = true
		p, err := quantPlan(t, "laguna-s-2.1", 4, "q4_k_m", o)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, c := range []struct {
		name              string
		fused, plain, raw *Plan
	}{
		{"bf16", bf16Plan(t, "laguna-s-2.1", 4, o), bf16Plan(t, "laguna-s-2.1", 4, off), bf16Plan(t, "laguna-s-2.1", 4, raw)},
		{"q4_k_m", q4(o), q4(off), q4(raw)},
	} {
		for _, T := range []int{2048, 300} {
			at := func(p *Plan) [][]Launch {
				ls, err := p.At(p.Prefill, T)
				if err != nil {
					t.Fatal(err)
				}
				return ls
			}
			got, want, rw := at(c.fused), at(c.plain), at(c.raw)
			steps := c.plain.Prefill.Steps
			n := 0
			for i := range steps {
				if steps[i].Op != "matmul_split" {
					continue
				}
				g := rw[i][len(rw[i])-1]
				nq, nk, a := rw[i+1][0], rw[i+2][0], rw[i+3][0]
				if nq.Kernel != "qk_norm_rope" || nk.Kernel != "qk_norm_rope" || a.Kernel != "attn_prefill_wg" || a.Ints[3] != 0 {
					t.Fatalf("%s T=%d: %s, %s, %s after the split GEMM", c.name, T, nq.NameExpr(), nk.NameExpr(), a.NameExpr())
				}
				// q over its own rows (the memory plan puts the rotated q
				// over the GEMM's input), k into its rotated buffer.
				tl, f, err := GEMMNormRoPE(g, []Launch{nq, nk}, []Ptr{nq.Args[6].Ptr(), nk.Args[7].Ptr()}, Ptr{BaseWorkspace, 0})
				if err != nil {
					t.Fatalf("%s T=%d: %v", c.name, T, err)
				}
				if f.Args[5] != nq.Args[6] || f.Args[10] != nk.Args[7] || f.Args[16] != nq.Args[8] || f.Args[17] != nk.Args[8] {
					t.Errorf("%s T=%d: %s writes q at %v and k at %v with norms %v, %v", c.name, T, f.NameExpr(), f.Args[5], f.Args[10], f.Args[16], f.Args[17])
				}
				wa := a
				wa.Args = append([]Arg(nil), a.Args...)
				wa.Args[7] = nq.Args[6]
				if !reflect.DeepEqual(got[i], append(append([]Launch(nil), rw[i][:len(rw[i])-1]...), tl, f)) ||
					len(got[i+1]) != 0 || len(got[i+2]) != 0 || !reflect.DeepEqual(got[i+3], append([]Launch{wa}, rw[i+3][1:]...)) {
					t.Errorf("%s T=%d step %s: %v then %v, %v, %v", c.name, T, steps[i].Name, got[i], got[i+1], got[i+2], got[i+3])
				}
				for _, j := range []int{i, i + 1, i + 2, i + 3} {
					got[j], want[j] = nil, nil
				}
				n++
			}
			if n != 4 {
				t.Fatalf("%s T=%d: %d split GEMMs, want 4", c.name, T, n)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("%s T=%d: other launches changed", c.name, T)
			}
		}
		if !reflect.DeepEqual(c.fused.Decode, c.plain.Decode) {
			t.Errorf("%s: decode changed", c.name)
		}
	}
	// Without the copies the GEMM reads its weight dequantised into the
	// workspace: the table goes after it, within the step's reserve.
	p, err := quantPlan(t, "laguna-s-2.1", 4, "q4_k_m", o)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, st := range p.Prefill.Steps {
		for k, l := range st.Launches {
			if l.Kernel != "rope_cs_table" {
				continue
			}
			n++
			g, w := st.Launches[k+1], st.Launches[k+1].Args[1]
			tab := l.Args[5].Ptr()
			if g.Kernel != "gemm_wgmma_nr" || w.Base != BaseWorkspace || tab.Base != BaseWorkspace || tab.Offset < w.Offset+2*w.Map.Rows*w.Map.LD ||
				tab.Offset+RoPECSBytes(p.Prefill.Tokens) > p.Prefill.Workspace {
				t.Errorf("q4_k_m without copies: %s at %v, then %s reading its weight at %v (%d rows), workspace %d bytes",
					l.NameExpr(), tab, g.NameExpr(), w.Ptr(), w.Map.Rows, p.Prefill.Workspace)
			}
		}
	}
	if n != 4 {
		t.Errorf("q4_k_m without copies: %d rope tables, want 4", n)
	}
}

// TestFusePrefillGEMMNormRoPEReaders: a step that reads the raw k rows
// (here the attention's step) keeps the k heads' qk_norm_rope; the q
// heads still go into the GEMM, and the other layers fuse as before.
func TestFusePrefillGEMMNormRoPEReaders(t *testing.T) {
	p := bf16Plan(t, "laguna-s-2.1", 4, Options{DType: ir.BF16, Chunk: 2048, MaxContext: 4096, SMs: 132,
		DisableFusions: []string{"fusePrefillGEMMNormRoPE", "fusePrefillNormRoPEAttention"}})
	steps, err := p.At(p.Prefill, 2048)
	if err != nil {
		t.Fatal(err)
	}
	meta := append([]Step(nil), p.Prefill.Steps...)
	first := slices.IndexFunc(meta, func(s Step) bool { return s.Op == "matmul_split" })
	meta[first+3].In = append(append([]Operand(nil), meta[first+3].In...), meta[first].Out[1]) // raw k
	fusePrefillGEMMNormRoPE(meta, steps)
	n := 0
	for i := range meta {
		if meta[i].Op != "matmul_split" {
			continue
		}
		f := steps[i][len(steps[i])-1]
		if f.Kernel != "gemm_wgmma_nr" || f.Args[16].Ptr().Null() {
			t.Fatalf("step %s: %s, the q heads not fused", meta[i].Name, f.NameExpr())
		}
		kept := len(steps[i+2]) == 1 && steps[i+2][0].Kernel == "qk_norm_rope"
		if kept != (i == first) || f.Args[17].Ptr().Null() != (i == first) {
			t.Errorf("step %s: k heads' launch kept %v, k norm in the GEMM %v", meta[i].Name, kept, !f.Args[17].Ptr().Null())
		}
		n++
	}
	if n != 4 {
		t.Fatalf("%d split GEMMs, want 4", n)
	}
}

// TestGEMMNormRoPEInvariant: GEMMNormRoPE refuses what it cannot compute
// exactly, saying why.
func TestGEMMNormRoPEInvariant(t *testing.T) {
	p := bf16Plan(t, "laguna-s-2.1", 2, Options{DType: ir.BF16, Chunk: 2048, MaxContext: 4096, SMs: 132,
		DisableFusions: []string{"fusePrefillGEMMNormRoPE", "fusePrefillNormRoPEAttention"}})
	var g, nq, nk Launch
	for i, st := range p.Prefill.Steps {
		if st.Op == "matmul_split" {
			g, nq, nk = st.Launches[0], p.Prefill.Steps[i+1].Launches[0], p.Prefill.Steps[i+2].Launches[0]
			break
		}
	}
	q, k := nq.Args[6].Ptr(), nk.Args[7].Ptr() // q over its own rows, k into its buffer
	tab := Ptr{BaseWorkspace, 0}
	if _, _, err := GEMMNormRoPE(g, []Launch{nq, nk}, []Ptr{q, k}, tab); err != nil {
		t.Fatalf("the plan's own launches: %v", err)
	}
	mod := func(l Launch, f func(*Launch)) Launch {
		l.Args = append([]Arg(nil), l.Args...)
		l.Ints = append([]int64(nil), l.Ints...)
		f(&l)
		return l
	}
	for _, c := range []struct {
		name   string
		g      Launch
		ns     []Launch
		dst    []Ptr
		tab    Ptr
		reason string
	}{
		{"not split", mod(g, func(l *Launch) { l.Ints[4] = 0 }), []Launch{nq, nk}, []Ptr{q, k}, tab, "plain split GEMM"},
		{"f32 out", mod(g, func(l *Launch) { l.DTypes = []string{"f32"} }), []Launch{nq, nk}, []Ptr{q, k}, tab, "plain split GEMM"},
		{"head 64", g, []Launch{mod(nq, func(l *Launch) { l.Args[3] = i32(64) }), nk}, []Ptr{q, k}, tab, "heads of"},
		{"rot 24", g, []Launch{mod(nq, func(l *Launch) { l.Args[13] = i32(24) }), nk}, []Ptr{q, k}, tab, "rotary width"},
		{"v segment", g, []Launch{mod(nk, func(l *Launch) { l.Args[6] = g.Args[11] })}, []Ptr{k}, tab, "first or second segment"},
		{"same segment twice", g, []Launch{nk, nk}, []Ptr{k, k}, tab, "two qk_norm_rope launches"},
		{"no norm", g, []Launch{mod(nk, func(l *Launch) { l.Args[8] = ptrArg(Ptr{}) })}, []Ptr{k}, tab, "without a norm weight"},
		{"eps differs", g, []Launch{nq, mod(nk, func(l *Launch) { l.Args[10] = f32(1e-5) })}, []Ptr{q, k}, tab, "differ in eps"},
		{"elsewhere", g, []Launch{nk}, []Ptr{q}, tab, "neither"},
		{"over x", g, []Launch{mod(nk, func(l *Launch) { l.Args[7] = ptrArg(g.Args[0].Ptr()) })}, []Ptr{g.Args[0].Ptr()}, tab, "overlap the GEMM's input"},
		{"over v", g, []Launch{mod(nk, func(l *Launch) { l.Args[7] = g.Args[11] })}, []Ptr{g.Args[11].Ptr()}, tab, "another segment's output"},
		{"table over k", g, []Launch{nk}, []Ptr{k}, k, "rope table"},
		{"no table", g, []Launch{nk}, []Ptr{k}, Ptr{}, "rope table"},
	} {
		_, _, err := GEMMNormRoPE(c.g, c.ns, c.dst, c.tab)
		if err == nil || !strings.Contains(err.Error(), c.reason) {
			t.Errorf("%s: %v, want an error about %q", c.name, err, c.reason)
		}
	}
}
