package gpu

import (
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"lagc/cuda"
	"lagc/ir"
	"lagc/lower"
	"lagc/quant"
)

// EnvRequireNVRTC makes TestPlanKernelsCompile fail instead of skipping
// where NVRTC cannot be loaded.
const EnvRequireNVRTC = "LAGC_REQUIRE_NVRTC"

// LAGC_DUMP_CUBIN=DIR makes TestPlanKernelsCompile write the cubin of each
// instantiation whose file:name<args> matches LAGC_DUMP_CUBIN_MATCH (a
// regexp; default all) into DIR, for nvdisasm: a kernel's SASS without a GPU.
// LAGC_COMPILE_MATCH (a regexp) compiles only the matching instantiations:
// a quick check of one kernel while it is being written.
var (
	dumpDir   = os.Getenv("LAGC_DUMP_CUBIN")
	dumpRe    = regexp.MustCompile(os.Getenv("LAGC_DUMP_CUBIN_MATCH"))
	compileRe = regexp.MustCompile(os.Getenv("LAGC_COMPILE_MATCH"))
)

func dumpCubin(t *testing.T, dir, key string, cubin []byte) {
	name := strings.Map(func(r rune) rune {
		if r == '_' || r == '-' || r == '.' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' {
			return r
		}
		return '_'
	}, key)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".cubin"), cubin, 0o644); err != nil {
		t.Fatal(err)
	}
}

// needNVRTC skips t where NVRTC cannot be loaded, or fails it under
// EnvRequireNVRTC=1.
func needNVRTC(t *testing.T) {
	t.Helper()
	if _, err := cuda.NVRTCVersion(); err != nil {
		if os.Getenv(EnvRequireNVRTC) == "1" {
			t.Fatalf("%s=1 but NVRTC is unavailable: %v", EnvRequireNVRTC, err)
		}
		t.Skipf("no NVRTC (scripts/nvrtc-local.sh installs one): %v", err)
	}
}

// eachPlanStep calls fn with the launches of every trace model's plan
// (bf16 and f32) at the steps the plan tests walk: the decode and prefill
// schedules at each of lengths that fits (0: the schedule's Tokens), batch
// 0, then the batched decode steps of 2 and 8 rows.
func eachPlanStep(t *testing.T, lengths []int, fn func(model string, batch int, all [][]lower.Launch)) {
	t.Helper()
	for _, m := range traceModels {
		for _, dt := range []ir.DType{ir.BF16, ir.F32} {
			p := tracePlan(t, m, dt)
			for _, sch := range []*lower.Schedule{p.Decode, p.Prefill} {
				for _, T := range lengths {
					if T == 0 {
						T = sch.Tokens
					}
					if T < 1 || T > sch.Tokens {
						continue
					}
					all, err := p.At(sch, T)
					if err != nil {
						t.Fatal(err)
					}
					fn(m.name, 0, all)
				}
			}
			for _, b := range []int{2, 8} {
				all, err := p.AtBatch(b)
				if err != nil {
					t.Fatal(err)
				}
				fn(m.name, b, all)
			}
		}
	}
}

