package cpu

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"lagc/prep"
)

// Each fused kernel against the composition of unfused kernels it replaces:
// the results must be bitwise equal (the fused graph's f32 logits then
// equal the unfused graph's), on one thread and on all.

func TestMatMulSplitEqualsMatMuls(t *testing.T) {
	for _, tc := range []struct {
		T, K  int
		sizes []int
	}{{1, 32, []int{16, 16, 16, 2}}, {7, 48, []int{96, 32, 32, 6}}, {33, 40, []int{5}}, {3, 129, []int{64, 1, 300}}} {
		t.Run(fmt.Sprint(tc.T, tc.K, tc.sizes), func(t *testing.T) {
			N := 0
			for _, s := range tc.sizes {
				N += s
			}
			x := randSlice(1, tc.T*tc.K, 1)
			w := randSlice(2, N*tc.K, 0.3)
			for _, threads := range []int{1, 0} {
				withThreads(threads, func() {
					outs := make([][]float32, len(tc.sizes))
					for i, s := range tc.sizes {
						outs[i] = make([]float32, tc.T*s)
					}
					if err := MatMulSplit(outs, x, w, tc.T, tc.K, tc.sizes); err != nil {
						t.Fatal(err)
					}
					off := 0
					for i, s := range tc.sizes {
						want := make([]float32, tc.T*s)
						if err := MatMul(want, x, w[off*tc.K:(off+s)*tc.K], tc.T, tc.K, s); err != nil {
							t.Fatal(err)
						}
						requireBitwise(t, fmt.Sprintf("block %d", i), outs[i], want)
						off += s
					}
				})
			}
		})
	}
}

func TestMatMulSwiGLUEqualsComposition(t *testing.T) {
	for _, tc := range []struct{ T, K, N int }{{1, 32, 16}, {5, 48, 96}, {40, 64, 300}, {3, 7, 1}} {
		t.Run(fmt.Sprint(tc), func(t *testing.T) {
			x := randSlice(3, tc.T*tc.K, 2)
			w := randSlice(4, 2*tc.N*tc.K, 0.5)
			g := make([]float32, tc.T*tc.N)
			u := make([]float32, tc.T*tc.N)
			want := make([]float32, tc.T*tc.N)
			if err := MatMul(g, x, w[:tc.N*tc.K], tc.T, tc.K, tc.N); err != nil {
				t.Fatal(err)
			}
			if err := MatMul(u, x, w[tc.N*tc.K:], tc.T, tc.K, tc.N); err != nil {
				t.Fatal(err)
			}
			if err := SiLU(g, g); err != nil {
				t.Fatal(err)
			}
			if err := Mul(want, g, u); err != nil {
				t.Fatal(err)
			}
			for _, threads := range []int{1, 0} {
				withThreads(threads, func() {
					y := make([]float32, tc.T*tc.N)
					if err := MatMulSwiGLU(y, x, w, tc.T, tc.K, tc.N); err != nil {
						t.Fatal(err)
					}
					requireBitwise(t, "swiglu", y, want)
				})
			}
		})
	}
}

func TestMatMulAddEqualsComposition(t *testing.T) {
	for _, tc := range []struct{ T, K, N int }{{1, 16, 32}, {9, 48, 48}, {64, 100, 33}} {
		t.Run(fmt.Sprint(tc), func(t *testing.T) {
			x := randSlice(5, tc.T*tc.K, 1)
			w := randSlice(6, tc.N*tc.K, 0.5)
			r := randSlice(7, tc.T*tc.N, 4)
			p := make([]float32, tc.T*tc.N)
			want := make([]float32, tc.T*tc.N)
			if err := MatMul(p, x, w, tc.T, tc.K, tc.N); err != nil {
				t.Fatal(err)
			}
			if err := Add(want, r, p); err != nil {
				t.Fatal(err)
			}
			y := make([]float32, tc.T*tc.N)
			if err := MatMulAdd(y, x, w, r, tc.T, tc.K, tc.N); err != nil {
				t.Fatal(err)
			}
			requireBitwise(t, "matmul_add", y, want)
			// In place: the epilogue accumulating into the residual buffer.
			rr := append([]float32(nil), r...)
			if err := MatMulAdd(rr, x, w, rr, tc.T, tc.K, tc.N); err != nil {
				t.Fatal(err)
			}
			requireBitwise(t, "matmul_add in place", rr, want)
		})
	}
}

