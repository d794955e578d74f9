package lower

import (
	"reflect"
	"slices"
)

// The activations of most quantised GEMVs in decode are an RMS norm's
// output: the attention input, the MLP or MoE input, the LM head's input.
// fuseNormQ8X lets the norm quantise them as it stores them (RMSNormQ8X),
// so the quantisation is no launch of its own. Its invariant:
//
//	a q8x_quantize launch Q is dropped, and the rms_norm launch N before
//	it becomes RMSNormQ8X of N's arguments and Q's quantised copy, only
//	when N is as RMSNorm builds it, Q is exactly Q8XQuantize of N's whole
//	output, and every launch between them is a gemv, router_topk(_block),
//	router_fused or moe_add_shared (as MatMul, RouterTopK, RouterFused and
//	MoEAddShared build them: the MoE router) with no pointer into the
//	workspace and no output overlapping N's.
//
// Nothing between writes N's output, so Q would quantise the values the
// fused kernel quantises as it stores them, and it computes the same bits
// (cuda/kernels/norm.cu). The launches between have no pointer into the
// workspace, so they neither read nor write it (a kernel touches only what
// its arguments point at): writing Q's bytes at N instead of at Q changes
// nothing they see, and from Q's place on, memory is what it was without
// the fusion. A launch in between that is not as stated, another norm or
// another quantisation ends the chance.

// fuseLaunches fuses launches of consecutive steps, in place: the
// routers (fuseRouter), then the quantisations (four passes), which may
// run past a fused router, then the residual adds into the norms after them
// (fuseAddNorm), which needs the norms as those leave them, and the grouped
// experts' combines into theirs (fuseCombineNorm: the plain block norms
// alone, of a bf16 model's prefill, which no other fusion takes), then the
// one-row norms into the GEMVs before them (fuseGEMVNorm), which takes
// the norms as fuseAddNorm leaves them, then the fused routers with the
// GEMV after them (fuseRouterQGEMV), which needs that GEMV's quantisation
// gone and the GEMV in its last form.
//
// The quantisation launches a stream need not make go in this order (the
// four passes after fuseRouter): the repeats (reuseQ8X) first, then those
// fused into a norm, then those fused into a decode attention
// (fuseAttnQ8X), then those fused into the one GEMV reading them
// (fuseQGEMVXIn). In that order because reuseQ8X recognises a
// repeat by the quantisation it repeats, which the fusion removes; the
// fusion moves a quantisation's writes earlier past launches that do not
// touch the workspace, so the repeats stay valid. fuseQGEMVXIn comes last:
// a copy made once for several GEMVs, or for free in a norm or attention,
// beats one remade in every block of a GEMV, and its scan for later
// readers must see the stream the other passes leave.
//
// disabled names fusions to skip (Options.DisableFusions): each checks
// its own invariant on the stream it is given, so any of them may go.
//
// meta are the schedule's steps the launches belong to (steps[i] is
// meta[i]'s), for fusions whose invariant needs who reads a value
// (fuseNormRoPEAttention and fusePrefillNormRoPEAttention, the last of
// those that change arguments: they change only the decode and prefill
// attentions' q and last arguments, which no other fusion reads). fuseXInPre and fuseDownPre come after them all, in that
// order: they change kernel names alone, of launches the others have
// settled. fuseTopKShared and fuseQGEMVPair come last: each takes
// launches no other fusion wants once those have run.
func fuseLaunches(meta []Step, steps [][]Launch, disabled []string) {
	for _, f := range launchFusions {
		if !slices.Contains(disabled, f.name) {
			f.run(meta, steps)
		}
	}
}

