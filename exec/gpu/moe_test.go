package gpu

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"testing"

	"lagc/cuda"
	"lagc/exec/cpu"
	"lagc/lower"
)

// moeIDs draws [T,k] expert ids by distribution:
//
//	distinct: k distinct experts per token, uniform (real routing)
//	skewed:   k distinct experts per token, most tokens on a few experts
//	same:     every slot of a token on one expert, few experts in all
//	invalid:  distinct, with some ids outside [0, E)
func moeIDs(r *rand.Rand, dist string, T, E, k int) []int32 {
	ids := make([]int32, T*k)
	for t := 0; t < T; t++ {
		row := ids[t*k : (t+1)*k]
		switch dist {
		case "same":
			e := int32(r.IntN(min(E, 3)))
			for j := range row {
				row[j] = e
			}
			continue
		case "skewed":
			// Zipf-like weights 1/(e+1)^2, drawn without replacement.
			seen := map[int32]bool{}
			for j := range row {
				for {
					e := int32(float64(E) * r.Float64() * r.Float64() * r.Float64())
					if !seen[e] {
						seen[e] = true
						row[j] = e
						break
					}
				}
			}
			continue
		}
		perm := r.Perm(E)
		for j := range row {
			row[j] = int32(perm[j%E])
		}
	}
	if dist == "invalid" {
		for i := 0; i < len(ids); i += 5 {
			ids[i] = int32(E + i)
		}
		if len(ids) > 1 {
			ids[1] = -1
		}
	}
	return ids
}

// moeCase is one MoE problem.
type moeCase struct {
	T, H, I, E, k int
	dist          string
	acc           bool
}

// moeData is a problem's host inputs (rounded to their dtypes).
type moeData struct {
	x, w, gate, up, down, out0 []float32
	ids                        []int32
}

func moeGen(r *rand.Rand, c moeCase, xt, wt, ot cuda.DType) moeData {
	d := moeData{
		x:    roundTo(xt, randF32(r, c.T*c.H, 1)),
		w:    randF32(r, c.T*c.k, 1),
		gate: roundTo(wt, randF32(r, c.E*c.I*c.H, 0.5)),
		up:   roundTo(wt, randF32(r, c.E*c.I*c.H, 0.5)),
		down: roundTo(wt, randF32(r, c.E*c.H*c.I, 0.5)),
		ids:  moeIDs(r, c.dist, c.T, c.E, c.k),
	}
	for i := range d.w {
		d.w[i] = (d.w[i] + 1.5) / 3 // positive, as routing weights are
	}
	if c.acc {
		d.out0 = roundTo(ot, randF32(r, c.T*c.H, 2))
	}
	return d
}

// moeRef is the CPU reference; invalid ids contribute nothing.
func moeRef(t *testing.T, c moeCase, d moeData) []float32 {
	t.Helper()
	ids := append([]int32(nil), d.ids...)
	w := append([]float32(nil), d.w...)
	for i, e := range ids {
		if e < 0 || int(e) >= c.E {
			ids[i], w[i] = 0, 0
		}
	}
	want := make([]float32, c.T*c.H)
	if err := cpu.MoEExperts(want, d.x, w, ids, d.gate, d.up, d.down, c.T, c.H, c.E, c.I, c.k); err != nil {
		t.Fatal(err)
	}
	for i := range d.out0 {
		want[i] += d.out0[i]
	}
	return want
}

// moeUpload puts d on the device and returns the args (with a workspace).
func moeUpload(t *testing.T, k *Kernels, s *cuda.Stream, c moeCase, d moeData, xt, wt, ot cuda.DType, path MoEPath, order ExpertOrder, tile MMATile) MoEArgs {
	t.Helper()
	a := MoEArgs{T: c.T, H: c.H, I: c.I, E: c.E, TopK: c.k, XType: xt, WType: wt, OutType: ot,
		Accumulate: c.acc, Path: path, Order: order, Tile: tile}
	a.X = upload(t, k, s, xt, d.x)
	a.Weights = upload(t, k, s, cuda.F32, d.w)
	a.IDs = uploadI32(t, k, s, d.ids)
	a.Gate = upload(t, k, s, wt, d.gate)
	a.Up = upload(t, k, s, wt, d.up)
	a.Down = upload(t, k, s, wt, d.down)
	if c.acc {
		a.Out = upload(t, k, s, ot, d.out0)
	} else {
		n := int64(c.T * c.H * ot.Size())
		a.Out = alloc(t, k, n)
		poison(t, s, a.Out, n)
	}
	moeWorkspace(t, k, s, &a)
	return a
}

