package lower

import (
	"reflect"
	"testing"

	"lagc/ir"
)

// TestFuseNormRoPEAttention: in one-token decode every layer's
// qk_norm_rope is taken over by the attention after it, exactly as
// NormRoPEAttention builds it from the two launches the plan has without
// the fusion; batched decode steps (several rows) keep both launches; and
// the builder refuses an attention not reading the rotated heads, or a
// norm whose output another step reads.
func TestFuseNormRoPEAttention(t *testing.T) {
	for _, dt := range []ir.DType{ir.BF16, ir.F32} {
		o := Options{DType: dt, Chunk: 16, MaxContext: 64, Seqs: 4}
		fused, err := Lower(tinyGraph(t), o)
		if err != nil {
			t.Fatal(err)
		}
		o.DisableFusions = []string{"fuseNormRoPEAttention"}
		plain, err := Lower(tinyGraph(t), o)
		if err != nil {
			t.Fatal(err)
		}
		flat := func(s *Schedule) []Launch {
			var out []Launch
			for _, st := range s.Steps {
				out = append(out, st.Launches...)
			}
			return out
		}
		got, want := flat(fused.Decode), flat(plain.Decode)
		var pairs int
		for i, k := 0, 0; i < len(want); i, k = i+1, k+1 {
			if want[i].Kernel == "qk_norm_rope" && i+1 < len(want) && want[i+1].Kernel == "attn_decode" {
				f, err := NormRoPEAttention(want[i], want[i+1])
				if err != nil {
					t.Fatalf("%s: %v", dt, err)
				}
				if k >= len(got) || !reflect.DeepEqual(got[k], f) {
					t.Fatalf("%s: launch %d is %v, want %v", dt, k, got[k], f)
				}
				pairs++
				i++
				continue
			}
			if k >= len(got) || !reflect.DeepEqual(got[k], want[i]) {
				t.Fatalf("%s: launch %d is %v, want %v", dt, k, got[k], want[i])
			}
		}
		if pairs != 4 || len(got) != len(want)-pairs {
			t.Errorf("%s: %d fused pairs, %d launches of %d", dt, pairs, len(got), len(want))
		}
		// Batched steps: several rows, every launch stays.
		for _, b := range []int{1, 2} {
			lf, err := fused.AtBatch(b)
			if err != nil {
				t.Fatal(err)
			}
			lp, err := plain.AtBatch(b)
			if err != nil {
				t.Fatal(err)
			}
			if b > 1 && !reflect.DeepEqual(lf, lp) {
				t.Errorf("%s: a batched step of %d rows differs with the fusion", dt, b)
			}
		}
	}
	// Refusals.
	p, err := Lower(tinyGraph(t), Options{DType: ir.BF16, Chunk: 16, MaxContext: 64, DisableFusions: []string{"fuseNormRoPEAttention"}})
	if err != nil {
		t.Fatal(err)
	}
	var n, a Launch
	for _, st := range p.Decode.Steps {
		for _, l := range st.Launches {
			if l.Kernel == "qk_norm_rope" && n.Kernel == "" {
				n = l
			}
			if l.Kernel == "attn_decode" && a.Kernel == "" {
				a = l
			}
		}
	}
	if _, err := NormRoPEAttention(n, a); err != nil {
		t.Fatal(err)
	}
	moved := a
	moved.Args = append([]Arg(nil), a.Args...)
	moved.Args[attnArgQ] = ptrArg(a.Args[attnArgQ].Ptr().At(64))
	if _, err := NormRoPEAttention(n, moved); err == nil {
		t.Error("an attention reading q elsewhere was fused")
	}
	if _, err := NormRoPEAttention(a, n); err == nil {
		t.Error("the launches in the wrong order were fused")
	}
	meta := []Step{{Op: "norm_rope", Out: []Operand{{Value: "q"}}}, {Op: "attention", In: []Operand{{Value: "q"}}}, {Op: "add", In: []Operand{{Value: "q"}}}}
	if onlyReader(meta, 0, 1) {
		t.Error("a rotated value another step reads counted as the attention's alone")
	}
	if !onlyReader(meta[:2], 0, 1) {
		t.Error("a rotated value only the attention reads was refused")
	}
}
