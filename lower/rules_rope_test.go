package lower

import (
	"reflect"
	"strconv"
	"strings"
	"testing"

	"lagc/ir"
	"lagc/prep"
)

// qkNormRoPE reads a qk_norm_rope launch's arguments back.
type qkNormRoPE struct {
	T, NQ, NK, D int
	X, Out       Ptr
	WQ, WK       Ptr
}

func readQKNormRoPE(t *testing.T, l Launch) qkNormRoPE {
	t.Helper()
	if l.Kernel != "qk_norm_rope" || len(l.Args) != 16 {
		t.Fatalf("launch %s with %d arguments", l.Kernel, len(l.Args))
	}
	a := l.Args
	return qkNormRoPE{T: int(a[0].Int), NQ: int(a[1].Int), NK: int(a[2].Int), D: int(a[3].Int),
		X: a[6].Ptr(), Out: a[7].Ptr(), WQ: a[8].Ptr(), WK: a[9].Ptr()}
}

// TestNormRoPEPairsInDecode: in the decode schedule each attention's q
// and k norm_ropes are one launch, in place in the matmul_split's row
// (q heads with q_norm, then k heads with k_norm); prefill, batched decode
// and a ragged chunk launch one per step.
func TestNormRoPEPairsInDecode(t *testing.T) {
	for _, dt := range []ir.DType{ir.BF16, ir.F32} {
		// The q/k pairs as launched before the attention may take them
		// over (TestFuseNormRoPEAttention, TestFuseRowsNormRoPEAttention).
		p, err := Lower(tinyGraph(t), Options{DType: dt, Chunk: 8, MaxContext: 64, Seqs: 4,
			DisableFusions: []string{"fuseNormRoPEAttention", "fuseRowsKNormRoPEAttention"}})
		if err != nil {
			t.Fatal(err)
		}
		esz := int64(dt.Bytes(1))
		pairs := 0
		steps := p.Decode.Steps
		for i, st := range steps {
			if st.Op != "norm_rope" || st.In[1].Value != "blk."+strconv.Itoa(st.Layer)+".attn_q_norm.weight" {
				continue
			}
			k := steps[i+1]
			if k.Op != "norm_rope" || len(st.Launches) != 1 || len(k.Launches) != 0 {
				t.Fatalf("%s: %d launches, then %s (%s) %d", st.Name, len(st.Launches), k.Name, k.Op, len(k.Launches))
			}
			a := readQKNormRoPE(t, st.Launches[0])
			nq, nkv, d := st.Out[0].Shape[1], k.Out[0].Shape[1], st.Out[0].Shape[2]
			q0 := Ptr{BaseArena, st.In[0].Offset}
			want := qkNormRoPE{T: 1, NQ: nq, NK: nkv, D: d, X: q0, Out: q0,
				WQ: Ptr{BaseWeights, st.In[1].Offset}, WK: Ptr{BaseWeights, k.In[1].Offset}}
			if a != want {
				t.Errorf("%s %s: %+v, want %+v", dt, st.Name, a, want)
			}
			if st.Out[0].Offset != st.In[0].Offset || k.In[0].Offset != st.In[0].Offset+int64(nq*d)*esz || k.Out[0].Offset != k.In[0].Offset {
				t.Errorf("%s %s: q %+v -> %+v, k %+v -> %+v: not in place, back to back", dt, st.Name, st.In[0], st.Out[0], k.In[0], k.Out[0])
			}
			pairs++
		}
		if pairs != 4 {
			t.Errorf("%s: %d q/k pairs in the decode schedule, want 4", dt, pairs)
		}
		var txt strings.Builder
		if err := p.Print(&txt); err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(txt.String(), "= norm_rope(blk."); n != 16 || strings.Count(txt.String(), "(launched by the step before)") != 4 {
			t.Errorf("%s: the printed plan has %d norm_rope steps, %d marked launched by the step before; want 16 and 4", dt, n,
				strings.Count(txt.String(), "(launched by the step before)"))
		}
		at, err := p.At(p.Decode, 1)
		if err != nil {
			t.Fatal(err)
		}
		for i, st := range steps {
			if !reflect.DeepEqual(at[i], st.Launches) {
				t.Errorf("%s %s: At(decode, 1) gives %v, the plan %v", dt, st.Name, at[i], st.Launches)
			}
		}
		for _, run := range []struct {
			what  string
			steps []Step
			at    func() ([][]Launch, error)
		}{
			{"prefill", p.Prefill.Steps, func() ([][]Launch, error) { return p.At(p.Prefill, p.Prefill.Tokens) }},
			{"ragged prefill", p.Prefill.Steps, func() ([][]Launch, error) { return p.At(p.Prefill, 3) }},
			{"prefill of one token", p.Prefill.Steps, func() ([][]Launch, error) { return p.At(p.Prefill, 1) }},
			{"batch of 4", p.Prefill.Steps, func() ([][]Launch, error) { return p.AtBatch(4) }},
		} {
			ls, err := run.at()
			if err != nil {
				t.Fatal(err)
			}
			for i, st := range run.steps {
				if st.Op == "norm_rope" && (len(ls[i]) != 1 || readQKNormRoPE(t, ls[i][0]).NK != 0) {
					t.Errorf("%s %s %s: launches %v, want one of its own heads", dt, run.what, st.Name, ls[i])
				}
			}
		}
	}
}