// moeWorkspace gives a the workspace it needs, poisoned: nothing may rely
// on a clean workspace.
func moeWorkspace(t *testing.T, k *Kernels, s *cuda.Stream, a *MoEArgs) {
	t.Helper()
	ws, err := MoEWorkspaceBytes(*a)
	if err != nil {
		t.Fatal(err)
	}
	a.Workspace = alloc(t, k, ws)
	poison(t, s, a.Workspace, ws)
}

// benchRoutes are T tokens' routes to k distinct experts of E, each
// weighted 0.1: the routing of the MoE benchmarks.
func benchRoutes(r *rand.Rand, T, E, k int) ([]int32, []float32) {
	ids, wts := make([]int32, T*k), make([]float32, T*k)
	for t := 0; t < T; t++ {
		for j, e := range r.Perm(E)[:k] {
			ids[t*k+j], wts[t*k+j] = int32(e), 0.1
		}
	}
	return ids, wts
}

var moeCases = []moeCase{
	{T: 1, H: 72, I: 48, E: 8, k: 3, dist: "distinct"},
	{T: 3, H: 72, I: 48, E: 8, k: 3, dist: "same"},
	{T: 9, H: 72, I: 48, E: 8, k: 3, dist: "distinct", acc: true},
	{T: 64, H: 72, I: 48, E: 8, k: 3, dist: "skewed"},
	{T: 129, H: 64, I: 40, E: 8, k: 3, dist: "same"},
	{T: 1, H: 64, I: 40, E: 256, k: 10, dist: "distinct"},
	{T: 7, H: 64, I: 40, E: 256, k: 10, dist: "skewed", acc: true},
	{T: 64, H: 136, I: 72, E: 256, k: 10, dist: "distinct"},
	{T: 129, H: 64, I: 40, E: 256, k: 10, dist: "skewed"},
	{T: 129, H: 64, I: 200, E: 256, k: 10, dist: "invalid", acc: true},
	{T: 400, H: 264, I: 136, E: 8, k: 3, dist: "skewed"}, // 128-row tiles (R >= 128 E)
}