func TestNormRoPEEqualsComposition(t *testing.T) {
	for _, tc := range []struct {
		T, n, d int
		p       prep.RopeParams
	}{
		{1, 48, 128, prep.RopeParams{RotaryDim: 64, Theta: 5e5, Type: "yarn", Factor: 32, OriginalContext: 8192}},
		{5, 8, 128, prep.RopeParams{RotaryDim: 128, Theta: 1e4}},
		{3, 3, 10, prep.RopeParams{RotaryDim: 6, Theta: 1e4}},
		{70, 2, 16, prep.RopeParams{RotaryDim: 8, Theta: 5e5}},
	} {
		t.Run(fmt.Sprint(tc.T, tc.n, tc.d, tc.p.Type), func(t *testing.T) {
			tab, err := prep.NewRopeTable(tc.p)
			if err != nil {
				t.Fatal(err)
			}
			x := randSlice(8, tc.T*tc.n*tc.d, 3)
			w := randSlice(9, tc.d, 1)
			pos := make([]int32, tc.T)
			for i := range pos {
				pos[i] = int32(7*i + 4000*(i%2))
			}
			const eps = 1e-6
			want := make([]float32, len(x))
			mustTB(t, RMSNorm(want, x, w, tc.T*tc.n, tc.d, eps))
			mustTB(t, RoPE(want, want, pos, tc.T, tc.n, tc.d, tab))
			for _, threads := range []int{1, 0} {
				withThreads(threads, func() {
					out := make([]float32, len(x))
					mustTB(t, NormRoPE(out, x, w, pos, tc.T, tc.n, tc.d, eps, tab))
					requireBitwise(t, "norm_rope", out, want)
					in := append([]float32(nil), x...)
					mustTB(t, NormRoPE(in, in, w, pos, tc.T, tc.n, tc.d, eps, tab))
					requireBitwise(t, "norm_rope in place", in, want)
				})
			}
		})
	}
}

// TestNormRoPEHandComputed: a head [3, 4, 0, 0, 5, 0] has rms sqrt(50/6);
// with w = [2, 1, 1, 1, 1, 1] and rotary width 4 at position 1, pair
// (0, 2) turns by 1 rad and pair (1, 3) by 0.01 rad; channels 4 and 5
// are only normalised.
func TestNormRoPEHandComputed(t *testing.T) {
	tab, err := prep.NewRopeTable(prep.RopeParams{RotaryDim: 4, Theta: 1e4})
	if err != nil {
		t.Fatal(err)
	}
	out := make([]float32, 6)
	mustTB(t, NormRoPE(out, []float32{3, 4, 0, 0, 5, 0}, []float32{2, 1, 1, 1, 1, 1}, []int32{1}, 1, 1, 6, 1e-12, tab))
	r := math.Sqrt(50.0 / 6)
	a, b := 2*3/r, 4/r
	want := []float64{a * math.Cos(1), b * math.Cos(0.01), a * math.Sin(1), b * math.Sin(0.01), 5 / r, 0}
	if d := maxAbsDiff(out, want); d > 1e-6 {
		t.Fatalf("got %v, want %v", out, want)
	}
}

