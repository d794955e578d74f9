package lower

import (
	"reflect"
	"strings"
	"testing"

	"lagc/ir"
)

// TestFuseTopKShared: in S-2.1 bf16 prefill plans at 2048 and 300 tokens
// with the opt-in fusion enabled, every MoE layer's router_topk becomes
// TopKShared of it and the moe_add_shared after it, which goes; nothing
// else changes against the default plan (without it), decode included; an
// opt-in fusion only, and only a known one, may be enabled.
func TestFuseTopKShared(t *testing.T) {
	off := Options{DType: ir.BF16, Chunk: 2048, MaxContext: 4096, SMs: 132}
	on := off
	on.EnableFusions = []string{"fuseTopKShared"} // opt-in
	fused, plain := bf16Plan(t, "laguna-s-2.1", 4, on), bf16Plan(t, "laguna-s-2.1", 4, off)
	for _, T := range []int{2048, 300} {
		got, err := fused.At(fused.Prefill, T)
		if err != nil {
			t.Fatal(err)
		}
		want, err := plain.At(plain.Prefill, T)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for i := range want {
			if len(want[i]) == 0 || want[i][len(want[i])-1].Kernel != "router_topk" {
				continue
			}
			r := want[i][len(want[i])-1]
			m := 0
			for want[i+1][m].Kernel == Memcpy {
				m++
			}
			f, err := TopKShared(r, want[i+1][m])
			if err != nil {
				t.Fatalf("T=%d: %v", T, err)
			}
			want[i][len(want[i])-1] = f
			want[i+1] = append(want[i+1][:m:m], want[i+1][m+1:]...)
			n++
		}
		if n != 3 {
			t.Fatalf("T=%d: %d router_topk launches in 3 MoE layers", T, n)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("T=%d: the fused plan is not the plain one with TopKShared's launches", T)
		}
	}
	if !reflect.DeepEqual(fused.Decode, plain.Decode) {
		t.Errorf("decode changed")
	}
	for _, bad := range []string{"fuseGEMVNorm", "fuseNothing"} {
		o := off
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
	mod := func(l Launch, f func(*Launch)) Launch {
		l.Args = append([]Arg(nil), l.Args...)
		f(&l)
		return l
	}
	for _, c := range []struct {
		name   string
		r, a   Launch
		reason string
	}{
		{"block kernel", mod(r, func(l *Launch) { l.Kernel = "router_topk_block" }), a, "not a router_topk"},
		{"tokens", r, mod(a, func(l *Launch) { l.Args[0] = i32(7) }), "tokens"},
		{"other weights", r, mod(a, func(l *Launch) { l.Args[4] = l.Args[6] }), "reads"},
		{"33 routes", r, mod(a, func(l *Launch) { l.Args[2] = i32(23) }), "at most 32"},
		{"no shared", r, mod(a, func(l *Launch) { l.Args[2] = i32(0) }), "at most 32"},
		{"over logits", r, mod(a, func(l *Launch) { l.Args[6] = r.Args[5] }), "overlap the router's logits"},
	} {
		_, err := TopKShared(c.r, c.a)
		if err == nil || !strings.Contains(err.Error(), c.reason) {
			t.Errorf("%s: %v, want an error about %q", c.name, err, c.reason)
		}
	}
}