// TestPlanKernelsCompile compiles, with NVRTC alone (no driver or device
// needed: scripts/nvrtc-local.sh puts one on a machine without a GPU),
// every kernel instantiation the trace models' plans launch, batched
// decode steps included (and the fused norm forms and opt-in fusions'
// attentions they do not), for sm_90a, and reports spills: a kernel source that does not compile fails here
// before it reaches a GPU.
func TestPlanKernelsCompile(t *testing.T) {
	needNVRTC(t)
	specs := map[string]lower.Launch{}
	// Every launch's argument kinds, by instantiation: checked against the
	// kernel's parameters in the cubin (a launch the driver would refuse).
	kinds := map[string]map[string]bool{}
	add := func(l lower.Launch) {
		key := l.File + ":" + l.NameExpr()
		specs[key] = l
		if kinds[key] == nil {
			kinds[key] = map[string]bool{}
		}
		kinds[key][argKinds(l.Args)] = true
	}
	addAll := func(all [][]lower.Launch) {
		for _, ls := range all {
			for _, l := range ls {
				if l.Kernel != lower.Memcpy {
					add(l)
				}
			}
		}
	}
	eachPlanStep(t, []int{0, 1, 37}, func(_ string, batch int, all [][]lower.Launch) {
		addAll(all)
		if batch == 0 {
			return
		}
		// The attention of the opt-in fuseRowsKNormRoPEAttention, which
		// batched steps would take.
		var flat []lower.Launch
		for _, ls := range all {
			flat = append(flat, ls...)
		}
		for i := 0; i+1 < len(flat); i++ {
			if f, err := lower.NormKRoPEAttentionRows(flat[i], flat[i+1]); err == nil {
				add(f)
			}
		}
	})
	// Norms fused with the quantisation (and the residual add) in forms no
	// trace model launches: the warp kernel (rows under 1024 values) and
	// the casts.
	for _, n := range []int{256, 3072} {
		for _, dts := range [][2]string{{"bf16", "bf16"}, {"f32", "f32"}, {"f32", "bf16"}, {"bf16", "f32"}} {
			l, err := lower.RMSNormQ8X(dts[0], dts[1], lower.Ptr{Base: lower.BaseArena}, lower.Ptr{Base: lower.BaseArena, Offset: 1 << 20},
				lower.Ptr{Base: lower.BaseWeights}, lower.Ptr{Base: lower.BaseWorkspace}, 1, n, 1e-6)
			if err != nil {
				t.Fatal(err)
			}
			add(l)
			// After the residual add too (AddRMSNorm, AddRMSNormQ8X).
			arena := func(mib int64) lower.Ptr { return lower.Ptr{Base: lower.BaseArena, Offset: mib << 20} }
			w, xq := lower.Ptr{Base: lower.BaseWeights}, lower.Ptr{Base: lower.BaseWorkspace}
			addN, err := lower.AddRMSNorm(dts[0], dts[1], arena(2), arena(1), arena(0), arena(3), w, 1, n, 1e-6)
			if err != nil {
				t.Fatal(err)
			}
			addQ, err := lower.AddRMSNormQ8X(dts[0], dts[1], arena(2), arena(1), arena(0), arena(3), w, xq, 1, n, 1e-6)
			if err != nil {
				t.Fatal(err)
			}
			add(addN)
			add(addQ)
		}
	}
	for _, l := range unplannedLaunches(t) {
		add(l)
	}
	keys := make([]string, 0, len(specs))
	for k := range specs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	keys = slices.DeleteFunc(keys, func(k string) bool { return !compileRe.MatchString(k) })
	// NVRTC compiles independent programs concurrently (it is thread
	// safe, each compile its own program): compileJobs of them at once,
	// the results then reported in key order as a sequential loop would.
	type result struct {
		c   cuda.Compiled
		err error
	}
	results := make([]result, len(keys))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(compileJobs(t), len(keys)) {
		wg.Go(func() {
			for i := range next {
				results[i].c, results[i].err = compileSpec(specs[keys[i]])
			}
		})
	}
	for i := range keys {
		next <- i
	}
	close(next)
	wg.Wait()
	for i, key := range keys {
		c, err := results[i].c, results[i].err
		if err != nil {
			t.Errorf("%s: %v", key, err)
			continue
		}
		if dumpDir != "" && dumpRe.MatchString(key) {
			dumpCubin(t, dumpDir, key, c.Cubin)
		}
		params, err := cuda.CubinParamSizes(c.Cubin, c.Lowered)
		if err != nil {
			t.Errorf("%s: %v", key, err)
		} else {
			for ks := range kinds[key] {
				if got := argSizes(ks); !slices.Equal(got, params) {
					t.Errorf("%s: a launch passes arguments of %v bytes (%s), the kernel takes %v", key, got, ks, params)
				}
			}
		}
		for _, line := range strings.Split(c.Log, "\n") {
			switch {
			case strings.Contains(line, "wgmma.mma_async instructions are serialized"):
				// ptxas serialised a kernel's wgmma (C7513, C7514, ... name
				// the reason): every MMA waits for the one before, a kernel
				// that compiles but runs slow.
				t.Errorf("%s: %s", key, strings.TrimSpace(line))
			case strings.Contains(line, "spill stores") && !strings.Contains(line, " 0 bytes spill stores"):
				t.Logf("%s: %s", key, strings.TrimSpace(line))
			case os.Getenv("LAGC_COMPILE_LOG") != "" && strings.Contains(line, "registers"):
				t.Logf("%s: %s", key, strings.TrimSpace(line))
			}
		}
	}
	t.Logf("%d instantiations compiled", len(keys))
}