func TestMoEExperts(t *testing.T) {
	k, s := mmGPU(t)
	type variant struct {
		name       string
		xt, wt, ot cuda.DType
		path       MoEPath
		order      ExpertOrder
		tile       MMATile
		band       int
	}
	variants := []variant{
		{"f32/decode", cuda.F32, cuda.F32, cuda.F32, MoEDecode, ExpertsByID, MMATile{}, 0},
		{"bf16/decode", cuda.BF16, cuda.BF16, cuda.BF16, MoEDecode, ExpertsByID, MMATile{}, 0},
		{"bf16/grouped-by-id-k32", cuda.BF16, cuda.BF16, cuda.BF16, MoEGrouped, ExpertsByID, MMATile{K: 32}, 0},
		{"bf16/grouped-by-load-k64", cuda.BF16, cuda.BF16, cuda.F32, MoEGrouped, ExpertsByLoad, MMATile{K: 64}, 0},
		{"bf16/grouped-128rows-k32", cuda.BF16, cuda.BF16, cuda.BF16, MoEGrouped, ExpertsByLoad, MMATile{Rows: 128, K: 32}, 0},
		{"bf16/grouped-128rows-k64", cuda.BF16, cuda.BF16, cuda.BF16, MoEGrouped, ExpertsByID, MMATile{Rows: 128, K: 64}, 0},
		{"f32x-bf16w/auto", cuda.F32, cuda.BF16, cuda.F32, MoEAuto, ExpertsByID, MMATile{}, 0},
		{"bf16/grouped-by-load-band128", cuda.BF16, cuda.BF16, cuda.BF16, MoEGrouped, ExpertsByLoad, MMATile{}, 128},
		{"bf16/grouped-by-load-band-all", cuda.BF16, cuda.BF16, cuda.BF16, MoEGrouped, ExpertsByLoad, MMATile{K: 32}, 1 << 20},
	}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(11, 12))
			for _, c := range moeCases {
				d := moeGen(r, c, v.xt, v.wt, v.ot)
				a := moeUpload(t, k, s, c, d, v.xt, v.wt, v.ot, v.path, v.order, v.tile)
				a.Band = v.band
				if err := k.MoEExperts(s, a); err != nil {
					t.Fatal(err)
				}
				got := download(t, s, v.ot, a.Out, c.T*c.H)
				// The grouped path keeps its intermediates in bf16.
				tol := tolFor(v.ot)
				if v.path == MoEGrouped {
					tol = tolFor(cuda.BF16)
				}
				checkClose(t, fmt.Sprintf("%+v", c), got, moeRef(t, c, d), tol)
			}
		})
	}
	// Shapes the grouped path refuses still run (auto takes the decode path).
	r := rand.New(rand.NewPCG(13, 14))
	c := moeCase{T: 33, H: 36, I: 20, E: 8, k: 3, dist: "distinct"}
	d := moeGen(r, c, cuda.BF16, cuda.BF16, cuda.BF16)
	a := moeUpload(t, k, s, c, d, cuda.BF16, cuda.BF16, cuda.BF16, MoEAuto, ExpertsByID, MMATile{})
	if err := k.MoEExperts(s, a); err != nil {
		t.Fatal(err)
	}
	checkClose(t, "H=36 I=20 auto", download(t, s, cuda.BF16, a.Out, c.T*c.H), moeRef(t, c, d), tolFor(cuda.BF16))
	a.Path = MoEGrouped
	if err := k.MoEExperts(s, a); err == nil {
		t.Error("grouped path accepted H=36")
	}
}

// TestMoESchedule checks the grouping against the host: counts, the order
// for both modes, offsets, tiles, and stable route order within experts.
func TestMoESchedule(t *testing.T) {
	k, s := mmGPU(t)
	r := rand.New(rand.NewPCG(21, 22))
	c := moeCase{T: 1000, H: 64, I: 40, E: 256, k: 10, dist: "skewed"}
	d := moeGen(r, c, cuda.BF16, cuda.BF16, cuda.BF16)
	for _, order := range []ExpertOrder{ExpertsByID, ExpertsByLoad} {
		a := moeUpload(t, k, s, c, d, cuda.BF16, cuda.BF16, cuda.BF16, MoEGrouped, order, MMATile{})
		if err := k.MoEExperts(s, a); err != nil {
			t.Fatal(err)
		}
		sc, err := k.ReadMoESchedule(s, a)
		if err != nil {
			t.Fatal(err)
		}
		want := moeGroupingRef(d.ids, c.E, len(d.ids), sc.TileRows, order) // one chunk: base is not read here
		for i, e := range want.order {
			if sc.Order[i] != e {
				t.Fatalf("order %d: position %d is expert %d, want %d", order, i, sc.Order[i], e)
			}
			if sc.Counts[e] != want.counts[e] || sc.Offsets[e] != want.offsets[e] {
				t.Fatalf("order %d: expert %d count %d offset %d, want %d %d", order, e, sc.Counts[e], sc.Offsets[e], want.counts[e], want.offsets[e])
			}
			// Routes of e, in route order.
			for i := int32(0); i < want.counts[e]; i++ {
				p := want.offsets[e] + i
				if got := sc.Sorted[p]; got != want.sorted[p] {
					t.Fatalf("order %d: expert %d row %d holds route %d, want %d", order, e, i, got, want.sorted[p])
				}
			}
		}
		if sc.Tiles != len(want.tiles)/4 {
			t.Errorf("order %d: %d tiles, want %d", order, sc.Tiles, len(want.tiles)/4)
		}
	}
}

