package lower

import (
	"reflect"
	"strings"
	"testing"

	"lagc/ir"
)

// unfuseCombineNorm splits a fused combine and norm (MoECombineNorm) into
// the combine and the norm it stands for.
func unfuseCombineNorm(l Launch) (c, n Launch, ok bool) {
	if l.Kernel != "moe_combine_norm" || len(l.DTypes) != 2 ||
		!ArgKinds(l.Args, ArgI32, ArgI32, ArgI32, ArgPtr, ArgPtr, ArgPtr, ArgPtr, ArgI32, ArgF32, ArgPtr, ArgPtr) {
		return Launch{}, Launch{}, false
	}
	a := l.Args
	T, k, H := int(a[0].Int), int(a[1].Int), int(a[2].Int)
	weights, pos, ys, out, acc := a[3].Ptr(), a[4].Ptr(), a[5].Ptr(), a[6].Ptr(), a[7].Int != 0
	eps, w, nout := a[8].Float, a[9].Ptr(), a[10].Ptr()
	f, err := MoECombineNorm(l.DTypes[0], l.DTypes[1], T, k, H, weights, pos, ys, out, acc, w, nout, eps)
	if err != nil || !reflect.DeepEqual(f, l) {
		return Launch{}, Launch{}, false
	}
	n, err = RMSNorm(l.DTypes[0], l.DTypes[1], nout, out, w, T, H, eps)
	return MoECombine(l.DTypes[0], T, k, H, weights, pos, ys, out, acc), n, err == nil
}