// launchFusions are the launch-stream fusions by name, in their order.
var launchFusions = []struct {
	name string
	run  func([]Step, [][]Launch)
}{
	{"fuseRouter", launchesOnly(fuseRouter)},
	{"reuseQ8X", launchesOnly(reuseQ8X)},
	{"fuseNormQ8X", launchesOnly(fuseNormQ8X)},
	{"fuseAttnQ8X", launchesOnly(fuseAttnQ8X)},
	{"fuseQGEMVXIn", launchesOnly(fuseQGEMVXIn)},
	{"fuseAddNorm", launchesOnly(fuseAddNorm)},
	{"fuseCombineNorm", launchesOnly(fuseCombineNorm)},
	{"fuseGEMVNorm", launchesOnly(fuseGEMVNorm)},
	{"fuseRouterQGEMV", launchesOnly(fuseRouterQGEMV)},
	{"fuseNormRoPEAttention", fuseNormRoPEAttention},
	{"fuseRowsKNormRoPEAttention", fuseRowsKNormRoPEAttention},
	{"fusePrefillGEMMNormRoPE", fusePrefillGEMMNormRoPE},
	{"fusePrefillNormRoPEAttention", fusePrefillNormRoPEAttention},
	{"fuseXInPre", launchesOnly(fuseXInPre)},
	{"fuseDownPre", launchesOnly(fuseDownPre)},
	{"fuseTopKShared", fuseTopKShared},
	{"fuseQGEMVPair", launchesOnly(fuseQGEMVPair)},
}

// optInFusions run only when named in Options.EnableFusions: correct but
// measured no faster, kept for A/B runs (docs/PERF.md).
var optInFusions = []string{"fuseRowsKNormRoPEAttention"}

// OptInFusionNames are the names Options.EnableFusions takes.
func OptInFusionNames() []string { return append([]string(nil), optInFusions...) }

// fusionsOff are the fusions p's schedules skip: those disabled, and the
// opt-in ones not enabled.
func (p *Plan) fusionsOff() []string {
	off := append([]string(nil), p.DisableFusions...)
	for _, f := range optInFusions {
		if !slices.Contains(p.EnableFusions, f) {
			off = append(off, f)
		}
	}
	return off
}

// launchesOnly is a fusion whose invariant needs the launches alone.
func launchesOnly(f func([][]Launch)) func([]Step, [][]Launch) {
	return func(_ []Step, steps [][]Launch) { f(steps) }
}

// FusionNames are the names Options.DisableFusions takes, in
// launchFusions' order, then those that run after the decode workspace is
// sized (Plan.lateFusions).
func FusionNames() []string {
	names := make([]string, len(launchFusions), len(launchFusions)+len(lateFusionNames))
	for i, f := range launchFusions {
		names[i] = f.name
	}
	return append(names, lateFusionNames...)
}

// fuseNormQ8X fuses quantisations into the norms producing their source.
func fuseNormQ8X(steps [][]Launch) {
	type pos struct{ step, i int }
	fused := map[pos]Launch{} // a norm's replacement
	dropped := map[pos]bool{}
	var norm normLaunch
	var at pos
	pending := false // norm at `at` is a candidate, the invariant holding since
	for i, ls := range steps {
		for j, l := range ls {
			switch {
			case l.Kernel == "q8x_quantize" && pending:
				pending = false
				if len(l.Args) != 4 || l.Args[2].Kind != ArgPtr {
					continue
				}
				xq := l.Args[2].Ptr()
				q, err := Q8XQuantize(norm.odt, norm.out, xq, norm.rows, norm.n)
				if err != nil || !reflect.DeepEqual(q, l) {
					continue
				}
				f, err := RMSNormQ8X(norm.xdt, norm.odt, norm.out, norm.x, norm.w, xq, norm.rows, norm.n, norm.eps)
				if err != nil {
					continue
				}
				fused[at], dropped[pos{i, j}] = f, true
			case l.Kernel == "rms_norm_block" || l.Kernel == "rms_norm_warp":
				norm, pending = parseNorm(l)
				at = pos{i, j}
			case pending:
				pending = leavesNormQ8X(l, norm.out, norm.outBytes())
			}
		}
	}
	if len(dropped) == 0 {
		return
	}
	for i, ls := range steps {
		var kept []Launch
		for j, l := range ls {
			if f, ok := fused[pos{i, j}]; ok {
				l = f
			}
			if !dropped[pos{i, j}] {
				kept = append(kept, l)
			}
		}
		steps[i] = kept
	}
}

// normLaunch is the arguments of an RMSNorm launch.
type normLaunch struct {
	xdt, odt  string
	out, x, w Ptr
	rows, n   int
	eps       float32
}

func (m normLaunch) outBytes() int64 { return int64(m.rows) * int64(m.n) * int64(dtypeSize(m.odt)) }