// TestAttentionGateEqualsComposition: AttentionGate gives bitwise the
// outputs of BatchAttention then SoftplusGate and leaves the caches the
// same, over steps of a sequence (a prefill chunk, then decode rows) and a
// batched step of two sequences, per-head and per-element gates (gates
// past softplus's threshold of 20 included), full and sliding layers.
func TestAttentionGateEqualsComposition(t *testing.T) {
	for _, tc := range []struct {
		name           string
		nh, nkv, d     int
		window, perEl  int
		chunks         []int
		batchOfTwoRows bool
	}{
		{"full-gqa6-per-head", 12, 2, 8, 0, 0, []int{5, 1, 1}, false},
		{"sliding-gqa9-per-head", 9, 1, 16, 4, 0, []int{7, 1, 1, 1}, false},
		{"sliding-per-element", 4, 2, 6, 3, 1, []int{2, 1, 1, 1, 1}, false},
		{"full-per-element-batched", 6, 3, 4, 0, 1, []int{3}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			G := tc.nh
			if tc.perEl == 1 {
				G = tc.nh * tc.d
			}
			scale := float32(1 / math.Sqrt(float64(tc.d)))
			newCaches := func(n int) []*KVCache {
				cs := make([]*KVCache, n)
				for i := range cs {
					c, err := NewKVCache(tc.nkv, tc.d, tc.window, 64)
					mustTB(t, err)
					cs[i] = c
				}
				return cs
			}
			seqs := 1
			if tc.batchOfTwoRows {
				seqs = 2
			}
			fused, unfused := newCaches(seqs), newCaches(seqs)
			next := 0
			for step, T := range tc.chunks {
				rows := T * seqs
				q := randSlice(uint64(10*step+1), rows*tc.nh*tc.d, 2)
				k := randSlice(uint64(10*step+2), rows*tc.nkv*tc.d, 2)
				v := randSlice(uint64(10*step+3), rows*tc.nkv*tc.d, 1)
				g := randSlice(uint64(10*step+4), rows*G, 12) // some past 20 after the shift
				for i := range g {
					g[i] += 6
				}
				pos := make([]int32, rows)
				for i := range pos {
					pos[i] = int32(next + i%T)
				}
				run := func(cs []*KVCache) []AttnSeq {
					var as []AttnSeq
					for _, c := range cs {
						as = append(as, AttnSeq{Rows: T, Cache: c})
					}
					return as
				}
				want := make([]float32, rows*tc.nh*tc.d)
				mustTB(t, BatchAttention(want, q, k, v, pos, rows, tc.nh, tc.nkv, tc.d, tc.window, scale, run(unfused)))
				mustTB(t, SoftplusGate(want, want, g, rows, tc.nh, tc.d, G))
				got := make([]float32, len(want))
				mustTB(t, AttentionGate(got, q, k, v, g, pos, rows, tc.nh, tc.nkv, tc.d, G, tc.window, scale, run(fused)))
				requireBitwise(t, fmt.Sprintf("step %d", step), got, want)
				next += T
			}
			for i := range fused {
				if fused[i].Len() != unfused[i].Len() {
					t.Fatalf("cache %d holds %d positions, the composition's %d", i, fused[i].Len(), unfused[i].Len())
				}
			}
		})
	}
}

// moeCase is one MoE layer: routed stacks, a shared expert of the same
// width, router output and a residual.
type moeCase struct {
	T, H, E, I, k        int
	x, res, w            []float32
	ids                  []int32
	gate, up, down       []float32 // [E,I,H], [E,I,H], [E,H,I]
	sGate, sUp, sDown    []float32 // shared expert [I,H], [I,H], [H,I]
	gateUp, gateS, downS []float32 // fused and merged stacks
	gateUpS, upS         []float32
	skewed               bool
}

func newMoECase(t testing.TB, T, H, E, I, k int, skewed bool) *moeCase {
	c := &moeCase{T: T, H: H, E: E, I: I, k: k, skewed: skewed}
	c.x = randSlice(11, T*H, 1)
	c.res = randSlice(12, T*H, 3)
	c.gate, c.up = randSlice(13, E*I*H, 0.5), randSlice(14, E*I*H, 0.5)
	c.down = randSlice(15, E*H*I, 0.5)
	c.sGate, c.sUp, c.sDown = randSlice(16, I*H, 0.5), randSlice(17, I*H, 0.5), randSlice(18, H*I, 0.5)
	logits := randSlice(19, T*E, 3)
	if skewed { // most tokens prefer the last experts
		for tk := 0; tk < T; tk++ {
			for e := 0; e < E; e++ {
				logits[tk*E+e] += float32(e) * 2
			}
		}
	}
	c.w, c.ids = make([]float32, T*k), make([]int32, T*k)
	if err := RouterTopK(c.w, c.ids, logits, nil, T, E, k, 0, 1.5); err != nil {
		t.Fatal(err)
	}
	cat := func(a, b []float32, outer, n int) []float32 { // concat along axis 1 of [outer, n]
		out := make([]float32, len(a)+len(b))
		if err := Concat(out, [][]float32{a, b}, outer, []int{n, n}); err != nil {
			t.Fatal(err)
		}
		return out
	}
	c.gateUp = cat(c.gate, c.up, E, I*H)
	c.gateS = append(append([]float32(nil), c.gate...), c.sGate...)
	c.upS = append(append([]float32(nil), c.up...), c.sUp...)
	c.downS = append(append([]float32(nil), c.down...), c.sDown...)
	c.gateUpS = append(append([]float32(nil), c.gateUp...), cat(c.sGate, c.sUp, 1, I*H)...)
	return c
}