// routeIDs draws R expert ids of E by distribution:
//
//	uniform: any expert
//	skewed:  most routes on a few experts, many experts empty
//	ties:    route r on r%E: counts equal or one apart (ties for ExpertsByLoad)
//	few:     one to three experts, each many tiles
//	invalid: uniform, with ids outside [0, E) mixed in
func routeIDs(r *rand.Rand, dist string, R, E int) []int32 {
	ids := make([]int32, R)
	for i := range ids {
		switch dist {
		case "uniform":
			ids[i] = int32(r.IntN(E))
		case "skewed":
			ids[i] = int32(float64(E) * r.Float64() * r.Float64() * r.Float64())
		case "ties":
			ids[i] = int32(i % E)
		case "few":
			ids[i] = int32(r.IntN(3) % E)
		case "invalid":
			bad := []int32{-1, int32(E), int32(E + 7), math.MinInt32, math.MaxInt32}
			if j := r.IntN(10); j < len(bad) {
				ids[i] = bad[j]
			} else {
				ids[i] = int32(r.IntN(E))
			}
		default:
			panic(dist)
		}
	}
	return ids
}

// moeGrouping is what the routing launches write: counts, order and
// offsets [E], base [chunks*E], tiles (4 ints a tile, ntiles of them),
// sorted (the valid routes' grouped rows) and pos [R].
type moeGrouping struct {
	counts, order, offsets, base, tiles, sorted, pos []int32
}

// moeGroupingRef groups ids on the host: chunks of ch routes, tiles of bm
// rows, experts in order.
func moeGroupingRef(ids []int32, E, ch, bm int, order ExpertOrder) moeGrouping {
	R := len(ids)
	nch := ceilDiv(R, ch)
	g := moeGrouping{counts: make([]int32, E), order: make([]int32, E), offsets: make([]int32, E),
		base: make([]int32, nch*E), pos: make([]int32, R)}
	hist := make([]int32, nch*E)
	for r, e := range ids {
		if e >= 0 && int(e) < E {
			g.counts[e]++
			hist[r/ch*E+int(e)]++
		}
	}
	for i := range g.order {
		g.order[i] = int32(i)
	}
	if order == ExpertsByLoad {
		sort.SliceStable(g.order, func(i, j int) bool { return g.counts[g.order[i]] > g.counts[g.order[j]] })
	}
	off := int32(0)
	for _, e := range g.order {
		g.offsets[e] = off
		for m := int32(0); m*int32(bm) < g.counts[e]; m++ {
			g.tiles = append(g.tiles, e, off+m*int32(bm), min(int32(bm), g.counts[e]-m*int32(bm)), 0)
		}
		off += g.counts[e]
	}
	for e := 0; e < E; e++ {
		run := g.offsets[e]
		for b := 0; b < nch; b++ {
			g.base[b*E+e] = run
			run += hist[b*E+e]
		}
	}
	g.sorted = make([]int32, off)
	cur := append([]int32(nil), g.offsets...)
	for r, e := range ids {
		g.pos[r] = -1
		if e >= 0 && int(e) < E {
			g.pos[r] = cur[e]
			g.sorted[cur[e]] = int32(r)
			cur[e]++
		}
	}
	return g
}

