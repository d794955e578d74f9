package lower

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"lagc/ir"
)

// TestFuseTopKShared: in S-2.1 bf16 plans, every MoE layer's router_topk
// (prefill at 2048 and 300 tokens) and router_fused (decode) becomes
// TopKShared of it and the moe_add_shared after it, which goes; nothing
// else changes against the plan without the fusion; an opt-in fusion
// only, and only a known one, may be enabled.
func TestFuseTopKShared(t *testing.T) {
	on := Options{DType: ir.BF16, Chunk: 2048, MaxContext: 4096, SMs: 132}
	off := on
	off.DisableFusions = []string{"fuseTopKShared"}
	fused, plain := bf16Plan(t, "laguna-s-2.1", 4, on), bf16Plan(t, "laguna-s-2.1", 4, off)
	for _, c := range []struct {
		decode bool
		T      int
	}{{false, 2048}, {false, 300}, {true, 1}} {
		fs, ps, router := fused.Prefill, plain.Prefill, "router_topk"
		if c.decode {
			fs, ps, router = fused.Decode, plain.Decode, "router_fused"
		}
		T := c.T
		got, err := fused.At(fs, T)
		if err != nil {
			t.Fatal(err)
		}
		want, err := plain.At(ps, T)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for i := range want {
			if len(want[i]) == 0 || want[i][len(want[i])-1].Kernel != router {
				continue
			}
			r := want[i][len(want[i])-1]
			j := i + 1
			for len(want[j]) == 0 { // decode's selection step launches nothing
				j++
			}
			m := 0
			for want[j][m].Kernel == Memcpy {
				m++
			}
			f, err := TopKShared(r, want[j][m])
			if err != nil {
				t.Fatalf("T=%d: %v", T, err)
			}
			want[i][len(want[i])-1] = f
			want[j] = append(want[j][:m:m], want[j][m+1:]...)
			n++
		}
		if n != 3 {
			t.Fatalf("T=%d: %d %s launches in 3 MoE layers", T, n, router)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("T=%d: the fused plan is not the plain one with TopKShared's launches", T)
		}
	}
	for _, bad := range []string{"fuseGEMVNorm", "fuseNothing", "fuseTopKShared"} {
		o := on
		o.EnableFusions = []string{bad}
		if _, err := quantPlan(t, "laguna-s-2.1", 2, "", o); err == nil {
			t.Errorf("EnableFusions %s accepted", bad)
		}
	}
	// Another step reading the router's weights (their arena bytes) before
	// they are written again: that layer keeps moe_add_shared.
	meta := append([]Step(nil), plain.Prefill.Steps...)
	steps, err := plain.At(plain.Prefill, 2048)
	if err != nil {
		t.Fatal(err)
	}
	first := -1
	for i := range steps {
		if len(steps[i]) > 0 && steps[i][len(steps[i])-1].Kernel == "router_topk" {
			first = i
			break
		}
	}
	next := first + 2 // the step after the MoE step, before the weights' bytes are reused
	meta[next].In = append(append([]Operand(nil), meta[next].In...), meta[first].Out[0])
	fuseTopKShared(meta, steps)
	if steps[first][len(steps[first])-1].Kernel != "router_topk" {
		t.Errorf("fused although step %s reads the router's weights", meta[next].Name)
	}
	n := 0
	for i := range steps {
		if len(steps[i]) > 0 && steps[i][len(steps[i])-1].Kernel == "router_topk_shared" {
			n++
		}
	}
	if n != 2 {
		t.Errorf("%d other layers fused, want 2", n)
	}
}

