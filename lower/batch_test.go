package lower

import (
	"slices"
	"strings"
	"testing"

	"lagc/ir"
	"lagc/quant"
)

func TestBatchBuckets(t *testing.T) {
	for _, tc := range []struct {
		seqs, chunk int
		want        []int
	}{
		{1, 2048, []int{1}},
		{8, 2048, []int{1, 2, 4, 8}},
		{12, 2048, []int{1, 2, 4, 8, 16}},
		{64, 32, []int{1, 2, 4, 8, 16, 32}},
		{5, 4, []int{1, 2, 4}},
	} {
		if got := BatchBuckets(tc.seqs, tc.chunk); !slices.Equal(got, tc.want) {
			t.Errorf("BatchBuckets(%d, %d) = %v, want %v", tc.seqs, tc.chunk, got, tc.want)
		}
	}
}

// TestAtBatchKernels: a batched decode step at every bucket runs decode
// attention over its rows' slots, and by default only the row-invariant
// GEMV paths (never a GEMM, whose rounding differs); with BatchGEMM the
// buckets above GEMVMaxRows run GEMMs.
func TestAtBatchKernels(t *testing.T) {
	gemm := []string{"gemm_wgmma", "gemm_wgmma_q", "gemm_bf16", "gemm_simple", "moe_gateup_mma", "moe_down_mma"}
	prefillOnly := []string{"attn_prefill", "attn_prefill_tc", "kv_append", "kv_compact_ring"}
	for _, batchGEMM := range []bool{false, true} {
		p, err := Lower(tinyGraph(t), Options{DType: ir.BF16, MaxContext: 256, Chunk: 128, Seqs: 40, BatchGEMM: batchGEMM})
		if err != nil {
			t.Fatal(err)
		}
		if got := p.Bucket(33); got != 64 {
			t.Errorf("Bucket(33) = %d, want 64", got)
		}
		for _, b := range BatchBuckets(40, 128) {
			ls, err := p.AtBatch(b)
			if err != nil {
				t.Fatalf("AtBatch(%d): %v", b, err)
			}
			sawGEMM, attn := false, 0
			for _, step := range ls {
				for _, l := range step {
					if slices.Contains(prefillOnly, l.Kernel) {
						t.Errorf("batch %d (gemm %v): %s in a batched decode step", b, batchGEMM, l.Kernel)
					}
					sawGEMM = sawGEMM || slices.Contains(gemm, l.Kernel)
					if l.Kernel == "attn_decode" {
						attn++
						if !strings.Contains(l.String(), "seq+0") || l.Grid[2]%b != 0 {
							t.Errorf("batch %d: attention not over %d rows' slots: %s", b, b, l)
						}
						// A split one counts its blocks per row in BaseSync,
						// sized for the largest bucket.
						if nh, nkv := int(l.Args[0].Int), int(l.Args[1].Int); l.Grid[0] > 1 &&
							(l.Args[attnArgOut+3].Ptr() != (Ptr{BaseSync, 0}) || !l.Args[attnArgXQ].Ptr().Null() || p.Prefill.Sync < DecodeCounters(64, nh, nkv)) {
							t.Errorf("batch %d: counters of %d bytes for %s", b, p.Prefill.Sync, l)
						}
					}
				}
			}
			if attn == 0 {
				t.Errorf("batch %d: no decode attention", b)
			}
			if want := batchGEMM && b > GEMVMaxRows; sawGEMM != want {
				t.Errorf("batch %d (gemm %v): GEMM launched %v, want %v", b, batchGEMM, sawGEMM, want)
			}
		}
		if _, err := p.AtBatch(0); err == nil {
			t.Error("AtBatch(0) succeeded")
		}
		if _, err := p.AtBatch(129); err == nil {
			t.Error("AtBatch past the chunk succeeded")
		}
	}
	if _, err := Lower(tinyGraph(t), Options{MaxContext: 16, Seqs: MaxSeqs + 1}); err == nil {
		t.Errorf("%d sequence slots accepted", MaxSeqs+1)
	}
}

