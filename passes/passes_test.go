package passes

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"lagc/config"
	"lagc/ir"
	"lagc/models"
)

func laguna(t testing.TB, preset string) *ir.Graph {
	t.Helper()
	c, err := config.Preset(preset)
	if err != nil {
		t.Fatal(err)
	}
	g, err := models.BuildLaguna(c)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func parse(t testing.TB, src string) *ir.Graph {
	t.Helper()
	g, err := ir.Parse(src)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// withTable runs f with a modified copy of the pass table in place.
func withTable(t *testing.T, edit func([]*Pass) []*Pass, f func()) {
	t.Helper()
	saved := table
	defer func() { table = saved }()
	cp := make([]*Pass, len(saved))
	for i, p := range saved {
		q := *p
		q.After = append([]string(nil), p.After...)
		cp[i] = &q
	}
	table = edit(cp)
	f()
}

func TestConstraintTable(t *testing.T) {
	if err := CheckConstraints(); err != nil {
		t.Fatal(err)
	}
	for _, name := range DefaultPipeline {
		p, ok := Lookup(name)
		if !ok || p.Doc == "" || p.Run == nil {
			t.Errorf("pass %s: in the table %v, needs a doc and a run function", name, ok)
		}
	}
	find := func(ps []*Pass, name string) *Pass {
		for _, p := range ps {
			if p.Name == name {
				return p
			}
		}
		t.Fatalf("no pass %s", name)
		return nil
	}
	after := func(pass string, before ...string) func([]*Pass) []*Pass {
		return func(ps []*Pass) []*Pass {
			p := find(ps, pass)
			p.After = append(p.After, before...)
			return ps
		}
	}
	cases := []struct {
		name string
		edit func([]*Pass) []*Pass
		want string
	}{
		{"memplan before shapes", after("shapes", "memplan"), "cycle"},
		{"unknown pass", after("dce", "fusion"), `ordering constraint fusion < dce names unknown pass "fusion"`},
		{"dce before cse", after("cse", "dce"), "cycle"},
		{"self", after("cse", "cse"), "ordering constraint cse < cse is a cycle"},
		{"duplicate", func(ps []*Pass) []*Pass { return append(ps, &Pass{Name: "dce"}) }, `pass "dce" is in the table twice`},
		{"default order", func(ps []*Pass) []*Pass {
			i, j := slices.IndexFunc(ps, func(p *Pass) bool { return p.Name == "cse" }), slices.IndexFunc(ps, func(p *Pass) bool { return p.Name == "dce" })
			ps[i], ps[j] = ps[j], ps[i]
			return ps
		}, "default pipeline: pass cse must run before dce"},
	}
	for _, c := range cases {
		withTable(t, c.edit, func() {
			if err := CheckConstraints(); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s: got %v, want %q", c.name, err, c.want)
			}
		})
	}
}

func TestDefaultOff(t *testing.T) {
	// A pass off by default runs only when named.
	withTable(t, func(ps []*Pass) []*Pass {
		return append(ps, &Pass{Name: "count", Doc: "notes the node count", After: []string{"dce"},
			Run: func(s *State) error { s.Notef("count: %d", len(s.Graph.Nodes)); return nil }})
	}, func() {
		res, err := Run(laguna(t, "synthetic-tiny"), Options{})
		if err != nil || slices.ContainsFunc(res.State.Notes, func(n string) bool { return strings.HasPrefix(n, "count:") }) {
			t.Errorf("default pipeline: %v, notes %q", err, res.State.Notes)
		}
		g := laguna(t, "synthetic-tiny")
		want := fmt.Sprintf("count: %d", len(g.Nodes))
		res, err = Run(g, Options{Passes: []string{"shapes", "dce", "count"}})
		if err != nil || !slices.Contains(res.State.Notes, want) {
			t.Errorf("named: %v, notes %q", err, res.State.Notes)
		}
		if _, err := Run(laguna(t, "synthetic-tiny"), Options{Passes: []string{"count", "dce"}}); err == nil || !strings.Contains(err.Error(), "pass dce must run before count") {
			t.Errorf("constraint of an extra pass: %v", err)
		}
	})
}

func TestSelection(t *testing.T) {
	cases := []struct {
		passes, disable []string
		want            string // error substring; "" for success
		ran             string
	}{
		{nil, nil, "", "shapes,qkvg-concat,norm-rope,attention-gate,gate-up-fuse,shared-expert-merge,residual-fold,expert-order,cse,dce,memplan"},
		{nil, []string{"cse"}, "", "shapes,qkvg-concat,norm-rope,attention-gate,gate-up-fuse,shared-expert-merge,residual-fold,expert-order,dce,memplan"},
		{[]string{"shapes", "cse", "dce", "memplan"}, nil, "", "shapes,cse,dce,memplan"},
		{[]string{"dce", "shapes"}, nil, "pass shapes must run before dce", ""},
		{[]string{"memplan", "dce"}, nil, "pass dce must run before memplan", ""},
		{[]string{"shapes", "fuse"}, nil, `unknown pass "fuse"`, ""},
		{[]string{"dce", "dce"}, nil, `pass "dce" listed twice`, ""},
		{nil, []string{"nope"}, `--disable-pass "nope": unknown pass`, ""},
		{[]string{"cse"}, nil, "", "cse"},
	}
	for _, c := range cases {
		g := laguna(t, "synthetic-tiny")
		res, err := Run(g, Options{Passes: c.passes, Disable: c.disable})
		if c.want != "" {
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%v -%v: got %v, want %q", c.passes, c.disable, err, c.want)
			}
			continue
		}
		if err != nil {
			t.Errorf("%v -%v: %v", c.passes, c.disable, err)
			continue
		}
		var ran []string
		for _, tm := range res.Timings {
			ran = append(ran, tm.Name)
		}
		if strings.Join(ran, ",") != c.ran {
			t.Errorf("%v -%v: ran %v, want %s", c.passes, c.disable, ran, c.ran)
		}
	}
}

