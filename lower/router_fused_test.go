package lower

import (
	"reflect"
	"testing"

	"lagc/ir"
)

// routerPair is the router GEMV of T rows (x [T, K] bf16 at arena+0, logits
// f32 [T, E] at arena+1<<20) and the block top-k of them (routes at
// arena+2<<20 and +3<<20).
func routerPair(t *testing.T, T, E, K, k int) (Launch, Launch) {
	t.Helper()
	logits := Ptr{BaseArena, 1 << 20}
	g, err := MatMul(MatMulArgs{T: T, K: K, N: E, X: Ptr{BaseArena, 0}, W: Ptr{BaseWeights, 0}, Y: logits,
		XType: "bf16", WType: "bf16", YType: "f32", SMs: 132})
	if err != nil {
		t.Fatal(err)
	}
	r, err := RouterTopKBlock("f32", Ptr{BaseArena, 2 << 20}, Ptr{BaseArena, 3 << 20}, logits, Ptr{BaseWeights, 1 << 30}, T, E, k, 0, 2.5)
	if err != nil {
		t.Fatal(err)
	}
	return g, r
}

// TestRouterFused: the fused launch keeps the GEMV's instantiation, grid
// and split and the top-k's arguments, and refuses what it cannot be.
func TestRouterFused(t *testing.T) {
	for _, c := range []struct{ T, E, K, k int }{{1, 256, 3072, 10}, {1, 256, 2048, 8}, {8, 64, 128, 8}, {3, 37, 72, 5}, {1, 1024, 256, 32}} {
		g, r := routerPair(t, c.T, c.E, c.K, c.k)
		f, err := RouterFused(g, r, Ptr{BaseSync, 0})
		if err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		want := kernel("router.cu", "router_fused", []string{"bf16", "bf16"}, []int64{int64(c.T), g.Ints[2]}, g.Grid, g.Block, 12*c.E+4*c.k,
			append(append(append([]Arg(nil), g.Args[:6]...), r.Args[2], r.Args[3], r.Args[4], r.Args[7], r.Args[8], r.Args[9]), ptrArg(Ptr{BaseSync, 0}))...)
		if !reflect.DeepEqual(f, want) {
			t.Errorf("%+v:\n got %s\nwant %s", c, f, want)
		}
	}
	g, r := routerPair(t, 1, 256, 3072, 10)
	if g.Args[2].Int != 8 || g.Grid[0] != 256 { // S-2.1's router: a row a block, split 8
		t.Fatalf("S-2.1's router GEMV: %s", g)
	}
	mod := func(l Launch, f func(*Launch)) Launch {
		l.Args = append([]Arg(nil), l.Args...)
		l.DTypes = append([]string(nil), l.DTypes...)
		l.Ints = append([]int64(nil), l.Ints...)
		f(&l)
		return l
	}
	g2, r2 := routerPair(t, 2, 256, 3072, 10)
	_, r1024 := routerPair(t, 1, 1025, 64, 10)
	g1024, _ := routerPair(t, 1, 1025, 64, 10)
	warp, err := RouterTopK("f32", r.Args[8].Ptr(), r.Args[9].Ptr(), r.Args[5].Ptr(), r.Args[7].Ptr(), 100, 256, 10, 0, 2.5)
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		g, r    Launch
		counter Ptr
	}{
		"accumulating":         {mod(g, func(l *Launch) { l.Args[6] = i32(1) }), r, Ptr{BaseSync, 0}},
		"bf16 logits":          {mod(g, func(l *Launch) { l.DTypes[2] = "bf16" }), r, Ptr{BaseSync, 0}},
		"SwiGLU":               {mod(g, func(l *Launch) { l.Ints[1] = 1 }), r, Ptr{BaseSync, 0}},
		"another grid":         {mod(g, func(l *Launch) { l.Grid[0] = 128 }), r, Ptr{BaseSync, 0}},
		"other logits":         {g, mod(r, func(l *Launch) { l.Args[5] = ptrArg(Ptr{BaseArena, 4 << 20}) }), Ptr{BaseSync, 0}},
		"fewer rows":           {g2, mod(r2, func(l *Launch) { l.Args[0], l.Grid[0] = i32(1), 1 }), Ptr{BaseSync, 0}},
		"the warp kernel":      {g, warp, Ptr{BaseSync, 0}},
		"too many experts":     {g1024, r1024, Ptr{BaseSync, 0}},
		"no counter":           {g, r, Ptr{}},
		"routes over logits":   {g, mod(r, func(l *Launch) { l.Args[9] = ptrArg(Ptr{BaseArena, 1<<20 + 1000}) }), Ptr{BaseSync, 0}},
		"the launches swapped": {r, g, Ptr{BaseSync, 0}},
	} {
		if f, err := RouterFused(c.g, c.r, c.counter); err == nil {
			t.Errorf("%s: fused: %s", name, f)
		}
	}
}

