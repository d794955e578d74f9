package lower

import (
	"reflect"
	"strings"
	"testing"
)

// prefillPair is a plan's prefill q rope and the attention after it.
type prefillPair struct {
	q, a Launch
	qi   int // the q rope's step
}

// prefillPairs are the q heads' qk_norm_rope launches of steps and the
// attn_prefill_wg launch after each (past the k heads' rope).
func prefillPairs(t *testing.T, meta []Step, steps [][]Launch) []prefillPair {
	t.Helper()
	var out []prefillPair
	for i := range steps {
		if meta[i].Op != "norm_rope" || len(steps[i]) != 1 || steps[i][0].Args[2].Int != 0 || !strings.HasSuffix(meta[i].Name, ".qr") {
			continue
		}
		if i+2 >= len(steps) || len(steps[i+2]) == 0 || steps[i+2][0].Kernel != "attn_prefill_wg" {
			t.Fatalf("%s: no attn_prefill_wg two steps on", meta[i].Name)
		}
		out = append(out, prefillPair{steps[i][0], steps[i+2][0], i})
	}
	return out
}

// TestFusePrefillNormRoPEAttention: in an S-2.1 plan's prefill (sliding
// layers rot 128, the full layer rot 64 with YaRN's factor), each q
// heads' qk_norm_rope launch is gone and the attention after it is
// PrefillNormRoPEAttention of the pair, every other launch as without the
// fusion, at the chunk, a shorter T and the last-row tail; decode is
// untouched. Then the refusals.
func TestFusePrefillNormRoPEAttention(t *testing.T) {
	fused, plain := fusionPlans(t, "q4_k_m", "fusePrefillNormRoPEAttention")
	for _, T := range []int{64, 37} {
		for _, tail := range []Tail{TailAll, TailLast} {
			got, want := fusionSteps(t, fused, plain, T, tail)
			pairs := prefillPairs(t, plain.Prefill.Steps, want)
			if len(pairs) != 4 {
				t.Fatalf("T=%d: %d q ropes before an attention, want 4", T, len(pairs))
			}
			rots := map[int64]bool{}
			for _, p := range pairs {
				f, err := PrefillNormRoPEAttention(p.q, p.a)
				if err != nil {
					t.Fatalf("T=%d: %v", T, err)
				}
				if f.Args[7] != p.q.Args[6] || f.Args[8] != p.q.Args[4] || f.Args[19] != p.q.Args[8] || f.Args[22] != p.q.Args[13] {
					t.Errorf("T=%d: %s reads q at %v, norm %v, rot %v", T, f.NameExpr(), f.Args[7], f.Args[19], f.Args[22])
				}
				rots[p.q.Args[13].Int] = true
				want[p.qi] = nil
				want[p.qi+2][0] = f
			}
			if !rots[64] || !rots[128] {
				t.Errorf("T=%d: rotary widths %v, want 64 and 128", T, rots)
			}
			for i := range want {
				if len(want[i]) == 0 && len(got[i]) == 0 {
					continue
				}
				if !reflect.DeepEqual(got[i], want[i]) {
					t.Fatalf("T=%d tail %d: step %s is %v, want %v", T, tail, plain.Prefill.Steps[i].Name, got[i], want[i])
				}
			}
		}
	}
	if !reflect.DeepEqual(fused.Decode, plain.Decode) {
		t.Error("the decode schedule differs with the fusion")
	}

	// Refusals, each a change to a real pair.
	steps, err := plain.At(plain.Prefill, 64)
	if err != nil {
		t.Fatal(err)
	}
	p0 := prefillPairs(t, plain.Prefill.Steps, steps)[1]
	x := p0.q.Args[6].Ptr()
	for _, c := range []struct {
		name   string
		change func(q, a *Launch)
		ok     bool
	}{
		{"as planned", func(q, a *Launch) {}, true},
		{"output apart", func(q, a *Launch) { a.Args[14] = ptrArg(x.At(1 << 30)) }, true},
		{"output over the q rows", func(q, a *Launch) { a.Args[14], a.Args[15] = ptrArg(x), q.Args[4] }, true},
		{"output shifted into the q rows", func(q, a *Launch) { a.Args[14] = ptrArg(x.At(256)) }, false},
		{"k heads too", func(q, a *Launch) { q.Args[2] = i32(8) }, false},
		{"rot 48", func(q, a *Launch) { q.Args[13] = i32(48) }, false},
		{"q read elsewhere", func(q, a *Launch) { a.Args[7] = ptrArg(x) }, false},
		{"q row stride", func(q, a *Launch) { a.Args[8] = i64(a.Args[8].Int + 8) }, false},
		{"other tokens", func(q, a *Launch) { q.Args[0] = i32(int(q.Args[0].Int) - 1) }, false},
		{"other heads", func(q, a *Launch) { a.Args[1] = i32(int(a.Args[1].Int) / 2) }, false},
		{"one head a kv head: the rope table outgrows two CTAs", func(q, a *Launch) { q.Args[1], a.Args[1] = a.Args[2], a.Args[2] }, false},
		{"f32 rope", func(q, a *Launch) { q.DTypes = []string{"f32"} }, false},
		{"the tensor-core kernel", func(q, a *Launch) { a.Kernel, a.File = "attn_prefill_tc", "attention_prefill_tc.cu" }, false},
		{"fused already", func(q, a *Launch) { a.Ints = []int64{128, 1, 2, 1} }, false},
		{"not a rope", func(q, a *Launch) { q.Kernel = "rms_norm_block" }, false},
	} {
		q, a := p0.q, p0.a
		q.Args, a.Args, q.Ints, a.Ints = append([]Arg(nil), q.Args...), append([]Arg(nil), a.Args...), append([]int64(nil), q.Ints...), append([]int64(nil), a.Ints...)
		c.change(&q, &a)
		f, err := PrefillNormRoPEAttention(q, a)
		if (err == nil) != c.ok {
			t.Errorf("%s: err %v, want ok %v", c.name, err, c.ok)
		}
		// The rope table after the tiles: the CTA's tokens, rot floats a
		// token.
		if err == nil {
			group, rot, nw := a.Args[1].Int/a.Args[2].Int, q.Args[13].Int, a.Ints[2]
			tables := 4 * rot * ((64*nw-1)/group + 2)
			if f.Shmem != a.Shmem+int(tables) {
				t.Errorf("%s: %d bytes of shared memory, want %d + %d of rope tables", c.name, f.Shmem, a.Shmem, tables)
			}
		}
	}
	// In a stream: the k heads' rope writing into the q rows stops it, and
	// so does another step reading the rotated q.
	for _, c := range []struct {
		name   string
		change func(meta []Step, steps [][]Launch)
	}{
		{"k rope over the q rows", func(meta []Step, steps [][]Launch) { steps[p0.qi+1][0].Args[7] = ptrArg(x.At(1024)) }},
		{"the rotated q read later", func(meta []Step, steps [][]Launch) {
			meta[p0.qi+3].In = append(meta[p0.qi+3].In, meta[p0.qi].Out[0])
		}},
	} {
		meta := append([]Step(nil), plain.Prefill.Steps...)
		for i := range meta {
			meta[i].In = append([]Operand(nil), meta[i].In...)
		}
		st := make([][]Launch, len(steps))
		for i := range steps {
			st[i] = append([]Launch(nil), steps[i]...)
			for j := range st[i] {
				st[i][j].Args = append([]Arg(nil), st[i][j].Args...)
			}
		}
		c.change(meta, st)
		fusePrefillNormRoPEAttention(meta, st)
		if len(st[p0.qi]) != 1 || st[p0.qi+2][0].Ints[3] != 0 {
			t.Errorf("%s: fused anyway", c.name)
		}
		// The other layers still fuse.
		n := 0
		for i := range st {
			for _, l := range st[i] {
				if l.Kernel == "attn_prefill_wg" && l.Ints[3] == 1 {
					n++
				}
			}
		}
		if n != 3 {
			t.Errorf("%s: %d attentions fused, want the other 3", c.name, n)
		}
	}
}