// TestDeviceBytes: a plan's device bytes count the weights, each sequence
// slot's KV caches, the ropes, the bf16 weight copies and the larger
// schedule's arena, workspace and routes, each aligned.
func TestDeviceBytes(t *testing.T) {
	p := &Plan{WeightBytes: 1000, KVBytes: 300, Seqs: 3, RopeBytes: 10, ShadowBytes: 4096,
		Decode:  &Schedule{Arena: 5000, Workspace: 1, Routes: 700},
		Prefill: &Schedule{Arena: 7000, Workspace: 9000, Routes: 2}}
	want := align(1000) + 3*align(300) + align(10) + align(4096) + align(7000) + align(9000) + align(700)
	if got := p.DeviceBytes(); got != want {
		t.Fatalf("DeviceBytes %d, want %d", got, want)
	}
}

// TestAtBatchSplitQGEMV: a quantised batched decode step's q, k, v and
// gate projection is one qgemv_split launch over the whole weight at every
// bucket up to QGEMVMaxRows (its outputs the step's, its shape the whole
// GEMV's), and one GEMV an output with Options.DisableSplitGEMM or more
// rows; QGEMVSplit refuses what it cannot write.
func TestAtBatchSplitQGEMV(t *testing.T) {
	for _, off := range []bool{false, true} {
		p, err := quantPlan(t, "laguna-s-2.1", 2, "q4_k_m", Options{DType: ir.BF16, MaxContext: 512, Chunk: 64, Seqs: 16, DisableSplitGEMM: off})
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range []int{1, 2, 8, 16} {
			ls, err := p.AtBatch(b)
			if err != nil {
				t.Fatal(err)
			}
			splits, gemvs := 0, 0
			for i, st := range p.Prefill.Steps {
				if st.Op != "matmul_split" {
					continue
				}
				for _, l := range ls[i] {
					switch l.Kernel {
					case "qgemv_split":
						splits++
						if l.Args[0].Int != 11336 && l.Args[0].Int != 8240 || l.Ints[1] != int64(b) {
							t.Errorf("batch %d: %s is not the whole q,k,v,gate GEMV of %d rows", b, l, b)
						}
						nw, split := QGEMVShape(int(l.Args[0].Int), 3072, b, false)
						if l.Ints[2] != int64(nw) || l.Ints[3] != int64(split) {
							t.Errorf("batch %d: %s, want the whole GEMV's shape %d, %d", b, l, nw, split)
						}
					case "qgemv":
						gemvs++
					}
				}
			}
			want := 2 * b2i(!off && b <= QGEMVMaxRows)
			if splits != want || (want > 0 && gemvs != 0) {
				t.Errorf("batch %d (split GEMM off %v): %d qgemv_split and %d qgemv launches, want %d split", b, off, splits, gemvs, want)
			}
		}
	}
	ok := QGEMVArgs{T: 2, K: 256, N: 30, XQ: Ptr{BaseWorkspace, 0}, W: Ptr{BaseWeights, 0}, WType: quant.Q8_0, WRows: 30, YType: "bf16"}
	outs := []SplitOut{{Ptr{BaseArena, 0}, 10}, {Ptr{BaseArena, 1 << 20}, 20}}
	if l, err := QGEMVSplit(ok, outs); err != nil || len(l.Args) != 14 || l.Args[10].Ptr() != (Ptr{}) || l.Args[12].Int != 30 {
		t.Errorf("QGEMVSplit: %v, %v", l, err)
	}
	for name, c := range map[string]struct {
		a    QGEMVArgs
		outs []SplitOut
	}{
		"columns short": {ok, outs[:1]},
		"no outputs":    {ok, nil},
		"five outputs":  {QGEMVArgs{T: 2, K: 256, N: 50, XQ: ok.XQ, W: ok.W, WType: quant.Q8_0, WRows: 50, YType: "bf16"}, append(outs, outs[1], outs[0], outs[0])},
		"null output":   {ok, []SplitOut{outs[0], {Ptr{}, 20}}},
		"swiglu":        {QGEMVArgs{T: 2, K: 256, N: 30, XQ: ok.XQ, W: ok.W, WType: quant.Q8_0, WRows: 60, YType: "bf16", SwiGLU: true}, outs},
		"nine rows":     {QGEMVArgs{T: 9, K: 256, N: 30, XQ: ok.XQ, W: ok.W, WType: quant.Q8_0, WRows: 30, YType: "bf16"}, outs},
		"unaligned xq":  {QGEMVArgs{T: 2, K: 256, N: 30, XQ: Ptr{BaseWorkspace, 4}, W: ok.W, WType: quant.Q8_0, WRows: 30, YType: "bf16"}, outs},
		"past the rows": {QGEMVArgs{T: 2, K: 256, N: 30, XQ: ok.XQ, W: ok.W, WType: quant.Q8_0, WRows: 20, YType: "bf16"}, outs},
		"accumulates":   {QGEMVArgs{T: 2, K: 256, N: 30, XQ: ok.XQ, W: ok.W, WType: quant.Q8_0, WRows: 30, YType: "bf16", Accumulate: true}, outs},
		"zero-wide out": {ok, []SplitOut{outs[0], {Ptr{BaseArena, 1 << 20}, 0}, outs[1]}},
	} {
		if _, err := QGEMVSplit(c.a, c.outs); err == nil {
			t.Errorf("%s: QGEMVSplit accepted it", name)
		}
	}
}

