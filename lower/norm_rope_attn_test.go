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
// fuseRowsNormRoPEAttention's, not this fusion's; and the builder refuses
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

// TestFuseRowsNormRoPEAttention: in a batched decode step (a bucket's
// program: q, k and v apart, each row at its own position) every layer's
// two qk_norm_rope launches are taken over by the attention after them,
// exactly as NormRoPEAttentionRows builds it from the three launches the
// step has without the fusion, at every bucket; the decode schedule is
// left to fuseNormRoPEAttention; it runs only when enabled (measured
// slower on the H200); and the builder refuses launches that do not rotate
// what the attention reads as it reads it.
func TestFuseRowsNormRoPEAttention(t *testing.T) {
	for _, dt := range []ir.DType{ir.BF16, ir.F32} {
		o := Options{DType: dt, Chunk: 16, MaxContext: 64, Seqs: 4, EnableFusions: []string{"fuseRowsNormRoPEAttention"}} // opt-in
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
			var triples int
			for i, k := 0, 0; i < len(want); i, k = i+1, k+1 {
				if i+2 < len(want) && want[i].Kernel == "qk_norm_rope" && want[i+1].Kernel == "qk_norm_rope" && want[i+2].Kernel == "attn_decode" {
					f, err := NormRoPEAttentionRows(want[i], want[i+1], want[i+2])
					if err != nil {
						t.Fatalf("%s batch %d: %v", dt, b, err)
					}
					if f.Ints[1] != 1 || f.Args[attnArgQ] != want[i].Args[6] || f.Args[attnArgK] != want[i+1].Args[6] {
						t.Fatalf("%s batch %d: %v does not read the unrotated q and k", dt, b, f)
					}
					if k >= len(got) || !reflect.DeepEqual(got[k], f) {
						t.Fatalf("%s batch %d: launch %d is %v, want %v", dt, b, k, got[k], f)
					}
					triples++
					i += 2
					continue
				}
				if k >= len(got) || !reflect.DeepEqual(got[k], want[i]) {
					t.Fatalf("%s batch %d: launch %d is %v, want %v", dt, b, k, got[k], want[i])
				}
			}
			if triples != 4 || len(got) != len(want)-2*triples {
				t.Errorf("%s batch %d: %d fused triples, %d launches of %d", dt, b, triples, len(got), len(want))
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
	if _, err := NormRoPEAttentionRows(nq, nk, a); err != nil {
		t.Fatal(err)
	}
	with := func(l Launch, i int, v Arg) Launch {
		l.Args = append([]Arg(nil), l.Args...)
		l.Args[i] = v
		return l
	}
	es := int64(2)
	nh, d := a.Args[attnArgNH].Int, a.Args[attnArgD].Int
	for name, c := range map[string][3]Launch{
		"q and k swapped":              {nk, nq, a},
		"the attention twice":          {nq, a, a},
		"q read elsewhere":             {nq, nk, with(a, attnArgQ, ptrArg(a.Args[attnArgQ].Ptr().At(64)))},
		"k read elsewhere":             {nq, nk, with(a, attnArgK, ptrArg(a.Args[attnArgK].Ptr().At(64)))},
		"no fresh k":                   {nq, nk, with(a, attnArgK, ptrArg(Ptr{}))},
		"q rotated at other positions": {with(nq, 11, ptrArg(nq.Args[11].Ptr().At(4))), nk, a},
		"k with another eps":           {nq, with(nk, 10, f32(1e-3)), a},
		"k with another rotation":      {nq, with(nk, 13, i32(int(nk.Args[13].Int/2))), a},
		"q rows strided":               {with(with(nq, 4, i64(2*nh*d)), 5, i64(2*nh*d)), nk, a},
		"q for fewer rows":             {with(nq, 0, i32(2)), nk, a},
		"k with q's heads":             {nq, with(nk, 1, i32(int(nh))), a},
		"already fused":                {nq, nk, func() Launch { f, _ := NormRoPEAttentionRows(nq, nk, a); return f }()},
		"output over k":                {nq, nk, with(a, attnArgOut, ptrArg(nk.Args[6].Ptr().At(es*d)))},
		"output over v":                {nq, nk, with(a, attnArgOut, ptrArg(a.Args[attnArgK+1].Ptr()))},
		"output half over q":           {nq, nk, with(a, attnArgOut, ptrArg(nq.Args[6].Ptr().At(es*d)))},
	} {
		if _, err := NormRoPEAttentionRows(c[0], c[1], c[2]); err == nil {
			t.Errorf("%s: fused", name)
		}
	}
	if f, err := NormRoPEAttentionRows(nq, nk, with(a, attnArgOut, ptrArg(nq.Args[6].Ptr()))); err != nil || f.Args[attnArgOut].Ptr() != nq.Args[6].Ptr() {
		t.Errorf("the output exactly over the unrotated q: %v", err)
	}
}
