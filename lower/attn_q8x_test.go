package lower

import "testing"

// TestFuseAttnQ8X: the quantisation right after a decode attention of its
// whole output is fused into it, and not when the quantised copy would
// overlap the attention's partials, head_dim is not a multiple of 32, the
// quantisation reads something else or another launch comes between.
func TestFuseAttnQ8X(t *testing.T) {
	attn := func(d int, ws Ptr) Launch {
		t.Helper()
		ls, err := AttentionDecode(AttentionDecodeArgs{DType: "bf16", Cache: Cache{K: Ptr{BaseKV, 0}, V: Ptr{BaseKV, 1 << 20}, NKV: 8,
			HeadDim: d, Window: 512, Slots: 512}, Out: Ptr{BaseArena, 0}, Q: Ptr{BaseArena, 1 << 20}, Pos: Ptr{BaseArena, 2 << 20},
			NH: 72, Scale: 0.1, Workspace: ws, Counters: Ptr{BaseSync, 0}})
		if err != nil {
			t.Fatal(err)
		}
		return ls[0]
	}
	quant := func(d int, x Ptr) Launch {
		t.Helper()
		q, err := Q8XQuantize("bf16", x, Ptr{BaseWorkspace, 0}, 1, 72*d)
		if err != nil {
			t.Fatal(err)
		}
		return q
	}
	reserve := Ptr{BaseWorkspace, attentionQ8XReserve(1, 72, 128)}
	other, _ := Q8XQuantize("bf16", Ptr{BaseArena, 4 << 20}, Ptr{BaseWorkspace, 1 << 24}, 1, 64)
	for _, c := range []struct {
		name  string
		steps [][]Launch
		fused bool
	}{
		{"adjacent", [][]Launch{{attn(128, reserve)}, {quant(128, Ptr{BaseArena, 0})}}, true},
		{"partials at the copy", [][]Launch{{attn(128, Ptr{BaseWorkspace, 0})}, {quant(128, Ptr{BaseArena, 0})}}, false},
		{"head_dim 48", [][]Launch{{attn(48, Ptr{BaseWorkspace, 1 << 20}), quant(48, Ptr{BaseArena, 0})}}, false},
		{"another source", [][]Launch{{attn(128, reserve), quant(128, Ptr{BaseArena, 64})}}, false},
		{"a launch between", [][]Launch{{attn(128, reserve), other, quant(128, Ptr{BaseArena, 0})}}, false},
	} {
		n := 0
		for _, s := range c.steps {
			n += len(s)
		}
		fuseAttnQ8X(c.steps)
		m := 0
		for _, s := range c.steps {
			m += len(s)
		}
		a := c.steps[0][0]
		got := m == n-1 && !a.Args[attnArgXQ].Ptr().Null()
		if got != c.fused || (!c.fused && m != n) {
			t.Errorf("%s: %d launches of %d left, attention %s; fused %v, want %v", c.name, m, n, a, got, c.fused)
		}
	}
}
