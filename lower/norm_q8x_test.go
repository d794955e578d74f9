package lower

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"lagc/ckpt"
	"lagc/config"
	"lagc/ir"
	"lagc/models"
	"lagc/passes"
)

// normTestLaunch is an rms_norm of rows rows of n values of dt from arena+0
// into arena+outOff.
func normTestLaunch(t *testing.T, dt string, rows, n int, outOff int64) Launch {
	t.Helper()
	l, err := RMSNorm(dt, dt, Ptr{BaseArena, outOff}, Ptr{BaseArena, 0}, Ptr{BaseWeights, 0}, rows, n, 1e-6)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// fusedTestLaunch is normTestLaunch quantising into workspace+0.
func fusedTestLaunch(t *testing.T, dt string, rows, n int, outOff int64) Launch {
	t.Helper()
	l, err := RMSNormQ8X(dt, dt, Ptr{BaseArena, outOff}, Ptr{BaseArena, 0}, Ptr{BaseWeights, 0}, Ptr{BaseWorkspace, 0}, rows, n, 1e-6)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// q8xOfTestLaunch quantises rows rows of n values of dt at arena+xoff into
// workspace+0.
func q8xOfTestLaunch(t *testing.T, dt string, rows, n int, xoff int64) Launch {
	t.Helper()
	q, err := Q8XQuantize(dt, Ptr{BaseArena, xoff}, Ptr{BaseWorkspace, 0}, rows, n)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// routerTestLaunches are a router gemv over K values at x, its logits at
// arena+logits, and the top-k of them into arena+out (weights, then ids).
func routerTestLaunches(t *testing.T, x Ptr, K int, logits, out int64) (Launch, Launch) {
	t.Helper()
	const E, k = 64, 4
	g, err := MatMul(MatMulArgs{T: 1, K: K, N: E, X: x, W: Ptr{BaseWeights, 4096}, Y: Ptr{BaseArena, logits},
		XType: "bf16", WType: "bf16", YType: "f32"})
	if err != nil {
		t.Fatal(err)
	}
	r, err := RouterTopK("f32", Ptr{BaseArena, out}, Ptr{BaseArena, out + 4*k}, Ptr{BaseArena, logits}, Ptr{BaseWeights, 8192}, 1, E, k, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	return g, r
}

// TestRMSNormQ8X: the fused launch is the norm's with the quantised copy's
// two pointers appended, and it refuses what the quantisation cannot take.
func TestRMSNormQ8X(t *testing.T) {
	for _, c := range []struct {
		dt      string
		rows, n int
		kernel  string
	}{{"bf16", 1, 3072, "rms_norm_block_q8x"}, {"f32", 8, 1024, "rms_norm_block_q8x"}, {"bf16", 3, 256, "rms_norm_warp_q8x"}} {
		norm := normTestLaunch(t, c.dt, c.rows, c.n, 1<<20)
		f := fusedTestLaunch(t, c.dt, c.rows, c.n, 1<<20)
		q := q8xOfTestLaunch(t, c.dt, c.rows, c.n, 1<<20)
		want := norm
		want.Kernel = c.kernel
		want.Args = append(append([]Arg(nil), norm.Args...), q.Args[2], q.Args[3])
		if !reflect.DeepEqual(f, want) {
			t.Errorf("%+v: got %s, want %s", c, f, want)
		}
	}
	x, out, w, xq := Ptr{BaseArena, 0}, Ptr{BaseArena, 8192}, Ptr{BaseWeights, 0}, Ptr{BaseWorkspace, 0}
	for _, c := range []struct {
		name    string
		odt     string
		n       int
		out, xq Ptr
	}{
		{"n not a multiple of 32", "bf16", 48, out, xq},
		{"f16 output", "f16", 64, out, xq},
		{"null xq", "bf16", 64, out, Ptr{}},
		{"unaligned xq", "bf16", 64, out, xq.At(8)},
		{"xq over out", "bf16", 64, out, Ptr{BaseArena, 8192 - 64}},
		{"xq over x", "bf16", 64, out, Ptr{BaseArena, 64}},
		{"bad norm", "bf16", 64, Ptr{}, xq},
	} {
		if l, err := RMSNormQ8X("bf16", c.odt, c.out, x, w, c.xq, 2, c.n, 1e-6); err == nil {
			t.Errorf("%s: no error, got %s", c.name, l)
		}
	}
}

// TestNormQ8XLaunchArgs: what the fusion reads off rms_norm, gemv and
// router_topk launches is what their builders were given.
func TestNormQ8XLaunchArgs(t *testing.T) {
	for _, c := range []struct {
		dt      string
		rows, n int
	}{{"bf16", 1, 3072}, {"f32", 5, 64}, {"bf16", 16, 1024}} {
		m, ok := parseNorm(normTestLaunch(t, c.dt, c.rows, c.n, 4096))
		want := normLaunch{xdt: c.dt, odt: c.dt, out: Ptr{BaseArena, 4096}, x: Ptr{BaseArena, 0}, w: Ptr{BaseWeights, 0},
			rows: c.rows, n: c.n, eps: 1e-6}
		if !ok || m != want || m.outBytes() != int64(c.rows*c.n*dtypeSize(c.dt)) {
			t.Errorf("%+v: parsed %+v %v, want %+v", c, m, ok, want)
		}
	}
	odd := normTestLaunch(t, "bf16", 1, 3072, 4096)
	odd.Block[0] = 128 // not the geometry RMSNorm chooses
	if _, ok := parseNorm(odd); ok {
		t.Errorf("a norm launch RMSNorm does not build is parsed: %s", odd)
	}
	g, r := routerTestLaunches(t, Ptr{BaseArena, 0}, 256, 1024, 2048)
	sh := MoEAddShared(3, 4, 2, 64, Ptr{BaseArena, 2048}, Ptr{BaseArena, 2064}, Ptr{BaseRoutes, 0}, Ptr{BaseRoutes, 256})
	bad := g
	bad.Args = bad.Args[:6]
	f, err := RouterFused(g, r, Ptr{BaseSync, 64})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		l    Launch
		want []span
	}{
		{g, []span{{Ptr{BaseArena, 1024}, 4 * 64}}},
		{r, []span{{Ptr{BaseArena, 2048}, 16}, {Ptr{BaseArena, 2064}, 16}}},
		{sh, []span{{Ptr{BaseRoutes, 0}, 72}, {Ptr{BaseRoutes, 256}, 72}}},
		{f, []span{{Ptr{BaseArena, 1024}, 4 * 64}, {Ptr{BaseArena, 2048}, 16}, {Ptr{BaseArena, 2064}, 16}, {Ptr{BaseSync, 64}, 4}}},
		{bad, nil},
		{qgemvTestLaunch(t, 1, 64, 32, 0), nil},
		{normTestLaunch(t, "bf16", 1, 64, 0), nil},
	} {
		if w, ok := routerOutputs(c.l); ok != (c.want != nil) || ok && !reflect.DeepEqual(w, c.want) {
			t.Errorf("%s: writes %v %v, want %v", c.l, w, ok, c.want)
		}
	}
}

// TestFuseNormQ8X: a quantisation of a norm's output is fused into the
// norm exactly when nothing between could see the difference.
func TestFuseNormQ8X(t *testing.T) {
	const n, out = 256, 8192 // the norm's output: bf16 at arena [8192, 8704)
	norm, fused := normTestLaunch(t, "bf16", 1, n, out), fusedTestLaunch(t, "bf16", 1, n, out)
	q := q8xOfTestLaunch(t, "bf16", 1, n, out)
	g := qgemvTestLaunch(t, 1, n, 32, 16384)
	rg, rt := routerTestLaunches(t, Ptr{BaseArena, out}, n, 1024, 2048)
	rgOverOut, _ := routerTestLaunches(t, Ptr{BaseArena, out}, n, out+256, 2048)
	_, rtOverOut := routerTestLaunches(t, Ptr{BaseArena, out}, n, 1024, out)
	rgFromWS, _ := routerTestLaunches(t, Ptr{BaseWorkspace, 1 << 20}, n, 1024, 2048)
	sh := MoEAddShared(1, 4, 1, 64, Ptr{BaseArena, 2048}, Ptr{BaseArena, 2064}, Ptr{BaseRoutes, 0}, Ptr{BaseRoutes, 256})
	shOverOut := MoEAddShared(1, 4, 1, 64, Ptr{BaseArena, 2048}, Ptr{BaseArena, 2064}, Ptr{BaseArena, out + 64}, Ptr{BaseRoutes, 256})
	norm5, fused5 := normTestLaunch(t, "f32", 5, 1024, out), fusedTestLaunch(t, "f32", 5, 1024, out)
	q5 := q8xOfTestLaunch(t, "f32", 5, 1024, out)
	norm16, fused8 := normTestLaunch(t, "bf16", 16, 3072, out), fusedTestLaunch(t, "bf16", 8, 3072, out)
	rf, err := RouterFused(rg, rt, Ptr{BaseSync, 0})
	if err != nil {
		t.Fatal(err)
	}
	rfOverOut, err := RouterFused(rg, rtOverOut, Ptr{BaseSync, 0})
	if err != nil {
		t.Fatal(err)
	}
	norm8 := normTestLaunch(t, "bf16", 8, 3072, out)
	q8 := q8xOfTestLaunch(t, "bf16", 8, 3072, out)
	other := normTestLaunch(t, "bf16", 1, n, 4096)
	otherFused := fusedTestLaunch(t, "bf16", 1, n, 4096)
	inPlace, err := RMSNorm("bf16", "bf16", Ptr{BaseWorkspace, 0}, Ptr{BaseWorkspace, 0}, Ptr{BaseWeights, 0}, 1, n, 1e-6)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name      string
		steps     [][]Launch
		want      [][]Launch
		unchanged bool
	}{
		{name: "back to back", steps: [][]Launch{{norm, q, g}}, want: [][]Launch{{fused, g}}},
		{name: "across steps", steps: [][]Launch{{norm}, {q, g}}, want: [][]Launch{{fused}, {g}}},
		{name: "a router between", steps: [][]Launch{{norm}, {rg, rt}, {q, g}}, want: [][]Launch{{fused}, {rg, rt}, {g}}},
		{name: "a fused router between", steps: [][]Launch{{norm}, {rf}, nil, {q, g}}, want: [][]Launch{{fused}, {rf}, nil, {g}}},
		{name: "a fused router over the norm's output", steps: [][]Launch{{norm, rfOverOut, q, g}}, unchanged: true},
		{name: "a router adding shared experts", steps: [][]Launch{{norm}, {rg, rt, sh}, {q, g}}, want: [][]Launch{{fused}, {rg, rt, sh}, {g}}},
		{name: "shared experts' routes over the norm's output", steps: [][]Launch{{norm, rg, rt, shOverOut, q, g}}, unchanged: true},
		{name: "rows of a batch, f32", steps: [][]Launch{{norm5, q5, g}}, want: [][]Launch{{fused5, g}}},
		{name: "the last of two norms", steps: [][]Launch{{norm, other, q8xOfTestLaunch(t, "bf16", 1, n, 4096), g}},
			want: [][]Launch{{norm, otherFused, g}}},
		{name: "the gemv writes the norm's output", steps: [][]Launch{{norm, rgOverOut, q, g}}, unchanged: true},
		{name: "the router writes the norm's output", steps: [][]Launch{{norm, rg, rtOverOut, q, g}}, unchanged: true},
		{name: "a gemv reading the workspace", steps: [][]Launch{{norm, rgFromWS, q, g}}, unchanged: true},
		{name: "a qgemv between", steps: [][]Launch{{norm, g, q, g}}, unchanged: true},
		{name: "another kernel between", steps: [][]Launch{{norm, memcpy(Ptr{BaseArena, 0}, Ptr{BaseArena, 4096}, 64), q, g}}, unchanged: true},
		{name: "another quantisation between", steps: [][]Launch{{norm, q8xOfTestLaunch(t, "bf16", 1, n, 4096), g, q, g}}, unchanged: true},
		{name: "another norm between", steps: [][]Launch{{norm, other, q, g}}, unchanged: true},
		{name: "part of the norm's rows", steps: [][]Launch{{norm16, q8, g}}, unchanged: true},
		{name: "all of 8 rows", steps: [][]Launch{{norm8, q8, g}}, want: [][]Launch{{fused8, g}}},
		{name: "another value", steps: [][]Launch{{norm, q8xOfTestLaunch(t, "bf16", 1, n, out+512), g}}, unchanged: true},
		{name: "another dtype", steps: [][]Launch{{norm, q8xOfTestLaunch(t, "f32", 1, n/2, out), g}}, unchanged: true},
		{name: "the norm's rows in the quantised copy", steps: [][]Launch{{inPlace, q8xOfTestLaunch(t, "bf16", 1, n, 0)}},
			unchanged: true},
		{name: "no norm", steps: [][]Launch{{q, g}}, unchanged: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			want := c.want
			if c.unchanged {
				want = c.steps
			}
			got := make([][]Launch, len(c.steps))
			copy(got, c.steps)
			fuseNormQ8X(got)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("got\n%s\nwant\n%s", streamString(got), streamString(want))
			}
		})
	}
}