// unfused is the composition the Laguna graph computes without fusions.
func (c *moeCase) unfused(t testing.TB, shared, residual bool) []float32 {
	T, H, I := c.T, c.H, c.I
	out := make([]float32, T*H)
	if err := MoEExperts(out, c.x, c.w, c.ids, c.gate, c.up, c.down, T, H, c.E, I, c.k); err != nil {
		t.Fatal(err)
	}
	if shared {
		g, u, sd := make([]float32, T*I), make([]float32, T*I), make([]float32, T*H)
		mustTB(t, MatMul(g, c.x, c.sGate, T, H, I))
		mustTB(t, MatMul(u, c.x, c.sUp, T, H, I))
		mustTB(t, SiLU(g, g))
		mustTB(t, Mul(g, g, u))
		mustTB(t, MatMul(sd, g, c.sDown, T, I, H))
		mustTB(t, Add(out, out, sd))
	}
	if residual {
		mustTB(t, Add(out, c.res, out))
	}
	return out
}

func (c *moeCase) grouped(fused, shared, residual, descending bool) (*GroupedMoE, []float32) {
	H, I := c.H, c.I
	m := &GroupedMoE{T: c.T, H: H, I: I, K: c.k, E: c.E, Down: MatrixF32(c.down, c.E*H, I), Descending: descending}
	E1 := c.E + 1
	switch {
	case shared && fused:
		m.GateUp, m.Down, m.E, m.Shared = MatrixF32(c.gateUpS, E1*2*I, H), MatrixF32(c.downS, E1*H, I), E1, 1
	case shared:
		m.Gate, m.Up, m.Down, m.E, m.Shared = MatrixF32(c.gateS, E1*I, H), MatrixF32(c.upS, E1*I, H), MatrixF32(c.downS, E1*H, I), E1, 1
	case fused:
		m.GateUp = MatrixF32(c.gateUp, c.E*2*I, H)
	default:
		m.Gate, m.Up = MatrixF32(c.gate, c.E*I, H), MatrixF32(c.up, c.E*I, H)
	}
	if residual {
		m.Residual = c.res
	}
	return m, make([]float32, c.T*c.H)
}