// TestFuseCombineNorm: a grouped MoE's combine and the norm of its output
// right after it become one launch at the combine's place, across a step
// boundary or empty steps too, accumulating or not; and nothing changes
// when the norm reads anything else, in another dtype, of other rows, is
// a warp, add or _q8x norm, writes over what the combine reads or writes,
// the combine has 1 value a thread (H not a multiple of 8), or a launch
// sits between them.
func TestFuseCombineNorm(t *testing.T) {
	const T, k, H = 37, 11, 3072
	arena := func(off int64) Ptr { return Ptr{BaseArena, off} }
	ws := func(off int64) Ptr { return Ptr{BaseWorkspace, off} }
	w, xq := Ptr{BaseWeights, 0}, Ptr{BaseWorkspace, 1 << 30}
	must := mustLaunch(t)
	// The residual stream at 0, the norm's output after it; routes and rows
	// in the workspace.
	weights, pos, ys := ws(0), ws(4096), ws(8192)
	out, nout := arena(0), arena(T*H*2)
	comb := MoECombine("bf16", T, k, H, weights, pos, ys, out, true)
	combNew := MoECombine("bf16", T, k, H, weights, pos, ys, out, false)
	norm := must(RMSNorm("bf16", "bf16", nout, out, w, T, H, 1e-6))
	fused := must(MoECombineNorm("bf16", "bf16", T, k, H, weights, pos, ys, out, true, w, nout, 1e-6))
	fusedNew := must(MoECombineNorm("bf16", "bf16", T, k, H, weights, pos, ys, out, false, w, nout, 1e-6))
	// f32 rows into a bf16 norm output (an f32 plan's stream).
	combF := MoECombine("f32", T, k, H, weights, pos, ys, out, true)
	normF := must(RMSNorm("f32", "bf16", arena(T*H*4), out, w, T, H, 1e-5))
	fusedF := must(MoECombineNorm("f32", "bf16", T, k, H, weights, pos, ys, out, true, w, arena(T*H*4), 1e-5))
	other := must(Elementwise("silu", "bf16", H, nout, arena(1<<24)))
	// Rows of 512: the norm is the warp kernel.
	combW := MoECombine("bf16", T, k, 512, weights, pos, ys, out, true)
	normW := must(RMSNorm("bf16", "bf16", nout, out, w, T, 512, 1e-6))

	for _, c := range []struct {
		name        string
		steps, want [][]Launch
	}{
		{"one step", [][]Launch{{comb, norm}}, [][]Launch{{fused}}},
		{"next step", [][]Launch{{other, comb}, {norm, other}}, [][]Launch{{other, fused}, {other}}},
		{"past empty steps", [][]Launch{{comb}, {}, nil, {norm}}, [][]Launch{{fused}, {}, nil, nil}},
		{"not accumulating", [][]Launch{{combNew}, {norm}}, [][]Launch{{fusedNew}, nil}},
		{"f32 rows", [][]Launch{{combF}, {normF}}, [][]Launch{{fusedF}, nil}},
		{"two", [][]Launch{{comb}, {norm}, {combNew}, {norm}}, [][]Launch{{fused}, nil, {fusedNew}, nil}},
		{"x is not the sum", [][]Launch{{comb}, {must(RMSNorm("bf16", "bf16", nout, arena(1<<24), w, T, H, 1e-6))}}, nil},
		{"x inside the sum", [][]Launch{{comb}, {must(RMSNorm("bf16", "bf16", nout, out.At(2*H), w, T-1, H, 1e-6))}}, nil},
		{"dtype differs", [][]Launch{{comb}, {must(RMSNorm("f32", "bf16", nout, out, w, T, H, 1e-6))}}, nil},
		{"fewer rows", [][]Launch{{comb}, {must(RMSNorm("bf16", "bf16", nout, out, w, T-1, H, 1e-6))}}, nil},
		{"warp norm", [][]Launch{{combW}, {normW}}, nil},
		{"q8x norm", [][]Launch{{comb}, {must(RMSNormQ8X("bf16", "bf16", nout, out, w, xq, T, H, 1e-6))}}, nil},
		{"add norm", [][]Launch{{comb}, {must(AddRMSNorm("bf16", "bf16", out, nout, out, arena(1<<24), w, T, H, 1e-6))}}, nil},
		{"in place", [][]Launch{{comb}, {must(RMSNorm("bf16", "bf16", out, out, w, T, H, 1e-6))}}, nil},
		{"over the rows", [][]Launch{{comb}, {must(RMSNorm("bf16", "bf16", ys.At(64), out, w, T, H, 1e-6))}}, nil},
		{"over the weights", [][]Launch{{comb}, {must(RMSNorm("bf16", "bf16", weights, out, w, T, H, 1e-6))}}, nil},
		{"norm weight in the sum", [][]Launch{{comb}, {must(RMSNorm("bf16", "bf16", nout, out, out.At(64), T, H, 1e-6))}}, nil},
		{"one value a thread", [][]Launch{{MoECombine("bf16", T, k, H+4, weights, pos, ys, out, true)}, {must(RMSNorm("bf16", "bf16", nout, out, w, T, H+4, 1e-6))}}, nil},
		{"norm output unaligned", [][]Launch{{comb}, {must(RMSNorm("bf16", "bf16", nout.At(2), out, w, T, H, 1e-6))}}, nil},
		{"a launch between", [][]Launch{{comb, other, norm}}, nil},
		{"the norm first", [][]Launch{{norm, comb}}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := runFusions(t, c.steps, c.want, fuseCombineNorm)
			if c.want == nil {
				return
			}
			back, n := unfusePairs(got, nil, unfuseCombineNorm)
			if n == 0 || !launchStreamsEqual(flatten(back), flatten(c.steps)) {
				t.Errorf("split again:\n%s\nwant\n%s", streamString(back), streamString(c.steps))
			}
		})
	}
}