// TestDropQ8XOrder: in a MoE layer's decode stream (norm, router, the
// input quantised for the shared expert, then again for the routed ones)
// the first quantisation is fused into the norm and its repeat reused.
func TestDropQ8XOrder(t *testing.T) {
	const K, out = 256, 8192
	norm, fused := normTestLaunch(t, "bf16", 1, K, out), fusedTestLaunch(t, "bf16", 1, K, out)
	rg, rt := routerTestLaunches(t, Ptr{BaseArena, out}, K, 1024, 2048)
	q := q8xOfTestLaunch(t, "bf16", 1, K, out)
	shared, routed := qgemvTestLaunch(t, 1, K, 64, 16384), qgemvTestLaunch(t, 1, K, 32, 20480)
	got := [][]Launch{{norm}, {rg}, {rt}, {q, shared, q, routed}}
	dropQ8X(got)
	if want := [][]Launch{{fused}, {rg}, {rt}, {shared, routed}}; !reflect.DeepEqual(got, want) {
		t.Errorf("got\n%s\nwant\n%s", streamString(got), streamString(want))
	}
}

// unfuseNormQ8X splits a fused norm into the norm and the quantisation it
// stands for.
func unfuseNormQ8X(l Launch) (norm, q Launch, ok bool) {
	if !strings.HasSuffix(l.Kernel, "_q8x") || len(l.Args) != 8 {
		return Launch{}, Launch{}, false
	}
	norm = l
	norm.Kernel = strings.TrimSuffix(l.Kernel, "_q8x")
	norm.Args = l.Args[:6]
	m, ok := parseNorm(norm)
	if !ok {
		return Launch{}, Launch{}, false
	}
	q, err := Q8XQuantize(m.odt, m.out, l.Args[6].Ptr(), m.rows, m.n)
	return norm, q, err == nil
}