// TestTopKSharedInvariant: TopKShared refuses what it cannot do exactly.
func TestTopKSharedInvariant(t *testing.T) {
	p := bf16Plan(t, "laguna-s-2.1", 2, Options{DType: ir.BF16, Chunk: 2048, MaxContext: 4096, SMs: 132,
		DisableFusions: []string{"fuseTopKShared"}})
	var r, a Launch
	for i, st := range p.Prefill.Steps {
		if n := len(st.Launches); n > 0 && st.Launches[n-1].Kernel == "router_topk" {
			r = st.Launches[n-1]
			for _, l := range p.Prefill.Steps[i+1].Launches {
				if l.Kernel == "moe_add_shared" {
					a = l
				}
			}
		}
	}
	if _, err := TopKShared(r, a); err != nil {
		t.Fatalf("the plan's own launches: %v", err)
	}
	for _, c := range []struct {
		name   string
		r, a   Launch
		reason string
	}{
		{"block kernel", modLaunch(r, func(l *Launch) { l.Kernel = "router_topk_block" }), a, "not a router_topk"},
		{"tokens", r, modLaunch(a, func(l *Launch) { l.Args[0] = i32(7) }), "tokens"},
		{"other weights", r, modLaunch(a, func(l *Launch) { l.Args[4] = l.Args[6] }), "reads"},
		{"33 routes", r, modLaunch(a, func(l *Launch) { l.Args[2] = i32(23) }), "at most 32"},
		{"no shared", r, modLaunch(a, func(l *Launch) { l.Args[2] = i32(0) }), "at most 32"},
		{"over logits", r, modLaunch(a, func(l *Launch) { l.Args[6] = r.Args[5] }), "overlap the router's logits"},
	} {
		_, err := TopKShared(c.r, c.a)
		if err == nil || !strings.Contains(err.Error(), c.reason) {
			t.Errorf("%s: %v, want an error about %q", c.name, err, c.reason)
		}
	}
}

// TestTopKSharedRouterFused: in decode TopKShared turns router_fused and
// the moe_add_shared after it into router_fused_shared: router_fused's
// arguments with the extended routes for its own and S, first after the
// counter, which routerOutputs reads as k+S routes a token; it refuses
// extended routes over the router's activations, logits or counter, or
// another token count.
func TestTopKSharedRouterFused(t *testing.T) {
	p := bf16Plan(t, "laguna-s-2.1", 2, Options{DType: ir.BF16, Chunk: 2048, MaxContext: 4096, SMs: 132,
		DisableFusions: []string{"fuseTopKShared"}})
	var r, a Launch
	for _, st := range p.Decode.Steps {
		for _, l := range st.Launches {
			switch l.Kernel {
			case "router_fused":
				r = l
			case "moe_add_shared":
				a = l
			}
		}
	}
	f, err := TopKShared(r, a)
	if err != nil {
		t.Fatalf("the plan's own launches: %v", err)
	}
	want := append(append(append([]Arg(nil), r.Args[:10]...), a.Args[6], a.Args[7], r.Args[12]), a.Args[2], a.Args[3])
	if f.Kernel != "router_fused_shared" || !reflect.DeepEqual(f.Args, want) || !reflect.DeepEqual(f.Ints, r.Ints) || f.Grid != r.Grid || f.Shmem != r.Shmem {
		t.Errorf("fused %v, want router_fused_shared with %v", f, want)
	}
	spans, ok := routerOutputs(f)
	if k, S := a.Args[1].Int, a.Args[2].Int; !ok || len(spans) != 4 || spans[1] != (span{a.Args[6].Ptr(), 4 * (k + S)}) || spans[2] != (span{a.Args[7].Ptr(), 4 * (k + S)}) {
		t.Errorf("routerOutputs of the fused launch: %v, %v", spans, ok)
	}
	for _, c := range []struct {
		name   string
		r, a   Launch
		reason string
	}{
		{"over x", r, modLaunch(a, func(l *Launch) { l.Args[6] = r.Args[3] }), "overlap"},
		{"over logits", r, modLaunch(a, func(l *Launch) { l.Args[7] = r.Args[5] }), "overlap"},
		{"over the counter", r, modLaunch(a, func(l *Launch) { l.Args[6] = r.Args[12] }), "overlap"},
		{"tokens", r, modLaunch(a, func(l *Launch) { l.Args[0] = i32(2) }), "tokens"},
		{"other ids", r, modLaunch(a, func(l *Launch) { l.Args[5] = l.Args[7] }), "reads"},
	} {
		if _, err := TopKShared(c.r, c.a); err == nil || !strings.Contains(err.Error(), c.reason) {
			t.Errorf("%s: %v, want an error about %q", c.name, err, c.reason)
		}
	}
}

// modLaunch is l with f applied to a copy of its arguments.
func modLaunch(l Launch, f func(*Launch)) Launch {
	l.Args = append([]Arg(nil), l.Args...)
	f(&l)
	return l
}