// TestMoECombineNormArgs: the fused launch is a block a token of the norm's
// block size, and the builder refuses what would race or misread.
func TestMoECombineNormArgs(t *testing.T) {
	p := func(off int64) Ptr { return Ptr{BaseArena, off} }
	ws := func(off int64) Ptr { return Ptr{BaseWorkspace, off} }
	w := Ptr{BaseWeights, 0}
	for _, H := range []int{1024, 2048, 3072, 8192} {
		l, err := MoECombineNorm("bf16", "f32", 5, 3, H, ws(0), ws(1024), ws(2048), p(0), true, w, p(1<<20), 1e-6)
		if err != nil {
			t.Fatal(err)
		}
		n, _ := RMSNorm("bf16", "f32", p(1<<20), p(0), w, 5, H, 1e-6)
		if l.Grid != dims(5) || l.Block != n.Block || l.Shmem != 0 || !reflect.DeepEqual(l.DTypes, []string{"bf16", "f32"}) || len(l.Args) != 11 {
			t.Errorf("H %d: %s, norm %s", H, l, n)
		}
	}
	for name, c := range map[string]struct {
		H, k                     int
		weights, pos, ys, out, w Ptr
		nout                     Ptr
		want                     string
	}{
		"short rows":        {512, 3, ws(0), ws(1024), ws(2048), p(0), w, p(1 << 20), "multiple of 8"},
		"rows not of 8":     {1028, 3, ws(0), ws(1024), ws(2048), p(0), w, p(1 << 20), "multiple of 8"},
		"no routes":         {1024, 0, ws(0), ws(1024), ws(2048), p(0), w, p(1 << 20), "k > 0"},
		"null pos":          {1024, 3, ws(0), Ptr{}, ws(2048), p(0), w, p(1 << 20), "null"},
		"nout over ys":      {1024, 3, ws(0), ws(1024), p(1 << 20), p(0), w, p(1<<20 + 64), "overlaps"},
		"nout over out":     {1024, 3, ws(0), ws(1024), ws(2048), p(0), w, p(64), "overlaps"},
		"nout over weights": {1024, 3, p(1 << 20), ws(1024), ws(2048), p(0), w, p(1 << 20), "overlaps"},
		"w in out":          {1024, 3, ws(0), ws(1024), ws(2048), p(0), p(128), p(1 << 20), "norm weight"},
		"rows over 8192":    {8200, 3, ws(0), ws(1024), ws(2048), p(0), w, p(1 << 20), "multiple of 8"},
		"nout unaligned":    {1024, 3, ws(0), ws(1024), ws(2048), p(0), w, p(1<<20 + 2), "aligned"},
		"out unaligned":     {1024, 3, ws(0), ws(1024), ws(2048), p(8), w, p(1 << 20), "aligned"},
	} {
		_, err := MoECombineNorm("bf16", "bf16", 5, c.k, c.H, c.weights, c.pos, c.ys, c.out, true, c.w, c.nout, 1e-6)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one saying %q", name, err, c.want)
		}
	}
}

// TestCombineNormInPlans: in a bf16 S-2.1 plan's prefill (4 layers) every
// MoE layer's combine carries the norm after it (the next layer's input
// norm, the last one the output norm), at the chunk, a shorter T and the
// last-row tail; split again, the launches are those of the plan without
// the fusion; decode, which has no combine, is untouched.
func TestCombineNormInPlans(t *testing.T) {
	fused, plain := fusionPlans(t, "bf16", "fuseCombineNorm")
	for _, T := range []int{64, 37} {
		for _, tail := range []Tail{TailAll, TailLast} {
			got, want := fusionSteps(t, fused, plain, T, tail)
			count := func(steps [][]Launch, kernel string) int {
				n := 0
				for _, l := range flatten(steps)[0] {
					if l.Kernel == kernel {
						n++
					}
				}
				return n
			}
			// 3 MoE layers; with the last-row tail the last one's experts
			// run on one row as GEMVs, with no combine.
			layers := 3
			if tail == TailLast {
				layers = 2
			}
			if c, f := count(want, "moe_combine"), count(got, "moe_combine_norm"); c != layers || f != c || count(got, "moe_combine") != 0 {
				t.Errorf("T=%d tail %d: %d combines without the fusion, %d fused, %d left", T, tail, c, f, count(got, "moe_combine"))
			}
			back, _ := unfusePairs(got, nil, unfuseCombineNorm)
			if !launchStreamsEqual(flatten(back), flatten(want)) {
				t.Errorf("T=%d tail %d: the launches split again differ from the unfused plan's", T, tail)
			}
		}
	}
	if !reflect.DeepEqual(fused.Decode, plain.Decode) {
		t.Error("the decode schedule differs with the fusion")
	}
}

// fusionPlans are 4-layer S-2.1 plans of recipe (prefill chunks of 64)
// with every fusion and without the one named.
func fusionPlans(t *testing.T, recipe, fusion string) (fused, plain *Plan) {
	t.Helper()
	o := Options{DType: ir.BF16, Chunk: 64, MaxContext: 1024}
	fused, err := quantPlan(t, "laguna-s-2.1", 4, recipe, o)
	if err != nil {
		t.Fatal(err)
	}
	o.DisableFusions = []string{fusion}
	plain, err = quantPlan(t, "laguna-s-2.1", 4, recipe, o)
	if err != nil {
		t.Fatal(err)
	}
	return fused, plain
}

// fusionSteps are both plans' prefill launches at T rows and tail.
func fusionSteps(t *testing.T, fused, plain *Plan, T int, tail Tail) (got, want [][]Launch) {
	t.Helper()
	got, err := fused.AtTail(fused.Prefill, T, tail)
	if err != nil {
		t.Fatal(err)
	}
	want, err = plain.AtTail(plain.Prefill, T, tail)
	if err != nil {
		t.Fatal(err)
	}
	return got, want
}