// TestBatchGEMVSplitsMatchDecode: every GEMV of a batched step (buckets 1
// to 16, S-2.1's first two layers, q4_k_m and bf16: the dense down's K
// 12288, a 72-head o_proj's K 9216, the q,k,v,gate weight) splits K as the
// decode schedule's GEMV over the same weight rows does (a bf16 one's
// q,k,v,gate as four GEMVs or, by default, as gemv_split), so it adds a
// row's sums in the same order and a batched row keeps the lone row's
// bits (the GPU checks the values: TestQGEMVRowsAloneGPU,
// TestBatchStepS21GPU). Before 2026-12-04 quantised buckets 5-8 split
// those two 2 ways where one row splits them 4, and a bf16 step's k, v
// and gate GEMVs (row blocks of the q,k,v,gate weight) split 8 ways where
// the decode schedule's one GEMV over the whole weight splits 1.
func TestBatchGEMVSplitsMatchDecode(t *testing.T) {
	type gemv struct {
		w        Ptr   // quantised: the tensor; float: the weights' base
		from, to int64 // quantised: rows; float: bytes
		split    int64
	}
	// read reads a GEMV launch: qgemv-family (N, K, rows, row0, w first;
	// the split among its integers) or matmul.cu's gemv (N, K, split, x,
	// w: N rows of K from w on).
	read := func(l Launch) (gemv, bool) {
		switch {
		case (l.Kernel == "gemv" || l.Kernel == "gemv_split") && l.File == "matmul.cu" && len(l.Args) >= 5 && l.Args[4].Ptr().Base == BaseWeights:
			w := l.Args[4].Ptr()
			n := l.Args[0].Int * l.Args[1].Int * int64(dtypeSize(l.DTypes[1]))
			return gemv{w: Ptr{BaseWeights, 0}, from: w.Offset, to: w.Offset + n, split: l.Args[2].Int}, true
		case strings.HasPrefix(l.Kernel, "qgemv") && len(l.Args) >= 5 && l.Args[4].Kind == ArgPtr && l.Args[4].Base == BaseWeights:
			i := 4
			if l.Kernel == "qgemv_split" {
				i = 3
			}
			if len(l.Ints) <= i {
				return gemv{}, false
			}
			return gemv{w: l.Args[4].Ptr(), from: l.Args[3].Int, to: l.Args[3].Int + l.Args[0].Int, split: l.Ints[i]}, true
		}
		return gemv{}, false
	}
	for _, c := range []struct {
		recipe     string
		floatSplit bool
	}{{"q4_k_m", false}, {"", false}, {"", true}} {
		recipe := c.recipe
		p, err := quantPlan(t, "laguna-s-2.1", 2, recipe, Options{DType: ir.BF16, Chunk: 64, MaxContext: 256, Seqs: 16, DisableFloatSplitGEMV: !c.floatSplit})
		if err != nil {
			t.Fatal(err)
		}
		var decode []gemv
		for _, st := range p.Decode.Steps {
			for _, l := range st.Launches {
				if g, ok := read(l); ok {
					decode = append(decode, g)
				}
			}
		}
		if len(decode) < 6 {
			t.Fatalf("%q: %d GEMVs in the decode schedule: %v", recipe, len(decode), decode)
		}
		compared, long := 0, 0
		for b := 1; b <= 16; b++ {
			ls, err := p.AtBatch(b)
			if err != nil {
				t.Fatal(err)
			}
			for _, step := range ls {
				for _, l := range step {
					g, ok := read(l)
					if !ok {
						continue
					}
					for _, d := range decode { // the decode GEMV over these rows
						if d.w != g.w || g.from < d.from || g.to > d.to {
							continue
						}
						compared++
						if g.split != d.split {
							t.Errorf("%q batch %d: %s splits %v [%d, %d) %d ways, the decode schedule %d",
								recipe, b, l.NameExpr(), g.w, g.from, g.to, g.split, d.split)
						}
						if g.split >= 4 {
							long++
						}
					}
				}
			}
		}
		if compared == 0 || (recipe != "" && long == 0) {
			t.Errorf("%q: %d GEMVs compared, %d splitting K 4 ways: the plan lacks the shapes this test is for", recipe, compared, long)
		}
	}
}