func TestVerifierRunsAfterEachPass(t *testing.T) {
	withTable(t, func(ps []*Pass) []*Pass {
		return append(ps, &Pass{Name: "test-break", Doc: "corrupts the graph", Run: func(s *State) error {
			n := s.Graph.Nodes[1]
			n.Outputs[0].Type.Shape = ir.Shape{ir.S("T"), ir.C(999)}
			return nil
		}})
	}, func() {
		_, err := Run(laguna(t, "synthetic-tiny"), Options{Passes: []string{"shapes", "test-break", "dce"}})
		if err == nil || !strings.Contains(err.Error(), "after pass test-break: node %blk.0.a (rms_norm): output %blk.0.a declared f32[T,999]") {
			t.Fatalf("got %v", err)
		}
	})
}

func TestDumps(t *testing.T) {
	for _, format := range []string{"text", "dot", "json"} {
		dir := t.TempDir()
		res, err := Run(laguna(t, "synthetic-tiny"), Options{Passes: []string{"shapes", "gate-up-fuse", "cse", "dce", "memplan"}, DumpAfter: []string{"all"}, DumpDir: dir, DumpFormat: format})
		if err != nil {
			t.Fatal(err)
		}
		ext, _ := DumpExt(format)
		want := []string{"01-shapes", "02-gate-up-fuse", "03-cse", "04-dce", "05-memplan"}
		entries, _ := os.ReadDir(dir)
		if len(entries) != len(want) || len(res.Dumps) != len(want) {
			t.Fatalf("%s: %d files, %v", format, len(entries), res.Dumps)
		}
		for i, w := range want {
			if entries[i].Name() != w+ext {
				t.Errorf("%s: file %d is %s, want %s", format, i, entries[i].Name(), w+ext)
			}
			data, err := os.ReadFile(filepath.Join(dir, entries[i].Name()))
			if err != nil {
				t.Fatal(err)
			}
			// gate-up-fuse changes the graph; cse, dce and memplan do not.
			same := ""
			if i >= 2 {
				same = want[i-1] + ext
			}
			checkDump(t, format, entries[i].Name(), string(data), same)
		}
		b, _ := os.ReadFile(filepath.Join(dir, "02-gate-up-fuse"+ext))
		fused := string(b)
		wants := []string{"after pass 2 of 5, gate-up-fuse", "nodes 112 -> 100", "matmul_swiglu      0 -> 4", "gate-up-fuse: 4 MLPs and 3 expert stacks fused, 0 skipped (precondition)"}
		if format == "json" {
			wants = []string{`"index": 2`, `"matmul_swiglu": [`, "gate-up-fuse: 4 MLPs and 3 expert stacks fused, 0 skipped (precondition)"}
		}
		for _, s := range wants {
			if !strings.Contains(fused, s) {
				t.Errorf("%s dump after gate-up-fuse lacks %q", format, s)
			}
		}
		b, _ = os.ReadFile(filepath.Join(dir, "05-memplan"+ext))
		plan := string(b)
		p := res.State.Plan(1, ir.F32)
		off, _ := p.Offset("blk.1.h")
		var row string
		for _, b := range p.Buffers {
			if b.Value == "blk.1.h" {
				row = fmt.Sprintf("%12d %12d %6d..%-6d %%blk.1.h", b.Offset, b.Size, b.First, b.Last)
				if format == "json" {
					row = fmt.Sprintf(`"value": "blk.1.h",%s"offset": %d,%s"size": %d`, "\n     ", off, "\n     ", b.Size)
				}
			}
		}
		if row == "" || !strings.Contains(plan, row) || !strings.Contains(plan, "T=2048") {
			t.Errorf("%s: the memplan dump lacks the offset of %%blk.1.h (%q)", format, row)
		}
	}
	dir := t.TempDir()
	res, err := Run(laguna(t, "synthetic-tiny"), Options{DumpAfter: []string{"dce"}, DumpDir: dir})
	if err != nil || len(res.Dumps) != 1 || filepath.Base(res.Dumps[0]) != "10-dce.txt" {
		t.Fatalf("dump after dce: %v %v", res, err)
	}
	if _, err := Run(laguna(t, "synthetic-tiny"), Options{DumpAfter: []string{"cse"}, Disable: []string{"cse"}, DumpDir: dir}); err == nil {
		t.Fatal("dump after a disabled pass was accepted")
	}
	if _, err := Run(laguna(t, "synthetic-tiny"), Options{DumpFormat: "svg"}); err == nil {
		t.Fatal("unknown dump format accepted")
	}
}