func mustTB(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestMoEGroupedEqualsComposition(t *testing.T) {
	for _, sh := range []struct {
		T, H, E, I, k int
		skewed        bool
	}{{1, 32, 6, 16, 2, false}, {9, 32, 6, 16, 2, true}, {40, 48, 8, 24, 3, true}, {5, 13, 3, 7, 3, false}} {
		c := newMoECase(t, sh.T, sh.H, sh.E, sh.I, sh.k, sh.skewed)
		for _, fused := range []bool{false, true} {
			for _, shared := range []bool{false, true} {
				for _, residual := range []bool{false, true} {
					want := c.unfused(t, shared, residual)
					for _, desc := range []bool{false, true} {
						name := fmt.Sprintf("%+v/fused=%v,shared=%v,residual=%v,descending=%v", sh, fused, shared, residual, desc)
						t.Run(name, func(t *testing.T) {
							for _, threads := range []int{1, 0} {
								withThreads(threads, func() {
									m, out := c.grouped(fused, shared, residual, desc)
									mustTB(t, MoEGrouped(out, c.x, c.w, c.ids, m))
									requireBitwise(t, "moe_grouped", out, want)
								})
							}
							if residual { // accumulating in place into the residual buffer
								m, _ := c.grouped(fused, shared, residual, desc)
								m.Residual = append([]float32(nil), c.res...)
								mustTB(t, MoEGrouped(m.Residual, c.x, c.w, c.ids, m))
								requireBitwise(t, "moe_grouped in place", m.Residual, want)
							}
						})
					}
				}
			}
		}
	}
}

// TestExpertOrderSkewed is the expert-order A/B on skewed routing: visiting
// the most-loaded experts first changes nothing in the result.
func TestExpertOrderSkewed(t *testing.T) {
	c := newMoECase(t, 64, 32, 8, 16, 2, true)
	counts := make([]int, c.E)
	for _, e := range c.ids {
		counts[e]++
	}
	if counts[c.E-1] < 3*counts[0] {
		t.Fatalf("routing is not skewed: %v", counts)
	}
	a, outA := c.grouped(true, true, true, false)
	b, outB := c.grouped(true, true, true, true)
	mustTB(t, MoEGrouped(outA, c.x, c.w, c.ids, a))
	mustTB(t, MoEGrouped(outB, c.x, c.w, c.ids, b))
	requireBitwise(t, "descending vs index order", outB, outA)
}

func TestFusedKernelErrors(t *testing.T) {
	x, w := make([]float32, 8), make([]float32, 16)
	tab, err := prep.NewRopeTable(prep.RopeParams{RotaryDim: 4, Theta: 1e4})
	if err != nil {
		t.Fatal(err)
	}
	cache, err := NewKVCache(1, 4, 0, 8)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		err  error
		want string
	}{
		{"split sizes", MatMulSplit([][]float32{make([]float32, 2)}, x, w, 2, 4, []int{3}), "w is [4,4], want [3,4]"},
		{"split outputs", MatMulSplit(nil, x, w, 2, 4, []int{4}), "0 outputs for 1 sizes"},
		{"split zero", MatMulSplit([][]float32{nil}, x, w, 2, 4, []int{0}), "sizes[0] = 0"},
		{"swiglu odd", MatMulSwiGLU(make([]float32, 6), x, w, 2, 4, 3), "w has 16 elements, want 24"},
		{"add residual", MatMulAdd(make([]float32, 8), x, w, make([]float32, 7), 2, 4, 4), "r has 7 elements"},
		{"norm_rope table", NormRoPE(x, x, w[:4], []int32{0, 1}, 2, 1, 4, 1e-6, nil), "no rope table"},
		{"norm_rope weight", NormRoPE(x, x, w[:3], []int32{0, 1}, 2, 1, 4, 1e-6, tab), "w has 3 elements, want 4"},
		{"norm_rope pos", NormRoPE(x, x, w[:4], []int32{0}, 2, 1, 4, 1e-6, tab), "pos has 1 elements, want 2"},
		{"norm_rope negative pos", NormRoPE(x, x, w[:4], []int32{0, -1}, 2, 1, 4, 1e-6, tab), "position -1"},
		{"norm_rope rotary", NormRoPE(x, x, w[:2], []int32{0, 1, 2, 3}, 4, 1, 2, 1e-6, tab), "rotary width 4"},
		{"attention_gate width", AttentionGate(x, x, x[:4], x[:4], x[:3], []int32{0}, 1, 2, 1, 4, 3, 0, 1, []AttnSeq{{Rows: 1, Cache: cache}}), "gate width 3"},
		{"attention_gate gate length", AttentionGate(x, x, x[:4], x[:4], x[:1], []int32{0}, 1, 2, 1, 4, 2, 0, 1, []AttnSeq{{Rows: 1, Cache: cache}}), "g has 1 elements"},
		{"attention_gate cache", AttentionGate(x, x, x[:4], x[:4], x[:2], []int32{0}, 1, 2, 1, 4, 2, 0, 1, nil), "cpu.AttentionGate"},
	}
	for _, c := range cases {
		if c.err == nil || !strings.Contains(c.err.Error(), c.want) {
			t.Errorf("%s: got %v, want %q", c.name, c.err, c.want)
		}
	}
	if cache.Len() != 0 {
		t.Errorf("a refused attention_gate appended %d positions to the cache", cache.Len())
	}
	c := newMoECase(t, 2, 4, 3, 5, 2, false)
	m, out := c.grouped(false, false, false, false)
	bad := append([]int32(nil), c.ids...)
	bad[3] = 3
	if err := MoEGrouped(out, c.x, c.w, bad, m); err == nil || !strings.Contains(err.Error(), "expert id 3 (token 1)") {
		t.Errorf("id out of range: %v", err)
	}
	m, _ = c.grouped(false, true, false, false) // shared: id 3 is the shared expert, never routed
	if err := MoEGrouped(out, c.x, c.w, bad, m); err == nil || !strings.Contains(err.Error(), "outside [0, 3)") {
		t.Errorf("routed to the shared expert: %v", err)
	}
	m, _ = c.grouped(true, false, false, false)
	m.Gate = MatrixF32(c.gate, c.E*c.I, c.H)
	if err := MoEGrouped(out, c.x, c.w, c.ids, m); err == nil || !strings.Contains(err.Error(), "either GateUp or Gate and Up") {
		t.Errorf("both layouts: %v", err)
	}
	m, _ = c.grouped(false, false, false, false)
	m.Shared = m.E
	if err := MoEGrouped(out, c.x, c.w, c.ids, m); err == nil {
		t.Error("all experts shared accepted")
	}
}