// TestNormRoPEPairRule: two adjacent norm_rope steps at T=1 share a launch
// only when every condition holds.
func TestNormRoPEPairRule(t *testing.T) {
	params := prep.RopeParams{RotaryDim: 16, Theta: 1e4, Type: "default", Factor: 1, BetaFast: 32, BetaSlow: 1, AttentionFactor: 1}
	attrs := func(eps float64, theta float64) map[string]any {
		return map[string]any{"eps": eps, "rotary_dim": 16, "theta": theta, "rope_type": "default", "factor": 1.0,
			"original_context": 0, "beta_fast": 32.0, "beta_slow": 1.0, "attention_factor": 1.0}
	}
	act := func(name string, heads int, off int64) Operand {
		return Operand{Value: name, Kind: "activation", DType: "bf16", Shape: []int{T, heads, 16}, Offset: off, Weight: -1}
	}
	step := func(name string, heads int, in, out int64, w int64, a map[string]any) Step {
		return Step{Op: "norm_rope", Name: name, Attrs: a, KV: -1,
			In: []Operand{act(name+"h", heads, in), {Value: name + "_norm", Kind: "weight", DType: "f32", Shape: []int{16}, Offset: w},
				{Value: "pos", Kind: "input", DType: "i32", Shape: []int{T}}},
			Out: []Operand{act(name, heads, out)}}
	}
	const q = 4 * 16 * 2 // bytes of 4 bf16 heads of 16
	for _, c := range []struct {
		name string
		q, k Step
		pair bool
	}{
		{"in place, back to back", step("q", 4, 0, 0, 0, attrs(1e-6, 1e4)), step("k", 2, q, q, 64, attrs(1e-6, 1e4)), true},
		{"disjoint rows", step("q", 4, 0, 4096, 0, attrs(1e-6, 1e4)), step("k", 2, q, 4096+q, 64, attrs(1e-6, 1e4)), true},
		{"gap between inputs", step("q", 4, 0, 0, 0, attrs(1e-6, 1e4)), step("k", 2, q+64, q+64, 64, attrs(1e-6, 1e4)), false},
		{"outputs apart", step("q", 4, 0, 4096, 0, attrs(1e-6, 1e4)), step("k", 2, q, 8192, 64, attrs(1e-6, 1e4)), false},
		{"output row overlaps input row", step("q", 4, 0, 64, 0, attrs(1e-6, 1e4)), step("k", 2, q, 64+q, 64, attrs(1e-6, 1e4)), false},
		{"other eps", step("q", 4, 0, 0, 0, attrs(1e-6, 1e4)), step("k", 2, q, q, 64, attrs(1e-5, 1e4)), false},
		{"other rope", step("q", 4, 0, 0, 0, attrs(1e-6, 1e4)), step("k", 2, q, q, 64, attrs(1e-6, 5e5)), false},
	} {
		p := &Plan{Ropes: []Rope{{Params: params, RotaryDim: 16, AttnFactor: 1}}}
		other := params
		other.Theta = 5e5
		p.Ropes = append(p.Ropes, Rope{Params: other, RotaryDim: 16, AttnFactor: 1, Offset: 256})
		s := &Schedule{Class: Decode, Tokens: 1, Steps: []Step{c.q, c.k}}
		var got [2][]Launch
		for i := range s.Steps {
			ls, err := p.stepLaunches(s, &s.Steps[i], 1, false)
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			got[i] = ls
		}
		paired := len(got[0]) == 1 && len(got[1]) == 0 && readQKNormRoPE(t, got[0][0]).NK == 2
		alone := len(got[0]) == 1 && len(got[1]) == 1 && readQKNormRoPE(t, got[0][0]).NK == 0 && readQKNormRoPE(t, got[1][0]).NK == 0
		if paired != c.pair || (!c.pair && !alone) {
			t.Errorf("%s: launches %v then %v, paired %v, want %v", c.name, got[0], got[1], paired, c.pair)
		}
		if c.pair {
			a := readQKNormRoPE(t, got[0][0])
			if a.WQ != (Ptr{BaseWeights, 0}) || a.WK != (Ptr{BaseWeights, 64}) || a.X != (Ptr{BaseArena, 0}) || a.Out != (Ptr{BaseArena, c.q.Out[0].Offset}) {
				t.Errorf("%s: %+v", c.name, a)
			}
		}
		// At two tokens the heads are no longer one row: never paired.
		for i := range s.Steps {
			if ls, err := p.stepLaunches(s, &s.Steps[i], 2, false); err != nil || len(ls) != 1 {
				t.Errorf("%s at T=2: step %d: %v, %v", c.name, i, ls, err)
			}
		}
	}
}