// unfuseAttnQ8X splits a decode attention writing a quantised copy of its
// output into the attention (as AttentionDecode builds it without XQ) and
// the quantisation it stands for.
func unfuseAttnQ8X(l Launch) (attn, q Launch, ok bool) {
	if l.Kernel != "attn_decode" || len(l.Args) != attnArgCount || l.Args[attnArgXQ].Ptr().Null() {
		return Launch{}, Launch{}, false
	}
	attn = l
	attn.Args = append([]Arg(nil), l.Args...)
	attn.Args[attnArgXQ], attn.Args[attnArgXQ+1] = ptrArg(Ptr{}), ptrArg(Ptr{})
	nh, nkv, d := int(l.Args[attnArgNH].Int), int(l.Args[attnArgNKV].Int), int(l.Args[attnArgD].Int)
	group := nh / nkv
	rows := l.Grid[2] / ceilDiv(group, min(group, decodeHeads))
	q, err := Q8XQuantize(l.DTypes[0], l.Args[attnArgOut].Ptr(), l.Args[attnArgXQ].Ptr(), rows, nh*d)
	return attn, q, err == nil && reflect.DeepEqual(l.Args[attnArgXQ+1], ptrArg(q8xScales(l.Args[attnArgXQ].Ptr(), rows, nh*d)))
}

