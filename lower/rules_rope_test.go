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
	if l.Kernel != "qk_norm_rope" || len(l.Args) != 15 {
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
		// over (TestFuseNormRoPEAttention).
		p, err := Lower(tinyGraph(t), Options{DType: dt, Chunk: 8, MaxContext: 64, Seqs: 4, DisableFusions: []string{"fuseNormRoPEAttention"}})
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

// TestNormRoPEGroups pins qk_norm_rope's grid: a token's heads in groups
// of up to two a warp where that leaves two blocks an SM, else one a warp;
// shared memory for the token's cosines and sines and each warp's head
// (SMs: the target's, 0 an H200's).
func TestNormRoPEGroups(t *testing.T) {
	p := Ptr{BaseArena, 0}
	for _, c := range []struct{ T, nq, nk, rot, blocks, sms int }{
		{2048, 72, 0, 128, 2048 * 5, 0}, // 5 groups of up to 15 heads
		{2048, 8, 0, 128, 2048, 0},
		{2048, 48, 0, 64, 2048 * 3, 0},
		{1, 72, 0, 128, 9, 0}, // one head a warp
		{37, 48, 8, 64, 37 * 7, 0},
		{132, 72, 0, 128, 132 * 5, 0},   // 660 blocks: two heads a warp
		{132, 72, 0, 128, 132 * 9, 400}, // but one on a GPU of 400 SMs
	} {
		l, err := NormRoPE(NormRoPEArgs{DType: "bf16", X: p, Out: p, LD: (c.nq + c.nk) * 128, T: c.T, NQ: c.nq, NK: c.nk, D: 128,
			Pos: p, Table: RoPETable{InvFreq: p, RotaryDim: c.rot, AttnFactor: 1}, SMs: c.sms})
		if err != nil {
			t.Fatal(err)
		}
		if l.Grid[0] != c.blocks || l.Block[0] != 32*normRoPEWarps || l.Shmem != (c.rot+normRoPEWarps*128)*4 {
			t.Errorf("T %d, %d+%d heads: grid %d, block %d, %d bytes; want grid %d", c.T, c.nq, c.nk, l.Grid[0], l.Block[0], l.Shmem, c.blocks)
		}
	}
}