// TestFuseRouter: a router GEMV right before its top-k (across steps) is
// fused at up to RouterFusedMaxT tokens, leaving the top-k's step empty;
// anything between, or more tokens, leaves them.
func TestFuseRouter(t *testing.T) {
	g, r := routerPair(t, 1, 256, 3072, 10)
	f, err := RouterFused(g, r, Ptr{BaseSync, 0})
	if err != nil {
		t.Fatal(err)
	}
	g2, r2 := routerPair(t, 2, 256, 3072, 10)
	other := memcpy(Ptr{BaseArena, 8 << 20}, Ptr{BaseArena, 9 << 20}, 64)
	for _, c := range []struct {
		name       string
		steps      [][]Launch
		want       [][]Launch
		unchangedT bool
	}{
		{name: "across steps", steps: [][]Launch{{other, g}, {r}, {other}}, want: [][]Launch{{other, f}, {}, {other}}},
		{name: "in one step", steps: [][]Launch{{g, r}}, want: [][]Launch{{f}}},
		{name: "an empty step between", steps: [][]Launch{{g}, {}, {r}}, want: [][]Launch{{f}, {}, {}}},
		{name: "a launch between", steps: [][]Launch{{g}, {other, r}}, unchangedT: true},
		{name: "two tokens", steps: [][]Launch{{g2}, {r2}}, unchangedT: RouterFusedMaxT < 2},
		{name: "the top-k alone", steps: [][]Launch{{r}}, unchangedT: true},
	} {
		got := make([][]Launch, len(c.steps))
		copy(got, c.steps)
		fuseRouter(got)
		want := c.want
		if c.unchangedT {
			want = c.steps
		}
		if !reflect.DeepEqual(got, want) && !(len(want) > 0 && emptyEqual(got, want)) {
			t.Errorf("%s: got\n%s\nwant\n%s", c.name, streamString(got), streamString(want))
		}
	}
}

// emptyEqual compares streams with nil and empty steps alike.
func emptyEqual(a, b [][]Launch) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if len(a[i]) != len(b[i]) || len(a[i]) > 0 && !reflect.DeepEqual(a[i], b[i]) {
			return false
		}
	}
	return true
}

// TestRouterFusedPlan: in the tiny model's plan every MoE layer's decode
// router is one router_fused launch counting at sync+0, which the plan's
// sync region holds, and so is a prefill or batched decode step of one
// token; a prefill chunk keeps its two launches.
func TestRouterFusedPlan(t *testing.T) {
	p, err := Lower(tinyGraph(t), Options{DType: ir.BF16, Chunk: 64, MaxContext: 100, Seqs: 4})
	if err != nil {
		t.Fatal(err)
	}
	count := func(ls [][]Launch) map[string]int {
		n := map[string]int{}
		for _, s := range ls {
			for _, l := range s {
				n[l.Kernel]++
				if l.Kernel == "router_fused" && l.Args[12].Ptr() != (Ptr{BaseSync, 0}) {
					t.Errorf("counter at %s", l.Args[12].Ptr())
				}
			}
		}
		return n
	}
	routers := 0
	for _, st := range p.Decode.Steps {
		if st.Op == "router_topk" {
			routers++
		}
	}
	if routers == 0 {
		t.Fatal("no router in the tiny model")
	}
	batch1, err := p.AtBatch(1)
	if err != nil {
		t.Fatal(err)
	}
	prefill1, err := p.At(p.Prefill, 1)
	if err != nil {
		t.Fatal(err)
	}
	prefill2, err := p.At(p.Prefill, 2)
	if err != nil {
		t.Fatal(err)
	}
	decode := make([][]Launch, len(p.Decode.Steps))
	for i, st := range p.Decode.Steps {
		decode[i] = st.Launches
	}
	for what, c := range map[string]struct {
		ls          [][]Launch
		fused, sync bool
	}{
		"decode":            {decode, true, p.Decode.Sync >= RouterFusedCounters},
		"batched decode, 1": {batch1, true, p.Prefill.Sync >= RouterFusedCounters},
		"prefill, 1":        {prefill1, true, p.Prefill.Sync >= RouterFusedCounters},
		"prefill, 2":        {prefill2, false, true},
		"prefill, 64":       {nil, false, true},
	} {
		if what == "prefill, 64" {
			c.ls = make([][]Launch, len(p.Prefill.Steps))
			for i, st := range p.Prefill.Steps {
				c.ls[i] = st.Launches
			}
		}
		n := count(c.ls)
		want := map[bool]int{true: routers}
		// fuseTopKShared's forms count as their routers'.
		fused, unfused := n["router_fused"]+n["router_fused_shared"], n["router_topk_block"]+n["router_topk"]+n["router_topk_shared"]
		if fused != want[c.fused] || unfused != want[!c.fused] {
			t.Errorf("%s: %d fused routers, %d unfused, of %d", what, fused, unfused, routers)
		}
		if !c.sync {
			t.Errorf("%s: the sync region (%d, %d bytes) holds no router counter", what, p.Decode.Sync, p.Prefill.Sync)
		}
	}
}

// TestRouterCounters: the router step reserves its counter exactly where
// fuseRouter may fuse it, and a plan whose only counters are the routers'
// has a sync region.
func TestRouterCounters(t *testing.T) {
	p, err := Lower(tinyGraph(t), Options{DType: ir.BF16, Chunk: 64, MaxContext: 16})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []*Schedule{p.Decode, p.Prefill} {
		for i := range s.Steps {
			st := &s.Steps[i]
			if st.Op != "router_topk" {
				continue
			}
			for _, T := range []int{1, 2, s.Tokens} {
				if T > s.Tokens {
					continue
				}
				c, err := p.newCtx(s, st, T)
				if err != nil {
					t.Fatal(err)
				}
				n, err := rules[st.Op].counters(c)
				if want := int64(RouterFusedCounters) * int64(b2i(T <= RouterFusedMaxT)); err != nil || n != want {
					t.Errorf("%s %s at T=%d: %d bytes of counters (%v), want %d", s.Class, st.Name, T, n, err, want)
				}
			}
		}
		if s.Sync < RouterFusedCounters {
			t.Errorf("%s: %d bytes of sync", s.Class, s.Sync)
		}
	}
}