// parseNorm reads an rms_norm launch's arguments (rows, n, eps, x, w, out);
// it fails unless RMSNorm builds exactly that launch from them.
func parseNorm(l Launch) (normLaunch, bool) {
	a := l.Args
	if len(a) != 6 || len(l.DTypes) != 2 || a[0].Kind != ArgI32 || a[1].Kind != ArgI32 || a[2].Kind != ArgF32 ||
		a[3].Kind != ArgPtr || a[4].Kind != ArgPtr || a[5].Kind != ArgPtr {
		return normLaunch{}, false
	}
	m := normLaunch{xdt: l.DTypes[0], odt: l.DTypes[1], rows: int(a[0].Int), n: int(a[1].Int), eps: a[2].Float,
		x: a[3].Ptr(), w: a[4].Ptr(), out: a[5].Ptr()}
	want, err := RMSNorm(m.xdt, m.odt, m.out, m.x, m.w, m.rows, m.n, m.eps)
	return m, err == nil && reflect.DeepEqual(want, l)
}

// leavesNormQ8X reports whether l may run between a norm writing out
// [out, out+n) and the quantisation fused into it: a launch of the router
// (routerOutputs) with no pointer into the workspace whose outputs lie
// apart from out.
func leavesNormQ8X(l Launch, out Ptr, n int64) bool {
	for _, a := range l.Args {
		if (a.Kind == ArgPtr || a.Kind == ArgTMap) && a.Base == BaseWorkspace {
			return false
		}
	}
	writes, ok := routerOutputs(l)
	for _, w := range writes {
		ok = ok && !overlaps(out, n, w.at, w.n)
	}
	return ok
}

// routerOutputs is what a launch of a MoE router writes, read off its
// arguments as its builder lays them out (the routes where SelectionOf
// finds them):
//   - gemv (MatMul's GEMV: N, K, split, x, w, y, accumulate): y [R, N] of
//     DTypes[2], R its first integer parameter;
//   - router_topk or router_topk_block (RouterTopK: T, E, k, softcap,
//     scaling, logits, ld, bias, weights, ids): weights f32 and ids i32,
//     each [T, k];
//   - router_fused (RouterFused: E, K, split, x, w, logits, k, softcap,
//     scaling, bias, weights, ids, counter): logits f32 [R, E], R its
//     first integer parameter, weights f32 and ids i32, each [R, k], and
//     the counter (4 bytes);
//   - router_fused_shared (TopKShared: router_fused's, then S, first):
//     as router_fused, the weights and ids each [R, k+S];
//   - moe_add_shared (MoEAddShared: T, k, S, first, weights, ids, w2,
//     ids2): w2 f32 and ids2 i32, each [T, k+S].
//
// It fails for any other launch or one that does not read as stated.
func routerOutputs(l Launch) ([]span, bool) {
	a := l.Args
	is := func(kinds ...string) bool { return ArgKinds(a, kinds...) }
	const i, f, p, x = ArgI32, ArgF32, ArgPtr, ArgI64
	switch {
	case l.Kernel == "gemv" && is(i, i, i, p, p, p, i) && len(l.DTypes) == 3 && len(l.Ints) == 3:
		R, N, size := l.Ints[0], a[0].Int, int64(dtypeSize(l.DTypes[2]))
		return []span{{a[5].Ptr(), R * N * size}}, R > 0 && N > 0 && size > 0
	case l.Kernel == "router_topk" || l.Kernel == "router_topk_block" || l.Kernel == "router_fused" || l.Kernel == "router_fused_shared":
		sel, ok := SelectionOf(l)
		if !ok {
			return nil, false
		}
		routes := []span{{sel.W, 4 * sel.T * sel.Stride}, {sel.IDs, 4 * sel.T * sel.Stride}}
		if l.Kernel == "router_topk" || l.Kernel == "router_topk_block" {
			return routes, sel.T > 0 && sel.K > 0
		}
		E := a[0].Int
		return append(append([]span{{a[5].Ptr(), 4 * sel.T * E}}, routes...), span{a[12].Ptr(), 4}), sel.T > 0 && E > 0 && sel.K > 0
	case l.Kernel == "moe_add_shared" && is(i, i, i, i, p, p, p, p):
		T, k, S := a[0].Int, a[1].Int, a[2].Int
		return []span{{a[6].Ptr(), 4 * T * (k + S)}, {a[7].Ptr(), 4 * T * (k + S)}}, T > 0 && k >= 0 && S >= 0
	}
	return nil, false
}