// TestStepSelection: every router_topk step of S-2.1 bf16 plans (prefill
// at 2048, 300 and 40 tokens, decode) has a selection of its T tokens' 10
// routed ids: in the step's own ids output without fuseTopKShared (and at
// 40 tokens, where the block kernel selects and moe_add_shared stays), in
// the routes buffer with the shared expert's route after them with it.
func TestStepSelection(t *testing.T) {
	on := Options{DType: ir.BF16, Chunk: 2048, MaxContext: 4096, SMs: 132}
	off := on
	off.DisableFusions = []string{"fuseTopKShared"}
	for _, c := range []struct {
		fused  bool
		decode bool
		T      int
	}{{true, false, 2048}, {true, false, 300}, {true, false, 40}, {true, true, 1}, {false, false, 2048}, {false, true, 1}} {
		o := off
		if c.fused {
			o = on
		}
		p := bf16Plan(t, "laguna-s-2.1", 3, o)
		s := p.Prefill
		if c.decode {
			s = p.Decode
		}
		steps, err := p.At(s, c.T)
		if err != nil {
			t.Fatal(err)
		}
		extended := c.fused && (c.decode || c.T > RouterBlockMaxT) // router_fused_shared, router_topk_shared
		eachSelection(t, fmt.Sprintf("%+v", c), s, steps, func(st Step, sel Selection, ok bool) {
			ids := Ptr{BaseArena, st.Out[1].Offset}
			want := Selection{W: Ptr{BaseArena, st.Out[0].Offset}, IDs: ids, T: int64(c.T), K: 10, Stride: 10}
			if extended {
				if sel.IDs.Base != BaseRoutes || sel.W.Base != BaseRoutes {
					t.Errorf("%+v %s: the selection's weights and ids at %v, %v, want the routes buffer", c, st.Name, sel.W, sel.IDs)
				}
				want.W, want.IDs, want.Stride = sel.W, sel.IDs, 11
			}
			if !ok || sel != want {
				t.Errorf("%+v %s: selection %+v (%v), want %+v", c, st.Name, sel, ok, want)
			}
		})
	}
	if _, ok := SelectionOf(Launch{Kernel: "router_topk", File: "router.cu"}); ok {
		t.Error("SelectionOf read a launch without arguments")
	}
}

// TestStepSelectionEveryPlan: every router_topk step of S-2.1's prefill
// (chunks of 1 to 2048 tokens), batched and single decode schedules, bf16
// and each quantised recipe, has a selection of its T tokens' 10 ids: the
// step's own rows, or the routes buffer with the shared route after them
// (a route census fails where none is found; q4_k_m's router_qgemv at one
// token was not read before).
func TestStepSelectionEveryPlan(t *testing.T) {
	for _, recipe := range []string{"", "q4_k_m", "q4_k", "iq4_xs"} {
		p, err := quantPlan(t, "laguna-s-2.1", 3, recipe, Options{DType: ir.BF16, Chunk: 2048, MaxContext: 4096, SMs: 132, Seqs: 16})
		if err != nil {
			t.Fatal(err)
		}
		check := func(what string, s *Schedule, T int, steps [][]Launch) {
			t.Helper()
			eachSelection(t, fmt.Sprintf("%q %s at %d tokens", recipe, what, T), s, steps, func(st Step, sel Selection, ok bool) {
				own := sel.IDs == Ptr{BaseArena, st.Out[1].Offset} // unfused: the step's own ids rows
				if !ok || sel.T != int64(T) || sel.K != 10 || !(sel.Stride == 10 && own || sel.Stride == 11 && sel.IDs.Base == BaseRoutes) {
					t.Errorf("%q %s at %d tokens, %s: selection %+v (%v)", recipe, what, T, st.Name, sel, ok)
				}
			})
		}
		for _, T := range []int{1, 2, 8, 9, 40, 64, 65, 300, 2048} {
			steps, err := p.At(p.Prefill, T)
			if err != nil {
				t.Fatal(err)
			}
			check("prefill", p.Prefill, T, steps)
		}
		steps, err := p.At(p.Decode, 1)
		if err != nil {
			t.Fatal(err)
		}
		check("decode", p.Decode, 1, steps)
		for _, rows := range []int{2, 16} {
			b := p.Bucket(rows)
			steps, err := p.AtBatch(b)
			if err != nil {
				t.Fatal(err)
			}
			check("batched decode", p.Prefill, b, steps)
		}
	}
}

// eachSelection calls f with every router_topk step of s (launches steps)
// and its StepSelection; S-2.1's first three layers have two.
func eachSelection(t *testing.T, what string, s *Schedule, steps [][]Launch, f func(Step, Selection, bool)) {
	t.Helper()
	n := 0
	for i, st := range s.Steps {
		if st.Op == "router_topk" {
			n++
			sel, ok := StepSelection(steps, i)
			f(st, sel, ok)
		}
	}
	if n != 2 {
		t.Errorf("%s: %d router_topk steps, want 2", what, n)
	}
}
