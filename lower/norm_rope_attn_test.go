package lower

import (
	"reflect"
	"testing"

	"lagc/ir"
)

// TestFuseNormRoPEAttention: in one-token decode every layer's
// qk_norm_rope is taken over by the attention after it, exactly as
// NormRoPEAttention builds it from the two launches the plan has without
// the fusion; batched decode steps (several rows, q and k apart) are
// fuseRowsKNormRoPEAttention's, not this fusion's; and the builder refuses
// an attention not reading the rotated heads, or a norm whose output
// another step reads.
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
		// Batched steps: q and k apart, this fusion does not apply.
		for _, b := range []int{1, 2} {
			lf, err := fused.AtBatch(b)
			if err != nil {
				t.Fatal(err)
			}
			lp, err := plain.AtBatch(b)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(lf, lp) {
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

// TestFuseRowsKNormRoPEAttention: in a batched decode step (a bucket's
// program: q, k and v apart, each row at its own position) every layer's
// k heads' qk_norm_rope launch is taken over by the attention after it,
// exactly as NormKRoPEAttentionRows builds it from the two launches the
// step has without the fusion, at every bucket, and the q heads keep their
// launch; the decode schedule is left to fuseNormRoPEAttention; it runs
// only when enabled (measured level on the H200); and the builder refuses
// launches that do not rotate what the attention reads as it reads it.
func TestFuseRowsKNormRoPEAttention(t *testing.T) {
	for _, dt := range []ir.DType{ir.BF16, ir.F32} {
		o := Options{DType: dt, Chunk: 16, MaxContext: 64, Seqs: 4, EnableFusions: []string{"fuseRowsKNormRoPEAttention"}} // opt-in
		fused, err := Lower(tinyGraph(t), o)
		if err != nil {
			t.Fatal(err)
		}
		o.EnableFusions = nil
		plain, err := Lower(tinyGraph(t), o)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(fused.Decode, plain.Decode) {
			t.Errorf("%s: the decode schedule differs with the rows fusion", dt)
		}
		for _, b := range []int{1, 2, 3, 4} {
			lf, err := fused.AtBatch(b)
			if err != nil {
				t.Fatal(err)
			}
			lp, err := plain.AtBatch(b)
			if err != nil {
				t.Fatal(err)
			}
			var got, want []Launch
			for i := range lf {
				got, want = append(got, lf[i]...), append(want, lp[i]...)
			}
			var pairs int
			for i, k := 0, 0; i < len(want); i, k = i+1, k+1 {
				if i+2 < len(want) && want[i].Kernel == "qk_norm_rope" && want[i+1].Kernel == "qk_norm_rope" && want[i+2].Kernel == "attn_decode" {
					f, err := NormKRoPEAttentionRows(want[i+1], want[i+2])
					if err != nil {
						t.Fatalf("%s batch %d: %v", dt, b, err)
					}
					if f.Ints[1] != 2 || f.Args[attnArgQ] != want[i+2].Args[attnArgQ] || f.Args[attnArgK] != want[i+1].Args[6] {
						t.Fatalf("%s batch %d: %v does not read the rotated q and the unrotated k", dt, b, f)
					}
					if k+1 >= len(got) || !reflect.DeepEqual(got[k], want[i]) || !reflect.DeepEqual(got[k+1], f) {
						t.Fatalf("%s batch %d: launches %d, %d are %v, %v; want q's rotation %v, then %v", dt, b, k, k+1, got[k], got[k+1], want[i], f)
					}
					pairs++
					i, k = i+2, k+1
					continue
				}
				if k >= len(got) || !reflect.DeepEqual(got[k], want[i]) {
					t.Fatalf("%s batch %d: launch %d is %v, want %v", dt, b, k, got[k], want[i])
				}
			}
			if pairs != 4 || len(got) != len(want)-pairs {
				t.Errorf("%s batch %d: %d fused pairs, %d launches of %d", dt, b, pairs, len(got), len(want))
			}
		}
	}
	// Refusals, on bucket 3's first layer.
	p, err := Lower(tinyGraph(t), Options{DType: ir.BF16, Chunk: 16, MaxContext: 64, Seqs: 4})
	if err != nil {
		t.Fatal(err)
	}
	steps, err := p.AtBatch(3)
	if err != nil {
		t.Fatal(err)
	}
	var nq, nk, a Launch
	for _, ls := range steps {
		for _, l := range ls {
			switch {
			case l.Kernel == "qk_norm_rope" && nq.Kernel == "":
				nq = l
			case l.Kernel == "qk_norm_rope" && nk.Kernel == "":
				nk = l
			case l.Kernel == "attn_decode" && a.Kernel == "":
				a = l
			}
		}
	}
	if _, err := NormKRoPEAttentionRows(nk, a); err != nil {
		t.Fatal(err)
	}
	with := func(l Launch, i int, v Arg) Launch {
		l.Args = append([]Arg(nil), l.Args...)
		l.Args[i] = v
		return l
	}
	es, d := int64(2), a.Args[attnArgD].Int
	for name, c := range map[string][2]Launch{
		"q's rotation":                {nq, a},
		"the attention twice":         {a, a},
		"k read elsewhere":            {nk, with(a, attnArgK, ptrArg(a.Args[attnArgK].Ptr().At(64)))},
		"no fresh k":                  {nk, with(a, attnArgK, ptrArg(Ptr{}))},
		"k at other positions":        {with(nk, 11, ptrArg(nk.Args[11].Ptr().At(4))), a},
		"k rows strided":              {with(with(nk, 4, i64(2*nk.Args[4].Int)), 5, i64(2*nk.Args[5].Int)), a},
		"k for fewer rows":            {with(nk, 0, i32(2)), a},
		"k and more heads":            {with(nk, 2, i32(1)), a},
		"already fused":               {nk, func() Launch { f, _ := NormKRoPEAttentionRows(nk, a); return f }()},
		"output over the unrotated k": {nk, with(a, attnArgOut, ptrArg(nk.Args[6].Ptr().At(es*d)))},
		"output over v":               {nk, with(a, attnArgOut, ptrArg(a.Args[attnArgK+1].Ptr()))},
	} {
		if _, err := NormKRoPEAttentionRows(c[0], c[1]); err == nil {
			t.Errorf("%s: fused", name)
		}
	}
}