// checkDump checks a dump's header and body; same names the previous dump
// when the graph did not change, so the body is not repeated.
func checkDump(t *testing.T, format, name, data, same string) {
	t.Helper()
	pass := strings.TrimSuffix(name[3:], filepath.Ext(name))
	switch format {
	case "text", "dot":
		comment := map[string]string{"text": "# ", "dot": "// "}[format]
		if !strings.HasPrefix(data, comment+"after pass ") || !strings.Contains(data, ", "+pass+": ") {
			t.Errorf("%s: header %.60q", name, data)
		}
		idx := strings.Index(data, "identical to "+same+"'s: not repeated")
		if (same != "") != (idx >= 0) {
			t.Errorf("%s: identical to %q: %v", name, same, idx >= 0)
		}
		if same != "" {
			return
		}
		if format == "text" {
			if _, err := ir.Parse(data); err != nil {
				t.Errorf("%s does not parse: %v", name, err)
			}
		} else if !strings.Contains(data, "\nstrict digraph laguna {") {
			t.Errorf("%s: no digraph after the header", name)
		}
	case "json":
		var v struct {
			Pass   string
			SameAs string `json:"same_as"`
			Graph  map[string]any
		}
		if err := json.Unmarshal([]byte(data), &v); err != nil || v.Pass != pass || v.SameAs != same {
			t.Errorf("%s: %v, pass %q, same_as %q", name, err, v.Pass, v.SameAs)
		}
		if (same == "") != (v.Graph["name"] == "laguna") {
			t.Errorf("%s: graph %v with same_as %q", name, v.Graph != nil, same)
		}
	}
}