// TestMoERouting runs moe_hist, moe_schedule and moe_scatter alone, on the
// Laguna shapes and on ones MoEExperts does not reach (one expert, 1024, a
// chunk of one route, more chunks than moe_schedule keeps in registers),
// both orders, and compares everything they write with the host's grouping.
func TestMoERouting(t *testing.T) {
	k, s := mmGPU(t)
	r := rand.New(rand.NewPCG(41, 42))
	for _, c := range []struct {
		R, E, ch, bm int
		dist         string
	}{
		{1, 1, 256, 64, "uniform"},
		{300, 1, 256, 96, "invalid"},
		{50, 7, 256, 64, "uniform"},
		{5000, 7, 256, 128, "skewed"},
		{5000, 7, 64, 96, "ties"},
		{2000, 256, 256, 96, "uniform"},
		{20480, 256, 256, 96, "uniform"}, // Laguna-S-2.1 q4_k_m at 2048 tokens: 80 chunks
		{20480, 256, 256, 96, "skewed"},
		{20480, 256, 256, 112, "uniform"}, // q4_k_m's default tile rows past 48 routes an expert
		{20480, 256, 256, 112, "skewed"},
		{22528, 257, 256, 112, "ties"},
		{22528, 257, 256, 128, "skewed"}, // bf16, the shared expert routed: 88 chunks
		{22528, 257, 256, 128, "ties"},
		{9000, 256, 32, 64, "skewed"}, // 282 chunks: past moe_schedule's registers
		{4000, 257, 1000, 96, "invalid"},
		{3000, 1024, 256, 128, "uniform"},
		{20480, 1024, 256, 64, "skewed"},
		{5000, 1024, 100, 96, "few"},
		{700, 33, 300, 64, "few"},
		{129, 256, 256, 64, "invalid"},
		{10, 1024, 1, 64, "uniform"},
		{4096, 31, 16, 96, "ties"},
		{700, 33, 300, 112, "few"},
	} {
		ids := routeIDs(r, c.dist, c.R, c.E)
		for _, order := range []ExpertOrder{ExpertsByID, ExpertsByLoad} {
			name := fmt.Sprintf("R%d_E%d_ch%d_bm%d_%s_order%d", c.R, c.E, c.ch, c.bm, c.dist, order)
			t.Run(name, func(t *testing.T) {
				want := moeGroupingRef(ids, c.E, c.ch, c.bm, order)
				got := moeGroupingRun(t, k, s, ids, c.E, c.ch, c.bm, order)
				for _, f := range []struct {
					what      string
					got, want []int32
				}{
					{"counts", got.counts, want.counts}, {"order", got.order, want.order},
					{"offsets", got.offsets, want.offsets}, {"base", got.base, want.base},
					{"tiles", got.tiles, want.tiles}, {"sorted", got.sorted, want.sorted}, {"pos", got.pos, want.pos},
				} {
					if len(f.got) != len(f.want) {
						t.Errorf("%s: %d values, want %d", f.what, len(f.got), len(f.want))
						continue
					}
					for i := range f.got {
						if f.got[i] != f.want[i] {
							t.Errorf("%s[%d] = %d, want %d", f.what, i, f.got[i], f.want[i])
							break
						}
					}
				}
			})
		}
	}
}

// moeGroupingRun runs the routing launches on ids (chunks of ch routes,
// tiles of bm rows) in a poisoned workspace and reads back what they wrote.
func moeGroupingRun(t *testing.T, k *Kernels, s *cuda.Stream, ids []int32, E, ch, bm int, order ExpertOrder) moeGrouping {
	t.Helper()
	R := len(ids)
	nch := ceilDiv(R, ch)
	l := lower.MoELayout{Grouped: true, Rows: bm, Chunk: ch, Chunks: nch, MaxTiles: ceilDiv(R, bm) + min(E, R)}
	var off int64
	take := func(n int) int64 {
		o := off
		off += (4*int64(n) + 255) &^ 255
		return o
	}
	l.Hist, l.Base = take(nch*E), take(nch*E)
	l.Counts, l.Order, l.Offsets, l.NTiles = take(E), take(E), take(E), take(1)
	l.Tiles, l.Sorted, l.Pos = take(4*l.MaxTiles), take(R), take(R)
	ws := alloc(t, k, off)
	// Not 0xFF: an unwritten pos would read as -1, an invalid route's.
	if err := s.Memset8(ws, 0x5a, off); err != nil {
		t.Fatal(err)
	}
	a := lower.MoEArgs{T: R, TopK: 1, E: E, Order: order, IDs: ptr(uploadI32(t, k, s, ids)), Workspace: ptr(ws)}
	if err := k.on(s).all(lower.MoERouting(a, l), nil); err != nil {
		t.Fatal(err)
	}
	read := func(o int64, n int) []int32 { return downloadI32(t, s, ws.Add(o), n) }
	g := moeGrouping{counts: read(l.Counts, E), order: read(l.Order, E), offsets: read(l.Offsets, E),
		base: read(l.Base, nch*E), pos: read(l.Pos, R)}
	nt := int(read(l.NTiles, 1)[0])
	if nt < 0 || nt > l.MaxTiles {
		t.Fatalf("ntiles %d (at most %d)", nt, l.MaxTiles)
	}
	g.tiles = read(l.Tiles, 4*nt)
	rows := 0
	for _, p := range g.pos {
		if p >= 0 {
			rows++
		}
	}
	g.sorted = read(l.Sorted, rows)
	return g
}