// LAGC_COMPILE_JOBS bounds TestPlanKernelsCompile's concurrent NVRTC
// compiles (default GOMAXPROCS; 1: one at a time).
const envCompileJobs = "LAGC_COMPILE_JOBS"

// compileJobs is how many instantiations TestPlanKernelsCompile compiles
// at once.
func compileJobs(t *testing.T) int {
	v := os.Getenv(envCompileJobs)
	if v == "" {
		return runtime.GOMAXPROCS(0)
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a count of at least 1", envCompileJobs, v)
	}
	return n
}

// compileSpec compiles l's instantiation for sm_90a with ptxas's
// register and spill report.
func compileSpec(l lower.Launch) (cuda.Compiled, error) {
	return compileLaunch(l, "sm_90a", "--ptxas-options=-v")
}

// argKinds is a launch's argument kinds, space-separated.
func argKinds(args []lower.Arg) string {
	ks := make([]string, len(args))
	for i, a := range args {
		ks[i] = a.Kind
	}
	return strings.Join(ks, " ")
}

// argSizes is the sizes in bytes of the parameters argKinds names, as
// Bind passes them (a TMA map is a 128-byte CUtensorMap).
func argSizes(ks string) []int {
	size := map[string]int{lower.ArgPtr: 8, lower.ArgI32: 4, lower.ArgI64: 8, lower.ArgU32: 4, lower.ArgF32: 4, lower.ArgTMap: 128}
	var out []int
	for _, k := range strings.Fields(ks) {
		out = append(out, size[k])
	}
	return out
}