// TestNormRoPEShape pins qk_norm_rope's launch: the fast path (FAST = 1:
// head_dim 128 of 2-byte values, 16-byte aligned rows, rot/16 a power of
// two) with 16*k (token, head) items a block, k in [1, 8] filling one wave
// of four blocks an SM; else the one-warp path with a token's heads in
// groups of up to two a warp where that leaves two blocks an SM, else one.
// Shared memory: a rope table for each token a block's items may span
// (checked against every block), after each warp's staged head on the
// one-warp path (SMs: the target's, 0 an H200's).
func TestNormRoPEShape(t *testing.T) {
	p := Ptr{BaseArena, 0}
	for _, c := range []struct {
		name              string
		dt                string
		T, nq, nk, d, rot int
		ld                int   // 0: (nq+nk)*d
		off               int64 // x's and out's offset
		sms               int
		fast              bool
		per, blocks       int
	}{
		{"q prefill", "bf16", 2048, 72, 0, 128, 128, 0, 0, 0, true, 128, 1152},        // 8 items a slot, 3 tokens a block
		{"k prefill", "bf16", 2048, 8, 0, 128, 128, 0, 0, 0, true, 32, 512},           // 2 items a slot: one wave
		{"full-layer q", "bf16", 2048, 48, 0, 128, 64, 0, 0, 0, true, 128, 768},       // rot 64
		{"T 300", "f16", 300, 72, 0, 128, 128, 0, 0, 0, true, 48, 450},                // 3 items a slot
		{"decode q+k", "bf16", 1, 72, 8, 128, 128, 88 * 128, 0, 0, true, 16, 5},       // in the qkv row
		{"one token", "bf16", 1, 72, 0, 128, 128, 0, 0, 0, true, 16, 5},               // the last block 8 heads
		{"T 37 q+k", "bf16", 37, 48, 8, 128, 64, 0, 0, 0, true, 16, 130},              // 2072 items
		{"400 SMs", "bf16", 132, 72, 0, 128, 128, 0, 0, 400, true, 16, 594},           // one item a slot
		{"one SM", "bf16", 300, 5, 3, 128, 128, 0, 0, 1, true, 128, 19},               // 8 items a slot
		{"f32", "f32", 2048, 72, 0, 128, 128, 0, 0, 0, false, 15, 9831},               // 5 groups of 15 heads
		{"f32 one token", "f32", 1, 72, 0, 128, 128, 0, 0, 0, false, 8, 9},            // one head a warp
		{"f32 k", "f32", 2048, 8, 0, 128, 128, 0, 0, 0, false, 8, 2048},               // a token a block
		{"f32 400 SMs", "f32", 132, 72, 0, 128, 128, 0, 0, 400, false, 8, 1188},       // one head a warp
		{"unaligned rows", "bf16", 5, 8, 2, 128, 128, 10*128 + 5, 0, 0, false, 5, 10}, // ld % 8 != 0: heads in 2 groups
		{"unaligned x", "bf16", 5, 8, 0, 128, 128, 0, 8, 0, false, 8, 5},
		{"d 64", "bf16", 5, 8, 0, 64, 64, 0, 0, 0, false, 8, 5},
		{"rot 96", "bf16", 5, 8, 0, 128, 96, 0, 0, 0, false, 8, 5}, // 6 chunks of 8: no xor partner
		{"rot 8", "bf16", 5, 8, 0, 128, 8, 0, 0, 0, false, 8, 5},
	} {
		ld := c.ld
		if ld == 0 {
			ld = (c.nq + c.nk) * c.d
		}
		x := p.At(c.off)
		l, err := NormRoPE(NormRoPEArgs{DType: c.dt, X: x, Out: x, LD: ld, T: c.T, NQ: c.nq, NK: c.nk, D: c.d,
			Pos: p, Table: RoPETable{InvFreq: p, RotaryDim: c.rot, AttnFactor: 1}, SMs: c.sms})
		if err != nil {
			t.Fatal(err)
		}
		per := int(l.Args[15].Int)
		if l.Ints[0] != int64(b2i(c.fast)) || per != c.per || l.Grid[0] != c.blocks || l.Block[0] != 32*normRoPEWarps {
			t.Errorf("%s: FAST %d, %d items a block, grid %d, block %d; want %v, %d, %d", c.name, l.Ints[0], per, l.Grid[0],
				l.Block[0], c.fast, c.per, c.blocks)
		}
		nh := c.nq + c.nk
		if items := c.T * nh; per <= 0 || l.Grid[0]*per < items || (l.Grid[0]-1)*per >= items || (c.fast && per > 16*normRoPEItems) {
			t.Errorf("%s: %d blocks of %d items for %d", c.name, l.Grid[0], per, items)
		}
		tables := 0
		for b := 0; b < l.Grid[0]; b++ {
			last := min((b+1)*per, c.T*nh) - 1
			tables = max(tables, last/nh-b*per/nh+1)
		}
		stage := normRoPEWarps * c.d
		if c.fast {
			stage = 0
		}
		if want := (stage + tables*c.rot) * 4; l.Shmem != want {
			t.Errorf("%s: %d bytes of shared memory, want %d (%d tables)", c.name, l.Shmem, want, tables)
		}
	}
	if _, err := NormRoPE(NormRoPEArgs{DType: "bf16", X: p, Out: p, LD: 128 << 16, T: 1 << 16, NQ: 1 << 16, D: 128,
		Pos: p, Table: RoPETable{InvFreq: p, RotaryDim: 128, AttnFactor: 1}}); err == nil {
		t.Error("2^32 (token, head) items in one launch were accepted")
	}
}