// TestMoEDeterministic: two runs give the same bits, on both paths; the
// grouped path gives the same bits with and without N-banding.
func TestMoEDeterministic(t *testing.T) {
	k, s := mmGPU(t)
	r := rand.New(rand.NewPCG(31, 32))
	c := moeCase{T: 200, H: 128, I: 64, E: 256, k: 10, dist: "skewed"}
	d := moeGen(r, c, cuda.BF16, cuda.BF16, cuda.BF16)
	for _, path := range []MoEPath{MoEDecode, MoEGrouped} {
		a := moeUpload(t, k, s, c, d, cuda.BF16, cuda.BF16, cuda.BF16, path, ExpertsByLoad, MMATile{})
		n := c.T * c.H * 2
		var outs [2][]byte
		for i := range outs {
			poison(t, s, a.Out, int64(n))
			if err := k.MoEExperts(s, a); err != nil {
				t.Fatal(err)
			}
			outs[i] = make([]byte, n)
			if err := s.CopyDtoH(outs[i], a.Out); err != nil {
				t.Fatal(err)
			}
		}
		if !bytes.Equal(outs[0], outs[1]) {
			t.Errorf("path %d: two runs differ", path)
		}
		if path == MoEGrouped {
			for _, band := range []int{128, 256, 1 << 20} {
				a.Band = band
				poison(t, s, a.Out, int64(n))
				if err := k.MoEExperts(s, a); err != nil {
					t.Fatal(err)
				}
				got := make([]byte, n)
				if err := s.CopyDtoH(got, a.Out); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, outs[0]) {
					t.Errorf("band %d changed the grouped result", band)
				}
			}
		}
	}
}

// TestMoEArgs: validation and workspace sizing without a GPU.
func TestMoEArgs(t *testing.T) {
	ok := MoEArgs{T: 2048, H: 3072, I: 1024, E: 256, TopK: 10, X: 256, Weights: 256, IDs: 256, Gate: 256,
		Up: 256, Down: 256, Out: 256, Workspace: 256, XType: cuda.BF16, WType: cuda.BF16, OutType: cuda.BF16}
	if _, err := lower.MoE(ok.lower()); err != nil {
		t.Fatal(err)
	}
	ws, err := MoEWorkspaceBytes(ok)
	if err != nil {
		t.Fatal(err)
	}
	// The grouped buffers dominate: bf16 act [R,I] and ys [R,H].
	if R := int64(2048 * 10); ws < 2*R*(1024+3072) || ws > 2*R*(1024+3072)+(8<<20) {
		t.Errorf("workspace %d bytes for T=2048", ws)
	}
	dec := ok
	dec.T = 1
	if ws, err := MoEWorkspaceBytes(dec); err != nil || ws != 10*1024*4 {
		t.Errorf("decode workspace %d (%v), want %d", ws, err, 10*1024*4)
	}
	for name, mut := range map[string]func(*MoEArgs){
		"zero T":       func(a *MoEArgs) { a.T = 0 },
		"f16":          func(a *MoEArgs) { a.XType = cuda.F16 },
		"nil ids":      func(a *MoEArgs) { a.IDs = 0 },
		"odd ws":       func(a *MoEArgs) { a.Workspace = 8 },
		"grouped f32":  func(a *MoEArgs) { a.Path, a.XType = MoEGrouped, cuda.F32 },
		"grouped E":    func(a *MoEArgs) { a.Path, a.E = MoEGrouped, MaxExperts+1 },
		"unknown path": func(a *MoEArgs) { a.Path = 9 },
		"bad tile":     func(a *MoEArgs) { a.Tile = MMATile{Rows: 32} },
	} {
		a := ok
		mut(&a)
		if _, err := lower.MoE(a.lower()); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