// TestAtBatchSplitGEMV: unless Options.DisableFloatSplitGEMV, a bf16 model's batched
// step (buckets 1-8) runs each layer's q, k, v and gate as one gemv_split
// over the whole weight, in the whole GEMV's shape; without it, or at 16
// rows (runs of 8), one gemv an output; GEMVSplitLaunch refuses what it
// cannot take.
func TestAtBatchSplitGEMV(t *testing.T) {
	for _, on := range []bool{false, true} {
		p, err := quantPlan(t, "laguna-s-2.1", 2, "", Options{DType: ir.BF16, Chunk: 64, MaxContext: 256, Seqs: 16, DisableFloatSplitGEMV: !on})
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range []int{1, 2, 5, 8, 16} {
			ls, err := p.AtBatch(b)
			if err != nil {
				t.Fatal(err)
			}
			splits := 0
			for _, step := range ls {
				for _, l := range step {
					if l.Kernel != "gemv_split" {
						continue
					}
					splits++
					N, K := int(l.Args[0].Int), int(l.Args[1].Int)
					if (N != 11336 && N != 8240) || K != 3072 || l.Ints[0] != int64(b) || l.Args[2].Int != int64(GEMVSplit(N, K, 2, 132)) ||
						l.Grid[0] != ceilDiv(N, 8/int(l.Args[2].Int)) {
						t.Errorf("batch %d: %s is not the whole q,k,v,gate GEMV of %d rows", b, l, b)
					}
				}
			}
			if want := 2 * b2i(on && b <= GEMVMaxRows); splits != want {
				t.Errorf("batch %d (gemv_split %v): %d gemv_split launches, want %d", b, on, splits, want)
			}
		}
	}
	p := Ptr{BaseArena, 0}
	ok := MatMulArgs{T: 2, K: 256, N: 30, X: p, W: Ptr{BaseWeights, 0}, XType: "bf16", WType: "bf16", YType: "bf16"}
	outs := []SplitOut{{Ptr{BaseArena, 1 << 20}, 10}, {Ptr{BaseArena, 2 << 20}, 20}}
	if l, err := GEMVSplitLaunch(ok, outs); err != nil || len(l.Args) != 12 || l.Args[8].Ptr() != (Ptr{}) || l.Args[10].Int != 30 {
		t.Errorf("GEMVSplitLaunch: %v, %v", l, err)
	}
	with := func(f func(*MatMulArgs)) MatMulArgs { a := ok; f(&a); return a }
	for name, c := range map[string]struct {
		a    MatMulArgs
		outs []SplitOut
	}{
		"columns short": {ok, outs[:1]},
		"no outputs":    {ok, nil},
		"five outputs":  {ok, []SplitOut{outs[0], outs[0], outs[0], outs[0], outs[0]}},
		"a null output": {ok, []SplitOut{outs[0], {Ptr{}, 20}}},
		"an empty one":  {ok, []SplitOut{outs[0], {outs[1].Y, 0}, outs[1]}},
		"nine rows":     {with(func(a *MatMulArgs) { a.T = 9 }), outs},
		"SwiGLU":        {with(func(a *MatMulArgs) { a.SwiGLU = true }), outs},
		"accumulating":  {with(func(a *MatMulArgs) { a.Accumulate = true }), outs},
		"a q8_0 weight": {with(func(a *MatMulArgs) { a.WType = "q8_0" }), outs},
		"no x":          {with(func(a *MatMulArgs) { a.X = Ptr{} }), outs},
	} {
		if _, err := GEMVSplitLaunch(c.a, c.outs); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