// FuzzFusedKernelShapes: dimensions and slice lengths that need not agree
// give an error or a result, never a panic.
func FuzzFusedKernelShapes(f *testing.F) {
	f.Add(int16(2), int16(4), int16(3), int16(2), uint8(8), uint8(24), uint8(6), int8(0), int32(0))
	f.Add(int16(1), int16(8), int16(8), int16(1), uint8(8), uint8(64), uint8(8), int8(1), int32(7))
	f.Add(int16(-1), int16(0), int16(3), int16(2), uint8(0), uint8(3), uint8(255), int8(-1), int32(-5))
	f.Add(int16(32767), int16(32767), int16(2), int16(32767), uint8(1), uint8(1), uint8(1), int8(2), int32(math.MaxInt32))
	f.Fuzz(func(t *testing.T, a, b, c, d int16, la, lb, lc uint8, sh int8, p int32) {
		A, B, C, D := int(a), int(b), int(c), int(d)
		x := randSlice(1, int(la), 1)
		w := randSlice(2, int(lb), 1)
		y := randSlice(3, int(lc), 1)
		ids := make([]int32, int(lc))
		for i := range ids {
			ids[i] = p + int32(i)
		}
		_ = MatMulSplit([][]float32{y, x}, x, w, A, B, []int{C, D})
		_ = MatMulSwiGLU(y, x, w, A, B, C)
		_ = MatMulAdd(y, x, w, y, A, B, C)
		if tab, err := prep.NewRopeTable(prep.RopeParams{RotaryDim: 2 * (int(la) % 5), Theta: 1e4}); err == nil {
			pos := make([]int32, int(lb)%9)
			for i := range pos {
				pos[i] = p + int32(i)
			}
			_ = NormRoPE(y, x, w, pos, A, B, C, 1e-6, tab)
		}
		if cache, err := NewKVCache(max(D, 1), max(C, 1)%64, int(sh)&7, 64); err == nil {
			_ = AttentionGate(y, x, w, w, y, ids[:min(len(ids), max(A, 0))], A, B, D, C, int(lc)%7, int(sh)&7, 1, []AttnSeq{{Rows: A, Cache: cache}})
		}
		for _, fused := range []bool{false, true} {
			wm := MatrixF32(w, len(w)/max(B, 1), B)
			m := &GroupedMoE{T: A, H: B, I: C, K: D, E: C + 1, Shared: int(sh), Down: MatrixF32(w, len(w)/max(C, 1), C), Residual: x}
			if fused {
				m.GateUp = wm
			} else {
				m.Gate, m.Up = wm, wm
			}
			_ = MoEGrouped(y, x, y, ids, m)
		}
	})
}

// BenchmarkMoEGroupedOrder is the expert-order A/B on the CPU: 128 tokens
// routed top-4 of 16 experts, skewed towards the last ones (hidden 1024,
// expert width 256, shared expert merged, residual folded), scheduled by
// index and by descending load.
func BenchmarkMoEGroupedOrder(b *testing.B) {
	c := newMoECase(b, 128, 1024, 16, 256, 4, true)
	for _, desc := range []bool{false, true} {
		name := "index"
		if desc {
			name = "descending"
		}
		b.Run(name, func(b *testing.B) {
			m, out := c.grouped(true, true, true, desc)
			for b.Loop() {
				if err := MoEGrouped(out, c.x, c.w, c.ids, m); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