const dceSrc = `graph g
sym T
input %x: f32[T,4]
input %pos: i32[T]
weight @w: bf16[4,4]
weight @unused: bf16[4,4]
%a: f32[T,4] = matmul(%x, @w)
%dead1: f32[T,4] = silu(%a)
%dead2: f32[T,4] = mul(%dead1, %a)
%q: f32[T,1,4] = reshape(%a) {shape=[T,1,4]}
%att: f32[T,1,4] = attention(%q, %q, %q, %pos) {layer=0, scale=0.5}
%y: f32[T,4] = add(%a, %x)
output %y
`

func TestDCE(t *testing.T) {
	g := parse(t, dceSrc)
	st := &State{Graph: g}
	if err := DCE(st); err != nil {
		t.Fatal(err)
	}
	if err := ir.Verify(g); err != nil {
		t.Fatal(err)
	}
	text := g.String()
	for _, gone := range []string{"%dead1", "%dead2", "@unused"} {
		if strings.Contains(text, gone) {
			t.Errorf("%s survived DCE:\n%s", gone, text)
		}
	}
	// attention writes its KV cache: it stays even though nothing reads it.
	for _, kept := range []string{"%att", "%q", "@w", "%y"} {
		if !strings.Contains(text, kept) {
			t.Errorf("%s removed by DCE:\n%s", kept, text)
		}
	}
}

const cseSrc = `graph g
sym T
input %x: f32[T,4]
input %pos: i32[T]
weight @w: bf16[4,4]
%a: f32[T,4] = matmul(%x, @w)
%b: f32[T,4] = matmul(%x, @w)
%sa: f32[T,4] = silu(%a)
%sb: f32[T,4] = silu(%b)
%n1: f32[T,4] = rms_norm(%sa, @v) {eps=1e-06}
%n2: f32[T,4] = rms_norm(%sb, @v) {eps=1e-05}
%q: f32[T,1,4] = reshape(%n1) {shape=[T,1,4]}
%o1: f32[T,1,4] = attention(%q, %q, %q, %pos) {layer=0, scale=0.5}
%o2: f32[T,1,4] = attention(%q, %q, %q, %pos) {layer=0, scale=0.5}
%s: f32[T,1,4] = add(%o1, %o2)
%r: f32[T,4] = reshape(%s) {shape=[T,4]}
%y: f32[T,4] = add(%r, %n2)
output %y
weight @v: bf16[4]
`

func TestCSE(t *testing.T) {
	g := parse(t, cseSrc)
	st := &State{Graph: g}
	if err := CSE(st); err != nil {
		t.Fatal(err)
	}
	if err := ir.Verify(g); err != nil {
		t.Fatal(err)
	}
	counts := g.OpCounts()
	// matmul and silu merge (chained); rms_norm differs in eps; attention
	// has a side effect and stays twice.
	want := map[string]int{"matmul": 1, "silu": 1, "rms_norm": 2, "attention": 2}
	for op, n := range want {
		if counts[op] != n {
			t.Errorf("%s: %d, want %d\n%s", op, counts[op], n, g)
		}
	}
	if !strings.Contains(g.String(), "%n2: f32[T,4] = rms_norm(%sa, @v)") {
		t.Errorf("uses not rewired:\n%s", g)
	}
}