// quantPlan lowers the first layers of a preset with a quantisation
// recipe's types (none: bf16), through the default passes, with o.
func quantPlan(t *testing.T, preset string, layers int, recipe string, o Options) (*Plan, error) {
	t.Helper()
	return quantPlanRules(t, preset, layers, recipe, nil, o)
}

// quantPlanRules is quantPlan with rules before the recipe's own (as
// --tensor-type puts them).
func quantPlanRules(t *testing.T, preset string, layers int, recipe string, rules []ckpt.TypeRule, o Options) (*Plan, error) {
	t.Helper()
	full, err := config.Preset(preset)
	if err != nil {
		t.Fatal(err)
	}
	c, err := full.FirstLayers(layers)
	if err != nil {
		t.Fatal(err)
	}
	g, err := models.Build("laguna.yaml", models.LagunaYAML, c, models.BuildOptions{WeightDType: ir.BF16})
	if err != nil {
		t.Fatal(err)
	}
	if recipe != "" {
		r, err := ckpt.ParseRecipe(recipe)
		if err != nil {
			t.Fatal(err)
		}
		r.Rules = append(slices.Clone(rules), r.Rules...)
		if err := models.SetRecipeTypes(g, r); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := passes.Run(g, passes.Options{}); err != nil {
		t.Fatal(err)
	}
	return Lower(g, o)
}

// TestDropQ8XPlans runs the launch streams of a quantised model's
// schedules (decode, a short prefill chunk, batched decode) against the
// same streams without dropping quantisations, in a model of memory that
// knows what q8x_quantize, qgemv, rms_norm (fused or not), gemv and
// router_topk write, and takes every other launch to write everywhere:
// each GEMV reading quantised activations must find exactly what it finds
// in the raw stream.
func TestDropQ8XPlans(t *testing.T) {
	// Without fuseNormRoPEAttention, fuseRowsKNormRoPEAttention and
	// fusePrefillNormRoPEAttention, which TestFuseNormRoPEAttention,
	// TestFuseRowsNormRoPEAttention and TestFusePrefillNormRoPEAttention
	// check, and the renames of fuseXInPre and fuseDownPre (TestXInPrePlan).
	p, err := quantPlan(t, "laguna-xs-2", 3, "q4_k_m", Options{DType: ir.BF16, Chunk: 64, MaxContext: 256, Seqs: 16,
		DisableFusions: []string{"fuseNormRoPEAttention", "fuseRowsKNormRoPEAttention", "fusePrefillNormRoPEAttention", "fuseXInPre", "fuseDownPre"}})
	if err != nil {
		t.Fatal(err)
	}
	raw := func(s *Schedule, T int, batch bool) [][]Launch { // the routers fused already
		out := make([][]Launch, len(s.Steps))
		for i := range s.Steps {
			ls, err := p.stepLaunches(s, &s.Steps[i], T, batch)
			if err != nil {
				t.Fatal(err)
			}
			out[i] = ls
		}
		fuseRouter(out)
		return out
	}
	decode := make([][]Launch, len(p.Decode.Steps))
	for i, st := range p.Decode.Steps {
		decode[i] = st.Launches
	}
	// The norms fused into GEMVs (fuseGEMVNorm, last) and the adds fused
	// into norms (fuseAddNorm, after dropQ8X) split again: the two MoE
	// layers' residual sums and their norms.
	unfused := func(what string, steps, raw [][]Launch, want, wantGEMV int) [][]Launch {
		steps, _ = unfuseRouterQGEMVs(steps, raw)
		out, n := unfuseGEMVNorms(steps)
		if n != wantGEMV {
			t.Errorf("%s: %d norms fused into GEMVs, want %d", what, n, wantGEMV)
		}
		out, n = unfuseAddNorms(out)
		if n != want {
			t.Errorf("%s: %d adds fused into norms, want %d", what, n, want)
		}
		return out
	}
	// In decode, every layer's MLP norm runs in o_proj's GEMV, and the
	// next layer's norm (the LM head's after the last) in the down GEMV.
	decode = unfused("decode", decode, raw(p.Decode, 1, false), 2, 6)
	// Per layer the attention input and the MLP input are quantised by
	// their norm, and so is the LM head's input; in each of the two MoE
	// layers the routed experts' quantisation of their input repeats the
	// shared expert's and is dropped, and the shared expert's down GEMV
	// quantises its 512 inputs itself; each of the three layers' attention
	// writes the quantised copy of its output that o_proj's GEMV reads.
	if c := checkQ8XStream(t, "decode", raw(p.Decode, 1, false), decode); c != (q8xDrops{reused: 2, norm: 7, attn: 3, xin: 2}) {
		t.Errorf("decode: %+v quantisations dropped, want 2 reused, 7 into norms, 3 into attentions, 2 into GEMVs", c)
	}
	short, err := p.At(p.Prefill, 5)
	if err != nil {
		t.Fatal(err)
	}
	if c := checkQ8XStream(t, "prefill T=5", raw(p.Prefill, 5, false), unfused("prefill T=5", short, raw(p.Prefill, 5, false), 2, 0)); c.norm != 7 || c.xin != 0 {
		t.Errorf("prefill T=5: %+v quantisations dropped, want 7 into norms, none into GEMVs (5 x 512 values)", c)
	}
	// 16 rows: two quantisations of 8; 4 rows of 512: the most a GEMV
	// quantises itself.
	for _, b := range []struct{ rows, fused, attn, xin, gemvNorms int }{{1, 7, 3, 2, 6}, {4, 7, 3, 2, 0}, {5, 7, 3, 0, 0}, {8, 7, 3, 0, 0}, {16, 0, 0, 0, 0}} {
		ls, err := p.AtBatch(b.rows)
		if err != nil {
			t.Fatal(err)
		}
		what := fmt.Sprintf("batch %d", b.rows)
		if c := checkQ8XStream(t, what, raw(p.Prefill, b.rows, true), unfused(what, ls, raw(p.Prefill, b.rows, true), 2, b.gemvNorms)); c.norm != b.fused || c.attn != b.attn || c.xin != b.xin {
			t.Errorf("batch %d: %+v quantisations dropped, want %d into norms, %d into attentions, %d into GEMVs", b.rows, c, b.fused, b.attn, b.xin)
		}
	}
}

// q8xDrops counts the quantisations a stream dropped: as repeats, fused
// into norms, into decode attentions, and into the GEMV reading them.
type q8xDrops struct{ reused, norm, attn, xin int }

// checkQ8XStream checks got, raw with quantisations dropped or fused into
// norms, decode attentions or GEMVs, in the memory model of
// TestDropQ8XPlans, and counts them.
func checkQ8XStream(t *testing.T, what string, raw, got [][]Launch) (c q8xDrops) {
	t.Helper()
	type write struct {
		at  Ptr
		n   int64
		seq int
	}
	var writes []write
	clobbered, seq := 0, 0
	// version is the last write that may have touched [at, at+n).
	version := func(at Ptr, n int64) int {
		v := clobbered
		for _, w := range writes {
			if overlaps(at, n, w.at, w.n) {
				v = max(v, w.seq)
			}
		}
		return v
	}
	type quantised struct {
		q       Launch
		version int // of its source when it ran
	}
	var ws *quantised // what the workspace holds, nil: unknown
	// stale: a GEMV quantised its activations itself, leaving the copy raw
	// has in the workspace unwritten; no launch may point into the
	// workspace before a quantisation rewrites it.
	stale := false
	quantise := func(q Launch) {
		x, n, _ := q8xSource(q)
		seq++
		ws = &quantised{q, version(x, n)}
		writes = append(writes, write{Ptr{BaseWorkspace, 0}, 1 << 62, seq})
		stale = false
	}
	var lastQ *Launch // raw's last launch, when a q8x_quantize
	for i := range raw {
		// at[j] is the launch of raw[i] that got[i][j] stands for.
		var at []int
		var absorbed []int // raw quantisations fused into a norm
		for k, l := range raw[i] {
			j := len(at)
			q := lastQ
			lastQ = nil
			if l.Kernel == "q8x_quantize" {
				lastQ = &raw[i][k]
			}
			if j < len(got[i]) && reflect.DeepEqual(got[i][j], l) {
				at = append(at, k)
				continue
			}
			if j < len(got[i]) {
				if norm, _, ok := unfuseNormQ8X(got[i][j]); ok && reflect.DeepEqual(norm, l) {
					at = append(at, k)
					c.norm++
					continue
				}
				if a, _, ok := unfuseAttnQ8X(got[i][j]); ok && reflect.DeepEqual(a, l) {
					at = append(at, k)
					c.attn++
					continue
				}
				if q != nil && got[i][j].Kernel == "qgemv_xin" {
					if f, _, ok := qgemvWithQ8X(*q, l); ok && reflect.DeepEqual(f, got[i][j]) {
						at = append(at, k)
						c.xin++
						continue
					}
				}
			}
			if l.Kernel != "q8x_quantize" {
				t.Fatalf("%s: step %d lost %s", what, i, l)
			}
			absorbed = append(absorbed, k)
		}
		if len(at) != len(got[i]) {
			t.Fatalf("%s: step %d has launches raw does not:\n%s", what, i, streamString(got[i:i+1]))
		}
		c.reused += len(absorbed)
		// Run got[i], and before every launch reading a quantised copy,
		// compare the workspace with what raw[i]'s last quantisation
		// before that launch would have left.
		var expect Launch
		k := 0
		for j, l := range got[i] {
			for ; k < at[j]; k++ {
				if raw[i][k].Kernel == "q8x_quantize" {
					expect = raw[i][k]
				}
			}
			k++
			seq++
			if norm, q, ok := unfuseNormQ8X(l); ok {
				m, _ := parseNorm(norm)
				writes = append(writes, write{m.out, m.outBytes(), seq})
				quantise(q)
				continue
			}
			if _, q, ok := unfuseAttnQ8X(l); ok { // writes anywhere, then the copy
				clobbered, ws = seq, nil
				quantise(q)
				continue
			}
			switch l.Kernel {
			case "q8x_quantize":
				expect = l
				quantise(l)
				continue
			case "qgemv":
				x, n, _ := q8xSource(expect)
				if ws == nil || !reflect.DeepEqual(ws.q, expect) || version(x, n) != ws.version {
					t.Fatalf("%s: step %d: %s reads a quantised copy that is not %s's", what, i, l, expect)
				}
			case "qgemv_xin":
				y := l.Args[6].Ptr()
				writes = append(writes, write{y, int64(l.Ints[1]) * l.Args[0].Int * int64(dtypeSize(l.DTypes[0])), seq})
				stale = true
				continue
			}
			if stale {
				for _, a := range l.Args {
					if (a.Kind == ArgPtr || a.Kind == ArgTMap) && a.Base == BaseWorkspace {
						t.Fatalf("%s: step %d: %s points into a workspace a qgemv_xin left unwritten", what, i, l)
					}
				}
			}
			if spans := launchWrites(l); spans != nil {
				for _, w := range spans {
					writes = append(writes, write{w.at, w.n, seq})
				}
			} else {
				clobbered, ws = seq, nil
			}
		}
	}
	c.reused -= c.norm + c.attn + c.xin
	return c
}

// launchWrites is what the memory model of TestDropQ8XPlans knows a
// launch to write (nil: it may write anywhere): a qgemv its y, and where
// they have no pointer into the workspace, an rms_norm its output and the
// router's launches their outputs.
func launchWrites(l Launch) []span {
	for _, a := range l.Args {
		if (a.Kind == ArgPtr || a.Kind == ArgTMap) && a.Base == BaseWorkspace && l.Kernel != "qgemv" {
			return nil
		}
	}
	switch l.Kernel {
	case "qgemv":
		if y, n, ok := qgemvOutput(l); ok {
			return []span{{y, n}}
		}
	case "rms_norm_block", "rms_norm_warp":
		if m, ok := parseNorm(l); ok {
			return []span{{m.out, m.outBytes()}}
		}
	}
	w, _ := routerOutputs(l)
	return w
}

// dropQ8X runs the quantisation passes of fuseLaunches alone, in its order.
func dropQ8X(steps [][]Launch) {
	reuseQ8X(steps)
	fuseNormQ8X(steps)
	fuseAttnQ8X(steps)
	fuseQGEMVXIn(steps)
}

// TestDisableFusions: a plan without a named fusion has none of its
// launches (S-2.1 q4_k_m's decode: no GEMV+norm), the same launches
// otherwise; an unknown name is an error that lists the names.
func TestDisableFusions(t *testing.T) {
	plan := func(disable ...string) (*Plan, error) {
		return quantPlan(t, "laguna-s-2.1", 2, "q4_k_m", Options{DType: ir.BF16, Chunk: 64, MaxContext: 256, DisableFusions: disable})
	}
	count := func(p *Plan, kernel string) (n int) {
		for _, st := range p.Decode.Steps {
			for _, l := range st.Launches {
				if l.Kernel == kernel {
					n++
				}
			}
		}
		return n
	}
	all, err := plan()
	if err != nil {
		t.Fatal(err)
	}
	some, err := plan("fuseGEMVNorm")
	if err != nil {
		t.Fatal(err)
	}
	if n := count(all, "qgemv_norm"); n == 0 {
		t.Fatalf("no qgemv_norm in the fused plan")
	}
	if n := count(some, "qgemv_norm") + count(some, "qgemv_xin_norm"); n != 0 {
		t.Errorf("%d GEMV+norm launches with fuseGEMVNorm disabled", n)
	}
	if !slices.Equal(some.DisableFusions, []string{"fuseGEMVNorm"}) || all.DisableFusions != nil {
		t.Errorf("plans record %v and %v", some.DisableFusions, all.DisableFusions)
	}
	if _, err := plan("fuseEverything"); err == nil || !strings.Contains(err.Error(), "fuseGEMVNorm") {
		t.Errorf("an unknown fusion: %v", err)
	}
}