// unplannedLaunches are instantiations no traced plan reaches: the router
// at every experts-per-lane count and past the warp kernel's limits, the
// argmax split over several parts, the float-activation GEMV, the GEMV
// quantising its activations, the fused router of several rows and of the
// scalar GEMV, the decode attention's forced key loops, in both activation
// dtypes.
func unplannedLaunches(t *testing.T) []lower.Launch {
	p := lower.DevicePtr(256)
	var out []lower.Launch
	// Synthetic weights (the executor's, benchmarks'), and embedding tables
	// read quantised (the trace models' are q4_k and iq4_xs): every type.
	for _, qt := range lower.QuantKernelTypes {
		l, err := lower.QSynth(qt, p, 64, 512, 1)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, l)
		for _, dt := range []string{"f32", "bf16"} {
			e, err := lower.QEmbedding(qt, dt, p, p, p, 3, 64, 512)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, e)
		}
	}
	for _, dt := range []string{"f32", "bf16"} {
		for _, c := range []struct{ E, k int }{{8, 2}, {64, 8}, {128, 8}, {256, 10}, {512, 8}, {1024, 32}, {1500, 12}, {256, 33}} {
			l, err := lower.RouterTopK(dt, p, p, p, p, 3, c.E, c.k, 0, 1)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, l)
		}
		for _, c := range []struct{ T, K int }{{1, 3072}, {1, 1000}, {3, 3072}, {8, 1000}} {
			g, err := lower.MatMul(lower.MatMulArgs{T: c.T, K: c.K, N: 256, X: p, W: p, Y: p, XType: dt, WType: dt, YType: "f32", SMs: 132})
			if err != nil {
				t.Fatal(err)
			}
			r, err := lower.RouterTopK("f32", p.At(1<<20), p.At(2<<20), p, p, c.T, 256, 10, 0, 1)
			if err != nil {
				t.Fatal(err)
			}
			l, err := lower.RouterFused(g, r, p)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, l)
			// and with the shared expert's route appended (fuseTopKShared)
			sh, err := lower.TopKShared(l, lower.MoEAddShared(c.T, 10, 1, 256, p.At(1<<20), p.At(2<<20), p.At(3<<20), p.At(4<<20)))
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, sh)
		}
		// gemv_split at other row counts than the trace models' buckets.
		for _, T := range []int{1, 2, 5, 8} {
			outs := []lower.SplitOut{{Y: p, N: 9216}, {Y: p, N: 1024}, {Y: p, N: 1024}, {Y: p, N: 72}}
			l, err := lower.GEMVSplitLaunch(lower.MatMulArgs{T: T, K: 3072, N: 11336, X: p, W: p, XType: dt, WType: dt, YType: dt, SMs: 132}, outs)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, l)
		}
		// The decode attention's forced key loops (TestAttentionDecodeStagesGPU,
		// TestAttentionDecodeMMAGPU): rings of 2, 3 and 8 tiles, and the
		// tensor-core form, without the fused norm (NR 0).
		for _, f := range []struct{ stages, mma int }{{2, 1}, {3, 1}, {8, 1}, {0, 2}} {
			cache := lower.Cache{K: p, V: p, NKV: 8, HeadDim: 128, Slots: 4096}
			ls, err := lower.AttentionDecode(lower.AttentionDecodeArgs{DType: dt, Cache: cache, Out: p, Q: p, Pos: p, NH: 48, Scale: 1,
				Workspace: p, Counters: p, Stages: f.stages, MMA: f.mma, SMs: 132})
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, ls...)
		}
		ls, err := lower.ArgMax(dt, p, p, p, 1, 100352, 132)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, ls...)
		// The float-activation GEMV (benchmarks and its test only).
		for _, qt := range []quant.Type{quant.Q8_0, quant.Q4_K} {
			l, err := lower.QGEMVFX(qt, 1, 3072, 64, 64, p, p, p, dt, "bf16")
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, l)
		}
		// The GEMV quantising its activations, of the types and shapes no
		// trace model plans it for (TestQGEMVXInGPU).
		for _, qt := range lower.QuantKernelTypes {
			T, K, swiglu := 1, 1024, false
			if dt == "f32" {
				T, K, swiglu = 4, 512, true
			}
			a := lower.QGEMVArgs{T: T, K: K, N: 64, W: p, Y: lower.DevicePtr(1 << 20), WType: qt, WRows: 128, YType: "bf16", SwiGLU: swiglu}
			l, err := lower.QGEMVXIn(a, p, dt)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, l)
		}
		// The persistent GEMV chain at its benchmark's shapes
		// (TestPersistQGEMVChainGPU, BenchmarkPersistBoundary), once.
		if dt == "bf16" {
			for _, nk := range [][2]int{{1024, 2048}, {2048, 2048}} {
				a := lower.PersistChainArgs{X: p, Table: p, Counters: p, Grid: 132, GEMVs: []lower.QGEMVArgs{
					{T: 1, K: nk[1], N: nk[0], W: p, Y: lower.DevicePtr(1 << 20), WType: quant.Q8_0, WRows: nk[0], YType: "bf16"},
					{T: 1, K: nk[0], N: nk[1], W: p, Y: lower.DevicePtr(2 << 20), WType: quant.Q8_0, WRows: nk[1], YType: "bf16"}}}
				for _, pre := range []bool{false, true} {
					a.Prefetch = pre
					l, err := lower.PersistQGEMVChain(a)
					if err != nil {
						t.Fatal(err)
					}
					out = append(out, l)
				}
			}
		}
		// The routed experts as each type chooses (the trace models hold
		// q4_k and iq4_xs only), with two rounds in registers, with ten
		// down units a lane, on 8 warps a block, and through shared memory
		// (gate+up's ring, down's units all at once: BenchmarkQMoE,
		// TestQMoEBatchBitsGPU), every type.
		for _, qt := range lower.QuantKernelTypes {
			const E, H, I = 16, 1024, 512
			for _, f := range []lower.QMoEForce{{}, {GateUpStages: 1}, {DownUnits: 10}, {GateUpRows: 8, GateUpWarps: 8, DownRows: 1, DownUnits: 8, DownWarps: 8}} {
				ls, err := lower.QMoE(lower.QMoEArgs{T: 1, H: H, I: I, E: E, TopK: 4, X: p, XType: dt, Weights: p, IDs: p,
					Gate: lower.QMatrix{W: p, Total: 2 * E * I}, Up: lower.QMatrix{W: p, Total: 2 * E * I, Row0: E * I},
					Down: lower.QMatrix{W: p, Total: E * H}, WType: qt, Out: p, OutType: dt, Workspace: p, QMoEForce: f})
				if err != nil {
					t.Fatal(err)
				}
				out = append(out, ls[1:]...)
			}
			// and gate+up's units through shared memory
			ls, err = lower.QMoE(lower.QMoEArgs{T: 1, H: H, I: I, E: E, TopK: 4, X: p, XType: dt, Weights: p, IDs: p,
				Gate: lower.QMatrix{W: p, Total: 2 * E * I}, Up: lower.QMatrix{W: p, Total: 2 * E * I, Row0: E * I},
				Down: lower.QMatrix{W: p, Total: E * H}, WType: qt, Out: p, OutType: dt, Workspace: p, QMoEForce: lower.QMoEForce{GateUpRows: 4,
					GateUpStages: 3, DownAll: true}})
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, ls[1:]...)
		}
		// GEMVs ending with the norm of their y (TestQGEMVNormGPU): a warp
		// norm, a plain block one, an add of another output dtype.
		for _, c := range gemvNormCases {
			g, n, err := c.launches(lower.DevicePtr(1<<20), lower.DevicePtr(2<<20), lower.DevicePtr(3<<20), lower.DevicePtr(4<<20),
				lower.DevicePtr(5<<20), lower.DevicePtr(6<<20), lower.DevicePtr(7<<20), lower.DevicePtr(8<<20), dt)
			if err != nil {
				t.Fatal(err)
			}
			l, err := lower.QGEMVNorm(g, n, lower.DevicePtr(9<<20))
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, l)
		}
	}
	// The quantised grouped GEMMs on narrower token tiles (QMoEForce's
	// rows; TestMoEExpertsQuantGPU), as chosen, with MMAs of the whole
	// tile or other steps of width (TestMoEExpertsQuantGPU's whole/ and vn
	// cases), the plain loop where the pipelined one is the default (its
	// nopipe/ case) and the pipelined one forced (pipe/: 128 rows and two
	// warpgroups, 64, and with the whole tile's MMAs), and the other
	// operand type (bf16ops/: on bf16 rather than f16).
	for _, qt := range lower.HopperQTypes {
		for _, f := range []lower.QMoEForce{{TileRows: 64}, {TileRows: 96}, {TileRows: 64, CTAs: 2}, {TileRows: 96, CTAs: 2},
			{TileRows: 96, CTAs: 1, WGs: 4}, {TileRows: 64, CTAs: 1, WGs: 4}, {}, {WholeTile: true},
			{TileRows: 128, CTAs: 1, WGs: 2, TokenStep: 8}, {TileRows: 96, CTAs: 2, TokenStep: 32},
			{NoPipe: true}, {TileRows: 128, Pipe: true}, {WGs: 2, Pipe: true}, {TileRows: 64, Pipe: true}, {WholeTile: true, Pipe: true},
			{BF16Ops: true}, {BF16Ops: true, WholeTile: true, Pipe: true},
			{TileRows: 112}, {TileRows: 112, TokenStep: 8}, {TileRows: 112, WholeTile: true}} {
			E, H, I := 8, 256, 256
			a := lower.MoEArgs{T: 100, H: H, I: I, E: E, TopK: 2, X: p, Weights: p, IDs: p, Out: p, Workspace: p,
				XType: "bf16", WType: qt.String(), OutType: "bf16", CC: 90, SMs: 132,
				QGate: lower.QMatrix{W: p, Total: 2 * E * I}, QUp: lower.QMatrix{W: p, Total: 2 * E * I, Row0: E * I},
				QDown: lower.QMatrix{W: p, Total: E * H}, QMoE: f}
			ls, err := lower.MoE(a)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, ls...)
		}
	}
	// q6_k and q5_k stacks on gemm_wgmma_q (TestMoEQ6KGPU), in each shape
	// the others take, on f16 and on bf16 operands.
	for _, pair := range q6kPairs {
		for _, f := range q6kForces {
			E, H, I := 8, 256, 512
			ls, err := lower.MoE(lower.MoEArgs{T: 100, H: H, I: I, E: E, TopK: 2, X: p, Weights: p, IDs: p, Out: p, Workspace: p,
				XType: "bf16", WType: pair[0].String(), DownType: pair[1].String(), OutType: "bf16", CC: 90, SMs: 132,
				QGate: lower.QMatrix{W: p, Total: 2 * E * I}, QUp: lower.QMatrix{W: p, Total: 2 * E * I, Row0: E * I},
				QDown: lower.QMatrix{W: p, Total: E * H}, QMoE: f})
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, ls...)
		}
	}
	// Two quantised GEMVs as one launch (fuseQGEMVPair, opt-in;
	// TestQGEMVPairGPU's pairs).
	for _, pc := range qgemvPairCases {
		var ls []lower.Launch
		for i, sd := range []qgemvSide{pc.a, pc.b} {
			c := sd.c
			rows := c.N
			if c.swiglu {
				rows *= 2
			}
			l, err := lower.QGEMV(lower.QGEMVArgs{T: c.T, K: c.K, N: c.N, XQ: p, W: p, Y: p.At(int64(i+1) << 24), WType: sd.qt, WRows: rows,
				YType: c.y.String(), SwiGLU: c.swiglu, Accumulate: c.acc, RowsPerWarp: c.nw, Split: c.split})
			if err != nil {
				t.Fatal(err)
			}
			ls = append(ls, l)
		}
		pr, err := lower.QGEMVPair(ls[0], ls[1])
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, pr)
	}
	// The bf16 grouped experts on gemm_wgmma_q (QMoEForce.BF16;
	// TestMoEExpertsHopperGPU's q cases).
	for _, f := range []lower.QMoEForce{{BF16: true}, {BF16: true, TileRows: 64}, {BF16: true, TileRows: 112}, {BF16: true, TileRows: 128}, {BF16: true, WGs: 2},
		{BF16: true, Pipe: true}} {
		E, H, I := 8, 256, 256
		ls, err := lower.MoE(lower.MoEArgs{T: 100, H: H, I: I, E: E, TopK: 2, X: p, Weights: p, IDs: p, Out: p, Workspace: p,
			Gate: p, Up: p.At(2 * int64(E*I*H)), Down: p, XType: "bf16", WType: "bf16", OutType: "bf16", CC: 90, SMs: 132, QMoE: f})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, ls...)
	}
	// The mma.sync prefill attention at head_dim 128 where Hopper plans
	// the wgmma one (LAGC_PREFILL_ATTN=tc; TestAttentionPrefillTCGPU).
	att, err := lower.AttentionPrefill(lower.AttentionPrefillArgs{DType: "bf16", Cache: lower.Cache{NKV: 8, HeadDim: 128, Slots: 4096,
		K: p, V: p}, Out: p, Q: p, K: p, V: p, Pos: p, T: 100, NH: 48, Scale: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	if att.Kernel != "attn_prefill_tc" {
		t.Fatalf("AttentionPrefill without Wgmma chose %s", att.Kernel)
	}
	out = append(out, att)
	// The split GEMMs (lower.MatMulArgs.Split; TestMatMulHopperSplitGPU) in
	// both output dtypes, tile widths and schedules.
	for _, yt := range []string{"f32", "bf16"} {
		for _, v := range []struct {
			bn    int
			sched lower.HopperSched
		}{{128, lower.SchedCooperative}, {256, lower.SchedCooperative}, {128, lower.SchedPingPong}} {
			l, err := lower.MatMul(lower.MatMulArgs{T: 300, K: 256, N: 600, X: p, W: p, XType: "bf16", WType: "bf16", YType: yt,
				SMs: 132, CC: 90, HopperBN: v.bn, HopperSched: v.sched, Split: []lower.SplitOut{{Y: p, N: 512}, {Y: p, N: 88}}})
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, l)
		}
	}
	// attn_prefill_tc at head_dim 64 and with rows not 16-byte aligned
	// (VEC 0; TestAttentionPrefillTCGPU's fused and d64 cases).
	for _, c := range []struct{ d, ld int }{{64, 0}, {64, 8*64 + 4}, {128, 8*128 + 4}} {
		att, err = lower.AttentionPrefill(lower.AttentionPrefillArgs{DType: "bf16", Cache: lower.Cache{NKV: 2, HeadDim: c.d, Slots: 4096,
			K: p, V: p}, Out: p, Q: p, K: p, V: p, Pos: p, T: 100, NH: 8, Scale: 0.1, LDQ: c.ld, LDKV: c.ld})
		if err != nil || att.Kernel != "attn_prefill_tc" {
			t.Fatalf("AttentionPrefill at d %d, ld %d: %s, %v", c.d, c.ld, att.Kernel, err)
		}
		out = append(out, att)
	}
	// attn_prefill_wg's variants (WgCTAs, WgRows, WgStages; the tests check and time each).
	for _, v := range wgVariants {
		att, err = lower.AttentionPrefill(v.with(lower.AttentionPrefillArgs{DType: "bf16", Cache: lower.Cache{NKV: 8, HeadDim: 128, Slots: 4096,
			K: p, V: p}, Out: p, Q: p, K: p, V: p, Pos: p, T: 100, NH: 48, Scale: 0.1, Wgmma: true, CC: 90}))
		if err != nil || att.Kernel != "attn_prefill_wg" {
			t.Fatalf("AttentionPrefill with variant %s: %s, %v", v.name(), att.Kernel, err)
		}
		// and its instantiation doing the q heads' norm and rotation (NR 1,
		// lower.PrefillNormRoPEAttention; TestPrefillNormRoPEAttentionGPU).
		nr := att
		nr.Ints = append(append([]int64(nil), att.Ints[:3]...), 1)
		out = append(out, att, nr)
	}
	// The bf16 grouped experts with the down GEMM ping-pong (HopperDown;
	// TestMoEExpertsHopperGPU, BenchmarkMoEExperts), kept on gemm_wgmma
	// (NoBF16: 25 routes an expert would otherwise take gemm_wgmma_q).
	ls, err := lower.MoE(lower.MoEArgs{T: 100, H: 256, I: 256, E: 8, TopK: 2, X: p, Weights: p, IDs: p, Out: p, Workspace: p,
		Gate: p, Up: p.At(2 * 8 * 256 * 256), Down: p, XType: "bf16", WType: "bf16", OutType: "bf16", CC: 90, SMs: 132,
		HopperDown: lower.SchedPingPong, QMoE: lower.QMoEForce{NoBF16: true}})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, l := range ls {
		names = append(names, l.NameExpr())
	}
	if !slices.Contains(names, "gemm_wgmma<bf16_t, 128, 0, 1, 1, 0>") {
		t.Fatalf("the ping-pong down entry plans %v, not gemm_wgmma's ping-pong down", names)
	}
	return append(out, ls...)
}