// checkPlan asserts that no two buffers live at the same time overlap.
func checkPlan(t *testing.T, p *MemoryPlan) {
	t.Helper()
	var owners []Buffer
	for _, b := range p.Buffers {
		if !b.View {
			owners = append(owners, b)
		}
		if b.Offset%Alignment != 0 || b.Offset+b.Size > p.Arena {
			t.Fatalf("buffer %s at %d+%d outside arena %d or unaligned", b.Value, b.Offset, b.Size, p.Arena)
		}
	}
	for i, a := range owners {
		for _, b := range owners[i+1:] {
			if a.First <= b.Last && b.First <= a.Last && a.Offset < b.Offset+b.Size && b.Offset < a.Offset+a.Size {
				t.Fatalf("%s [%d,%d]@%d+%d overlaps %s [%d,%d]@%d+%d", a.Value, a.First, a.Last, a.Offset, a.Size,
					b.Value, b.First, b.Last, b.Offset, b.Size)
			}
		}
	}
	if p.Arena < p.PeakLive || p.Arena > p.NoReuse {
		t.Fatalf("arena %d outside [peak live %d, no reuse %d]", p.Arena, p.PeakLive, p.NoReuse)
	}
}

func TestMemoryPlanSmall(t *testing.T) {
	// Every value is [T,64] f32, 256 bytes at T=1, and dies at its only
	// use, so two buffers suffice; v is a view of c.
	g := parse(t, `graph g
sym T
input %x: f32[T,64]
%a: f32[T,64] = silu(%x)
%b: f32[T,64] = silu(%a)
%c: f32[T,64] = silu(%b)
%v: f32[T,8,8] = reshape(%c) {shape=[T,8,8]}
%d: f32[T,8,8] = silu(%v)
output %d
`)
	p, err := PlanMemory(g, 1, ir.F32)
	if err != nil {
		t.Fatal(err)
	}
	checkPlan(t, p)
	if p.Arena != 2*256 || p.PeakLive != 2*256 || p.NoReuse != 5*256 {
		t.Fatalf("arena %d, peak %d, no reuse %d", p.Arena, p.PeakLive, p.NoReuse)
	}
	vo, _ := p.Offset("v")
	co, _ := p.Offset("c")
	if vo != co {
		t.Fatalf("the reshape view is at %d, its source at %d", vo, co)
	}
	p2, _ := PlanMemory(g, 1, ir.BF16)
	if p2.NoReuse != 5*256 { // 128 bytes rounded up to the alignment
		t.Fatalf("bf16 no reuse %d", p2.NoReuse)
	}
	p3, _ := PlanMemory(g, 16, ir.BF16)
	if p3.Arena != 2*16*64*2 {
		t.Fatalf("bf16 T=16 arena %d", p3.Arena)
	}
	// A step size whose buffers would overflow int64 is an error, not a
	// wrapped (even negative) arena size.
	for _, T := range []int{1 << 51, 1 << 56, 1<<62 + 1} {
		if p, err := PlanMemory(g, T, ir.F32); err == nil {
			t.Errorf("T=%d: arena %d, no reuse %d; want an error", T, p.Arena, p.NoReuse)
		}
	}
}

func TestMemoryPlanLaguna(t *testing.T) {
	for _, name := range []string{"synthetic-tiny", "laguna-s-2.1"} {
		res, err := Run(laguna(t, name), Options{})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.State.Memory) != 4 {
			t.Fatalf("%d plans", len(res.State.Memory))
		}
		inPlace := 0
		for _, p := range res.State.Memory {
			checkPlan(t, p)
			checkHolds(t, res.State.Graph, p)
			inPlace += len(inPlaceOf(p))
			t.Logf("%s T=%d %s: arena %d bytes (peak live %d, no reuse %d)", name, p.Tokens, p.DType, p.Arena, p.PeakLive, p.NoReuse)
		}
		if inPlace == 0 {
			t.Errorf("%s: no output written in place", name)
		}
	}
}
