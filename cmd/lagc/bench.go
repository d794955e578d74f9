package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"lagc/ckpt"
	"lagc/config"
	"lagc/cuda"
	"lagc/engine"
	"lagc/exec/gpu"
	"lagc/exec/routes"
	"lagc/ir"
	"lagc/lower"
	"lagc/models"
	"lagc/passes"
)

func init() {
	register(&command{
		name:    "bench",
		summary: "decode and prefill speed: GPU (synthetic weights of a preset's shapes, or a checkpoint) or CPU",
		usage:   "bench (--preset NAME --synthetic | --model CKPT) [--layers N] [--json] [flags]\n       lagc bench --device cpu [--model CKPT] [--threads N] [--json] [flags]",
		setup:   setupBench,
	})
}

type benchFlags struct {
	preset, model, prefill, dtype string
	device                        string
	threads                       int
	profile                       string
	passes, disable               string
	synthetic, jsonOut            bool
	quant                         string
	tensorTypes                   tensorTypes
	layers, runs, tokens, ctx     int
	chunk                         int
	bw                            float64
	seed                          uint64
	weightCache                   weightCacheFlag
	batch                         string
	batchGEMM                     bool
}

func setupBench(fs *flag.FlagSet) func([]string) error {
	f := benchFlagSet(fs)
	return func(args []string) error {
		if len(args) != 0 {
			return fmt.Errorf("%w: bench takes no arguments", errUsage)
		}
		switch f.device {
		case "cpu":
			if f.batch != "" {
				return fmt.Errorf("%w: --batch times batched GPU decode; the CPU's batching is measured by lagc serve's load tests", errUsage)
			}
			prefillSet := false
			fs.Visit(func(fl *flag.Flag) { prefillSet = prefillSet || fl.Name == "prefill" })
			return runCPUBench(os.Stdout, f, prefillSet)
		case "cuda":
			return runBench(os.Stdout, f)
		}
		return fmt.Errorf("%w: --device %q: expected cuda or cpu", errUsage, f.device)
	}
}

// benchFlagSet defines bench's flags on fs.
func benchFlagSet(fs *flag.FlagSet) *benchFlags {
	f := &benchFlags{}
	fs.StringVar(&f.preset, "preset", "", "model shape by name: "+strings.Join(config.PresetNames(), ", "))
	fs.BoolVar(&f.synthetic, "synthetic", false, "random weights of the preset's shapes, made on the GPU (required with --preset)")
	fs.StringVar(&f.model, "model", "", "a checkpoint to bench with its real weights instead")
	fs.IntVar(&f.layers, "layers", 0, "bench only the first N layers (0: all); results are also scaled to the full depth")
	fs.StringVar(&f.dtype, "dtype", "bf16", "activations and weights: bf16 or f32")
	fs.StringVar(&f.quant, "quant", "", "with --synthetic: weights in a quantisation recipe or type (q4_k_m, q8_0, q4_k, ...), as lagc convert --quant stores them")
	fs.Var(&f.tensorTypes, "tensor-type", "with --synthetic --quant: "+tensorTypeDoc)
	fs.IntVar(&f.runs, "runs", 5, "runs of each measurement; the median is reported")
	fs.IntVar(&f.tokens, "decode-tokens", 64, "decode steps per run")
	fs.IntVar(&f.ctx, "ctx", 512, "context (tokens prefilled) before the decode steps")
	fs.StringVar(&f.prefill, "prefill", "512,2048,8192", "prefill lengths to time, comma-separated")
	fs.IntVar(&f.chunk, "chunk", lower.DefaultChunk, "prefill chunk size")
	fs.Float64Var(&f.bw, "bw", 0, "memory bandwidth of the roofline, bytes/s (0: 4.3e12, an H200 copy's rate, scaled on other GPUs by their peak memory bandwidth against the H200's)")
	fs.Uint64Var(&f.seed, "seed", 1, "seed of the random token ids")
	fs.BoolVar(&f.jsonOut, "json", false, "print one JSON object instead of tables")
	fs.StringVar(&f.passes, "passes", "", "comma-separated pass pipeline (default: the standard one, with every fusion)")
	fs.StringVar(&f.disable, "disable-pass", "", "comma-separated passes to skip, e.g. qkvg-concat,gate-up-fuse")
	fs.StringVar(&f.profile, "profile", "", "write the profiled decode and prefill-2048 runs' kernel times to FILE (pprof)")
	fs.StringVar(&f.device, "device", "cuda", "cuda, or cpu: the reference executor on a checkpoint (default the bundled model)")
	fs.IntVar(&f.threads, "threads", 0, "CPU only: goroutines per kernel (0: GOMAXPROCS)")
	addWeightCacheFlag(fs, &f.weightCache)
	fs.StringVar(&f.batch, "batch", "", "time batched decode instead: aggregate throughput at these batch sizes (e.g. 1,8,32,64), one sequence slot per row")
	fs.BoolVar(&f.batchGEMM, "batch-gemm", false, "with --batch: batches above 8 rows run the GEMMs (rows then round differently by batch size)")
	return f
}

// benchReport is what `lagc bench` measures; --json prints it.
type benchReport struct {
	Model       string   `json:"model"`
	Weights     string   `json:"weights"`       // synthetic or the checkpoint path
	Passes      []string `json:"passes"`        // the pass pipeline that ran
	Kernels     int      `json:"graph_kernels"` // graph nodes that launch work (reshape views excluded)
	DType       string   `json:"dtype"`
	Layers      int      `json:"layers"`
	FullLayers  int      `json:"full_layers"`
	Chunk       int      `json:"chunk"`
	Context     int      `json:"decode_context"`
	Runs        int      `json:"runs"`
	Device      string   `json:"device"`
	WeightBytes int64    `json:"weight_bytes"`
	// The memory plan: weights at full depth (estimated from the benched
	// layers), KV caches at the bench's context, the activation arena and
	// scratch of the larger schedule.
	WeightBytes48  int64 `json:"weight_bytes_full_depth"`
	KVBytes        int64 `json:"kv_bytes"`
	ArenaBytes     int64 `json:"arena_bytes"`
	WorkspaceBytes int64 `json:"workspace_bytes"`
	// CublasLtBytes: cuBLASLt's workspace, where prefill GEMMs run on it.
	CublasLtBytes int64 `json:"cublaslt_bytes,omitempty"`
	// ShadowBytes: the bf16 copies of quantised weights the prefill reads
	// (where they fit; LAGC_PREFILL_BF16=0: none), for the benched layers;
	// ShadowsDropped: why they were left out.
	ShadowBytes    int64  `json:"shadow_bytes,omitempty"`
	ShadowsDropped string `json:"shadows_dropped,omitempty"`
	// SkipKernels, SkippedLaunches: gpu.EnvSkipKernels and the launches it
	// left out (an ablation: the outputs were wrong, the times are not a
	// model's).
	SkipKernels     string  `json:"skip_kernels,omitempty"`
	SkippedLaunches int     `json:"skipped_launches,omitempty"`
	Bandwidth       float64 `json:"roofline_bytes_per_s"`
	BandwidthFrom   string  `json:"roofline_from"`
	// DecodeAhead: greedy steps ran one step ahead (gpu.EnvDecodeAhead).
	DecodeAhead bool `json:"decode_ahead"`

	Decode  []decodeRow  `json:"decode"`
	Prefill []prefillRow `json:"prefill"`
	// PrefillLast: the same prompts computing, after the last layer's
	// attention, only the last row (as lagc run does: Executor.PrefillTail);
	// at full depth the time saved is the same (the last layer's MLP and
	// the LM head over the other rows), so the estimate subtracts it.
	PrefillLast []prefillRow `json:"prefill_last_row"`
	// Bytes a decode step reads: weights (active experts only, one
	// embedding row) and the KV cache at the decode context.
	BytesPerToken   int64   `json:"bytes_per_token"`
	BytesPerToken48 int64   `json:"bytes_per_token_full_depth"`
	LayerBytes      int64   `json:"moe_layer_bytes_per_token"`
	DecodeLayerUs   float64 `json:"decode_moe_layer_us_graph"`
	DecodeLayerFrac float64 `json:"decode_moe_layer_roofline_fraction"`
	PrefillLayerMs  float64 `json:"prefill_2048_moe_layer_ms"`
	ScaledNote      string  `json:"scaling"`
	// Load: how --model's weights were loaded (absent with synthetic ones).
	Load *loadReport `json:"load,omitempty"`
	// PrefillRoutes: how the largest prefill's tokens spread over each MoE
	// layer's experts (gpu.Executor.CensusRoutes).
	PrefillRoutes *routesReport `json:"prefill_routes,omitempty"`
}

// routesReport is a prefill's routing, layer by layer: synthetic weights
// route as their random router does, which a trained model's balanced
// router need not resemble; the grouped GEMMs' speed depends on it
// (kernel-bench routes uniformly at random: all experts used, about
// tokens*topk/experts routes each).
type routesReport struct {
	Tokens  int            `json:"tokens"`
	TopK    int            `json:"top_k"`
	Experts int            `json:"experts"`
	Layers  []routes.Layer `json:"layers"`
	// For scripts (targets.sh): summary() and collapsed().
	UsedMin       int `json:"used_min"`
	UsedMedian    int `json:"used_median"`
	UsedMax       int `json:"used_max"`
	BusiestMedian int `json:"busiest_median"`
	// The median layer's grouped-GEMM row tiles at 128, 96 and 112 rows
	// (routes.Layer's Tiles128, Tiles96, Tiles112).
	Tiles128Median int  `json:"tiles_128_median"`
	Tiles96Median  int  `json:"tiles_96_median"`
	Tiles112Median int  `json:"tiles_112_median"`
	Collapsed      bool `json:"collapsed"`
}

// routeCensus is an executor that counts a prefill's routes (gpu's and
// cpu's CensusRoutes).
type routeCensus interface {
	CensusRoutes([]int32) ([]routes.Layer, error)
}

// censusReport is how c's router spreads tokens (a prefill from position
// 0: CensusRoutes), nil for a model without MoE layers.
func censusReport(c routeCensus, tokens []int32, cfg *config.Config) (*routesReport, error) {
	if cfg.NumExperts == 0 {
		return nil, nil
	}
	layers, err := c.CensusRoutes(tokens)
	if err != nil {
		return nil, fmt.Errorf("route census: %w", err)
	}
	if len(layers) == 0 {
		return nil, nil
	}
	r := &routesReport{Tokens: len(tokens), TopK: cfg.NumExpertsPerTok, Experts: cfg.NumExperts, Layers: layers}
	r.UsedMin, r.UsedMedian, r.UsedMax, r.BusiestMedian = r.summary()
	r.Tiles128Median, r.Tiles96Median, r.Tiles112Median = r.tiles()
	r.Collapsed = r.collapsed()
	return r, nil
}

// print writes the routing's line (nothing for a nil report).
func (r *routesReport) print(w io.Writer) {
	if r == nil || len(r.Layers) == 0 {
		return
	}
	lo, med, hi, busy := r.summary()
	fmt.Fprintf(w, "\nprefill %d routing: %d to %d of %d experts used a MoE layer (median %d); a layer's busiest expert takes %d routes (median over the layers), against %.0f each if spread evenly\n",
		r.Tokens, lo, hi, r.Experts, med, busy, float64(r.Tokens*r.TopK)/float64(r.Experts))
	t128, t96, t112 := r.tiles()
	fmt.Fprintf(w, "prefill %d grouped-GEMM row tiles a MoE layer (median; routed experts): %d of 128 rows (bf16), %d of 96 (quantised), %d of 112 (a candidate for the quantised), against %d experts used: each tile past one an expert reads its weights again\n",
		r.Tokens, t128, t96, t112, med)
	if r.collapsed() {
		fmt.Fprintf(w, "warning: the routing collapsed (the median MoE layer uses %d of the %d experts its %d routes could reach): prefill and batched-decode times on these weights are not a trained model's\n",
			med, min(r.Experts, r.Tokens*r.TopK), r.Tokens*r.TopK)
	}
}

// collapsed says the median layer's routes reach under half the experts
// they could (the synthetic q4_k weights before 2026-12-04 sent every
// token to about 10 of 256, which made grouped GEMMs look fast).
func (r *routesReport) collapsed() bool {
	_, med, _, _ := r.summary()
	return 2*med < min(r.Experts, r.Tokens*r.TopK)
}

// summary is the experts used a layer (least, median, most) and the
// median over the layers of their busiest expert's routes.
func (r *routesReport) summary() (usedMin, usedMed, usedMax, busiestMed int) {
	used := r.sorted(func(l routes.Layer) int { return l.Used })
	busiest := r.sorted(func(l routes.Layer) int { return l.Busiest })
	return used[0], used[len(used)/2], used[len(used)-1], busiest[len(busiest)/2]
}

// tiles is the median over the layers of their grouped-GEMM row tiles at
// 128, 96 and 112 rows.
func (r *routesReport) tiles() (t128, t96, t112 int) {
	a := r.sorted(func(l routes.Layer) int { return l.Tiles128 })
	b := r.sorted(func(l routes.Layer) int { return l.Tiles96 })
	c := r.sorted(func(l routes.Layer) int { return l.Tiles112 })
	return a[len(a)/2], b[len(b)/2], c[len(c)/2]
}

// sorted is f of every layer, in increasing order.
func (r *routesReport) sorted(f func(routes.Layer) int) []int {
	v := make([]int, len(r.Layers))
	for i, l := range r.Layers {
		v[i] = f(l)
	}
	slices.Sort(v)
	return v
}

// loadReport is the time of a checkpoint's load, by stage. The stage times
// are summed over the workers that prepare weights at once; uploading is
// one goroutine's.
type loadReport struct {
	Seconds       float64 `json:"seconds"`         // plan, allocation, weights and kernels
	WeightSeconds float64 `json:"weights_seconds"` // preparing and uploading the weights
	Cache         string  `json:"weight_cache"`    // its directory, or "off: why"
	Weights       int     `json:"weights"`
	Bytes         int64   `json:"bytes"`
	Hits          int     `json:"cache_hits"`
	HitBytes      int64   `json:"cache_hit_bytes"`
	Written       int     `json:"cache_written"`
	Rebuilt       int     `json:"cache_rebuilt"`
	Workers       int     `json:"workers"`
	Budget        int64   `json:"budget_bytes"`
	HashedBytes   int64   `json:"hashed_bytes"`
	MemoisedBytes int64   `json:"memoised_bytes"`
	Hash          float64 `json:"hash_seconds"`
	Read          float64 `json:"cache_read_seconds"`
	Convert       float64 `json:"convert_seconds"`
	Write         float64 `json:"cache_write_seconds"`
	Upload        float64 `json:"upload_seconds"`
}

func newLoadReport(total time.Duration, st gpu.LoadStats) *loadReport {
	return &loadReport{Seconds: total.Seconds(), WeightSeconds: st.Wall.Seconds(), Cache: st.Cache,
		Weights: st.Weights, Bytes: st.Bytes, Hits: st.Hits, HitBytes: st.HitBytes, Written: st.Written,
		Rebuilt: st.Rebuilt, Workers: st.Workers, Budget: st.Budget, HashedBytes: st.HashedBytes,
		MemoisedBytes: st.MemoisedBytes, Hash: st.Hash.Seconds(), Read: st.Read.Seconds(),
		Convert: st.Convert.Seconds(), Write: st.Write.Seconds(), Upload: st.Upload.Seconds()}
}

func printLoad(w io.Writer, l *loadReport) {
	fmt.Fprintf(w, "load: %.2fs (weights %.2fs: %d, %s; the rest is planning, allocation and kernels)\n",
		l.Seconds, l.WeightSeconds, l.Weights, lower.FormatBytes(l.Bytes))
	switch {
	case strings.HasPrefix(l.Cache, "off"):
		fmt.Fprintf(w, "weight cache %s\n", l.Cache)
	case l.Hits == l.Weights:
		fmt.Fprintf(w, "weight cache: hit, all %d weights (%s) from %s\n", l.Hits, lower.FormatBytes(l.HitBytes), l.Cache)
	default:
		fmt.Fprintf(w, "weight cache: %d of %d weights hit (%s), %d entries written, %d damaged and rebuilt, in %s\n",
			l.Hits, l.Weights, lower.FormatBytes(l.HitBytes), l.Written, l.Rebuilt, l.Cache)
	}
	fmt.Fprintf(w, "weight stages, summed over %d workers (at most %s in flight): reading+hashing sources %.2fs (%s hashed, %s from the memo), cache reads %.2fs, converting %.2fs, cache writes %.2fs; uploading %.2fs (one goroutine, in plan order)\n\n",
		l.Workers, lower.FormatBytes(l.Budget), l.Hash, lower.FormatBytes(l.HashedBytes), lower.FormatBytes(l.MemoisedBytes),
		l.Read, l.Convert, l.Write, l.Upload)
}

type decodeRow struct {
	Mode     string  `json:"mode"` // eager, graph or graph-queued (DecodeQueued)
	MsToken  float64 `json:"ms_per_token"`
	TokS     float64 `json:"tok_per_s"`
	Roofline float64 `json:"roofline_fraction"`
	TokS48   float64 `json:"tok_per_s_full_depth"`
}

type prefillRow struct {
	Tokens int     `json:"tokens"`
	Ms     float64 `json:"ms"`
	TokS   float64 `json:"tok_per_s"`
	TokS48 float64 `json:"tok_per_s_full_depth"`
}

func runBench(w io.Writer, f *benchFlags) error {
	if (f.preset == "") == (f.model == "") {
		return fmt.Errorf("%w: give --preset NAME --synthetic or --model CKPT", errUsage)
	}
	if f.preset != "" && !f.synthetic {
		return fmt.Errorf("%w: --preset has no weights: add --synthetic", errUsage)
	}
	if (f.quant != "" || len(f.tensorTypes) > 0) && !f.synthetic {
		return fmt.Errorf("%w: --quant makes synthetic weights: add --synthetic (a checkpoint keeps its own types)", errUsage)
	}
	if err := checkFlagRules(positive("--runs", f.runs), positive("--decode-tokens", f.tokens), positive("--ctx", f.ctx),
		positive("--chunk", f.chunk), notNegative("--layers", f.layers),
		bwRule(f.bw)); err != nil {
		return err
	}
	dt, err := ir.ParseDType(f.dtype)
	if err != nil || (dt != ir.BF16 && dt != ir.F32) {
		return fmt.Errorf("%w: --dtype %q: bf16 or f32", errUsage, f.dtype)
	}
	sizes, err := benchSizes(f)
	if err != nil {
		return err
	}
	batches, err := batchSizes(f)
	if err != nil {
		return err
	}
	if len(batches) > 0 {
		sizes = nil
	}
	if err := checkPassNames(f.passes, f.disable); err != nil {
		return err
	}
	var full *config.Config
	var ck ckpt.Checkpoint
	name := f.preset
	if f.preset != "" {
		if full, err = config.Preset(f.preset); err != nil {
			return fmt.Errorf("%w: %v", errUsage, err)
		}
	} else {
		if ck, err = ckpt.Open(f.model); err != nil {
			return err
		}
		defer ck.Close()
		full, name = ck.Config(), f.model
		if f.layers > 0 && f.layers < full.NumLayers {
			return fmt.Errorf("%w: --layers needs --synthetic weights", errUsage)
		}
	}
	cfg, err := full.FirstLayers(f.layers)
	if err != nil {
		return err
	}
	g, ran, err := benchGraph(f, dt, cfg, ck)
	if err != nil {
		return err
	}
	var ws gpu.WeightSource
	if ck != nil {
		ws = ck
	}
	loadStart := time.Now()
	ex, err := gpu.Compile(g, ws, benchConfig(f, dt, sizes, batches))
	if cuda.Unavailable(err) {
		return fmt.Errorf("%w; lagc bench --device cpu times the CPU reference executor", err)
	}
	if err != nil {
		return err
	}
	defer ex.Close()
	if len(batches) > 0 {
		return runBatchBench(w, f, ex, name, cfg, batches)
	}
	loadTime := time.Since(loadStart)
	plan := ex.Plan()
	props := ex.Kernels().Dev.Props()
	weights := "synthetic"
	if f.quant != "" {
		weights = "synthetic " + f.quant
		if len(f.tensorTypes) > 0 {
			weights += " with --tensor-type " + f.tensorTypes.String()
		}
	}
	rep := &benchReport{Model: name, Weights: weights, DType: dt.String(), Layers: cfg.NumLayers, FullLayers: full.NumLayers,
		Chunk: f.chunk, Context: f.ctx, Runs: f.runs, Device: fmt.Sprintf("%s (%d SMs)", props.Name, props.SMs),
		WeightBytes: plan.WeightBytes, Passes: ran, Kernels: len(g.Nodes) - g.OpCounts()["reshape"]}
	rep.Bandwidth, rep.BandwidthFrom = roofline(f.bw, props)
	if ck != nil {
		rep.Weights = f.model
		rep.Load = newLoadReport(loadTime, ex.LoadStats())
	}
	rep.WeightBytes48 = fullWeightBytes(plan, cfg, full)
	rep.KVBytes = plan.KVBytes
	rep.ShadowBytes = plan.ShadowBytes
	rep.ShadowsDropped = ex.ShadowsDropped()
	rep.DecodeAhead = ex.DecodesAhead()
	rep.ArenaBytes = max(plan.Decode.Arena, plan.Prefill.Arena)
	rep.WorkspaceBytes = max(plan.Decode.Workspace, plan.Prefill.Workspace)
	if plan.CublasLt {
		rep.CublasLtBytes = cuda.LtWorkspaceBytes
	}
	rng := rand.New(rand.NewPCG(f.seed, 7))
	maxTok := max(f.ctx, maxInts(sizes))
	toks := make([]int32, maxTok)
	for i := range toks {
		toks[i] = int32(rng.IntN(cfg.VocabSize))
	}
	b := &bencher{ex: ex, f: f, toks: toks}

	// Warm up: compile every kernel (each prefill length may need its own
	// instantiations; compiling inside a profiled or timed run would count
	// the compile), capture the decode graph.
	if err := b.decode(true, 2); err != nil {
		return err
	}
	if _, err := b.decodeRuns(false, false, 2, 1); err != nil {
		return err
	}
	for _, n := range append([]int{min(2048, len(toks))}, sizes...) {
		ex.Reset()
		if _, err := ex.Prefill(toks[:n]); err != nil {
			return err
		}
		ex.Reset()
		if _, err := ex.PrefillTail(toks[:n]); err != nil {
			return err
		}
	}

	// Where time goes, per layer, from one profiled run of each class.
	ex.StartProfile()
	if err := b.decode(true, f.tokens); err != nil {
		return err
	}
	decProf, decSteps := ex.StopProfile()
	ex.StartProfile()
	ex.Reset()
	if _, err := ex.Prefill(toks[:min(2048, len(toks))]); err != nil {
		return err
	}
	preProf, preSteps := ex.StopProfile()
	if f.profile != "" {
		entries, steps := benchProfile(decProf, decSteps, preProf, preSteps)
		if err := writeBenchProfile(f.profile, entries, steps); err != nil {
			return err
		}
	}
	decScale, decLayer := depthScale(decProf, "decode", cfg, full)
	preScale, preLayer := depthScale(preProf, "prefill", cfg, full)
	rep.ScaledNote = fmt.Sprintf("full depth = measured x (outside-layer time + each of the %d layers estimated by the benched layers of its kind) / profiled total; per-layer GPU times from a profiled eager run", full.NumLayers)

	bytes, perLayer := decodeBytes(plan, f.ctx)
	rep.BytesPerToken = bytes
	rep.BytesPerToken48, rep.LayerBytes = scaleBytes(perLayer, cfg, full)
	// graph-queued: the graph's steps queued back to back, the host
	// reading only the last token: the GPU's own time a step.
	for _, mode := range []string{"eager", "graph", "graph-queued"} {
		eager := mode == "eager"
		per, err := b.decodeRuns(eager, mode == "graph-queued", f.tokens, f.runs)
		if err != nil {
			return err
		}
		s := per.Seconds()
		rep.Decode = append(rep.Decode, decodeRow{Mode: mode, MsToken: 1e3 * s, TokS: 1 / s,
			Roofline: float64(bytes) / rep.Bandwidth / s, TokS48: 1 / (s * decScale)})
		if mode == "graph" {
			rep.DecodeLayerUs = 1e6 * s * decLayer
			if rep.DecodeLayerUs > 0 {
				rep.DecodeLayerFrac = float64(rep.LayerBytes) / rep.Bandwidth / (s * decLayer)
			}
		}
	}
	// prefillRuns is the median time of a prefill of n tokens from an empty
	// cache by run (ex.Prefill, or ex.PrefillTail: the last row's tail).
	prefillRuns := func(n int, run func([]int32) error) (float64, error) {
		d, err := medianRuns(f.runs, func() (time.Duration, error) {
			ex.Reset()
			t0 := time.Now()
			err := run(toks[:n])
			return time.Since(t0), err
		})
		return d.Seconds(), err
	}
	for _, n := range sizes {
		s, err := prefillRuns(n, func(t []int32) error { _, err := ex.Prefill(t); return err })
		if err != nil {
			return err
		}
		rep.Prefill = append(rep.Prefill, prefillRow{Tokens: n, Ms: 1e3 * s, TokS: float64(n) / s, TokS48: float64(n) / (s * preScale)})
		if n == 2048 {
			rep.PrefillLayerMs = 1e3 * s * preLayer
		}
		sl, err := prefillRuns(n, func(t []int32) error { _, err := ex.PrefillTail(t); return err })
		if err != nil {
			return err
		}
		rep.PrefillLast = append(rep.PrefillLast, prefillRow{Tokens: n, Ms: 1e3 * sl, TokS: float64(n) / sl,
			TokS48: float64(n) / (s*preScale - (s - sl))})
	}
	if len(sizes) > 0 {
		if rep.PrefillRoutes, err = censusReport(ex, toks[:maxInts(sizes)], cfg); err != nil {
			return err
		}
	}
	if n := ex.SkippedLaunches(); n > 0 {
		rep.SkipKernels, rep.SkippedLaunches = os.Getenv(gpu.EnvSkipKernels), n
	}
	if f.jsonOut {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	printBench(w, rep)
	return nil
}

// benchSizes are the prefill lengths bench times.
func benchSizes(f *benchFlags) ([]int, error) {
	var sizes []int
	for _, s := range splitList(f.prefill) {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%w: --prefill %q: positive token counts", errUsage, f.prefill)
		}
		sizes = append(sizes, n)
	}
	return sizes, nil
}

// benchGraph builds the graph bench runs (checkpoint dtypes bound when
// there is one) and runs the passes; it returns the passes that ran.
func benchGraph(f *benchFlags, dt ir.DType, cfg *config.Config, ck ckpt.Checkpoint) (*ir.Graph, []string, error) {
	g, err := models.Build("laguna.yaml", models.LagunaYAML, cfg, models.BuildOptions{WeightDType: dt})
	if err != nil {
		return nil, nil, err
	}
	if ck != nil {
		if err := engine.BindCheckpoint(g, ck); err != nil {
			return nil, nil, err
		}
	}
	r, err := parseQuantFlag(f.quant, f.model, f.tensorTypes)
	if err != nil {
		return nil, nil, err
	}
	if err := setQuantTypes(g, r); err != nil {
		return nil, nil, err
	}
	pres, err := passes.Run(g, passes.Options{Passes: splitList(f.passes), Disable: splitList(f.disable)})
	if err != nil {
		return nil, nil, err
	}
	var ran []string
	for _, t := range pres.Timings {
		ran = append(ran, t.Name)
	}
	return g, ran, nil
}

// benchConfig is the executor bench runs: its KV caches hold the decode
// context and its steps, or the longest prefill.
func benchConfig(f *benchFlags, dt ir.DType, sizes, batches []int) gpu.Config {
	maxCtx := f.ctx + f.tokens + 2
	for _, n := range sizes {
		maxCtx = max(maxCtx, n)
	}
	c := gpu.Config{DType: dt, Chunk: f.chunk, MaxContext: maxCtx}
	if len(batches) > 0 {
		c.MaxContext = f.ctx + (f.runs+1)*f.tokens + 2
		c.Seqs, c.BatchGEMM = maxInts(batches), f.batchGEMM
	}
	if f.model != "" {
		c.NoWeightCache, c.CacheQuantised, c.LoadLog = f.weightCache.off, f.weightCache.all, os.Stderr
	}
	return c
}

// benchProfile is what --profile writes: the decode run's decode steps
// (not the prefill of its context, which ran in that run too and would
// add to the prefill class) and the prefill run's chunk, with both runs'
// step counts (so a step's time is the class total over its count).
func benchProfile(dec []gpu.ProfileEntry, decSteps map[string]int, pre []gpu.ProfileEntry, preSteps map[string]int) ([]gpu.ProfileEntry, map[string]int) {
	var out []gpu.ProfileEntry
	for _, e := range dec {
		if e.Class == lower.Decode {
			out = append(out, e)
		}
	}
	steps := map[string]int{}
	if n := decSteps[lower.Decode]; n > 0 {
		steps[lower.Decode] = n
	}
	for _, e := range pre {
		if e.Class == lower.Prefill {
			out = append(out, e)
		}
	}
	if n := preSteps[lower.Prefill]; n > 0 {
		steps[lower.Prefill] = n
	}
	return out, steps
}

func writeBenchProfile(path string, entries []gpu.ProfileEntry, steps map[string]int) error {
	p, err := gpu.BuildProfile(entries, steps)
	if err != nil {
		return err
	}
	out, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("--profile: %w", err)
	}
	if err := p.Write(out); err != nil {
		out.Close()
		return fmt.Errorf("--profile: %w", err)
	}
	return out.Close()
}

func maxInts(xs []int) int {
	m := 0
	for _, x := range xs {
		m = max(m, x)
	}
	return m
}

type bencher struct {
	ex   *gpu.Executor
	f    *benchFlags
	toks []int32
}

// decode prefills the context, then runs n greedy decode steps.
func (b *bencher) decode(eager bool, n int) error {
	_, err := b.decodeTimed(eager, false, n)
	return err
}

func (b *bencher) decodeTimed(eager, queued bool, n int) (time.Duration, error) {
	ex := b.ex
	ex.SetEager(eager)
	ex.Reset()
	next, err := ex.Prefill(b.toks[:b.f.ctx])
	if err != nil {
		return 0, err
	}
	tok := next[len(next)-1]
	// One untimed step: the first after a prefill writes the scalars
	// (queued: no step left queued ahead of the timed ones).
	if queued {
		tok, err = ex.DecodeQueued(tok, 1)
	} else {
		tok, err = ex.DecodeNext(tok)
	}
	if err != nil {
		return 0, err
	}
	t0 := time.Now()
	if queued {
		if _, err = ex.DecodeQueued(tok, n); err != nil {
			return 0, err
		}
		return time.Since(t0) / time.Duration(n), nil
	}
	for i := 0; i < n; i++ {
		if tok, err = ex.DecodeNext(tok); err != nil {
			return 0, err
		}
	}
	return time.Since(t0) / time.Duration(n), nil
}

// decodeRuns returns the median time per decode step over runs runs;
// queued: the steps queued back to back (Executor.DecodeQueued), not
// read one by one.
func (b *bencher) decodeRuns(eager, queued bool, n, runs int) (time.Duration, error) {
	return medianRuns(runs, func() (time.Duration, error) { return b.decodeTimed(eager, queued, n) })
}

// medianRuns is the median of runs timings by run; its first error ends it.
func medianRuns(runs int, run func() (time.Duration, error)) (time.Duration, error) {
	var ts []time.Duration
	for r := 0; r < runs; r++ {
		t, err := run()
		if err != nil {
			return 0, err
		}
		ts = append(ts, t)
	}
	return medianDur(ts), nil
}

func medianDur(ts []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ts...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

// layerKind groups layers that cost the same: MLP kind and attention kind.
func layerKind(c *config.Config, l int) string {
	return c.MLPLayerTypes[l] + "/" + c.LayerTypes[l]
}

// estimate returns, for every layer of full, a per-layer value estimated
// from the benched layers (per[l] for l < benched.NumLayers): the mean of
// benched layers of the same kind, else of the same MLP kind, else of all.
func estimate(per map[int]float64, benched, full *config.Config) []float64 {
	mean := func(match func(l int) bool) (float64, bool) {
		s, n := 0.0, 0
		for l := 0; l < benched.NumLayers; l++ {
			if match(l) {
				s += per[l]
				n++
			}
		}
		if n == 0 {
			return 0, false
		}
		return s / float64(n), true
	}
	out := make([]float64, full.NumLayers)
	for l := range out {
		k, mlp := layerKind(full, l), full.MLPLayerTypes[l]
		if v, ok := mean(func(b int) bool { return layerKind(benched, b) == k }); ok {
			out[l] = v
		} else if v, ok := mean(func(b int) bool { return benched.MLPLayerTypes[b] == mlp }); ok {
			out[l] = v
		} else {
			out[l], _ = mean(func(int) bool { return true })
		}
	}
	return out
}

// depthScale turns a profile of the benched layers into the factor from
// measured to full-depth time, and the share of the measured time one
// average MoE layer takes (the dense layer when no MoE layer was benched).
func depthScale(entries []gpu.ProfileEntry, class string, benched, full *config.Config) (scale, moeLayer float64) {
	per := map[int]float64{}
	var outside, total float64
	for _, e := range entries {
		if e.Class != class {
			continue
		}
		v := e.GPU.Seconds()
		total += v
		if e.Layer < 0 {
			outside += v
		} else {
			per[e.Layer] += v
		}
	}
	if total == 0 {
		return 1, 0
	}
	est := outside
	for _, v := range estimate(per, benched, full) {
		est += v
	}
	var moe []float64
	for l := 0; l < benched.NumLayers; l++ {
		if benched.IsMoE(l) {
			moe = append(moe, per[l])
		}
	}
	if len(moe) == 0 {
		moe = append(moe, per[0])
	}
	m := 0.0
	for _, v := range moe {
		m += v
	}
	m /= float64(len(moe))
	return est / total, m / total
}

// decodeBytes counts what one decode step at context ctx reads from
// memory: every weight a kernel reads (the embedding: one row; expert
// stacks: the selected experts only), and the visible KV cache. It returns
// the total and the bytes per layer (-1: outside the layers).
func decodeBytes(p *lower.Plan, ctx int) (int64, map[int]int64) {
	per := map[int]int64{}
	var total int64
	for _, st := range p.Decode.Steps {
		var b int64
		for i, o := range st.In {
			if o.Weight < 0 {
				continue
			}
			w := p.Weights[o.Weight]
			n := w.Bytes
			switch {
			case st.Op == "embedding":
				n = w.Bytes / int64(max(w.Shape[0], 1))
			case (st.Op == "moe_experts" || st.Op == "moe_grouped") && i >= 3 && len(w.Shape) == 3:
				k := int64(st.In[1].Last(1) + st.Int("shared"))
				n = w.Bytes * k / int64(max(w.Shape[0], 1))
			}
			b += n
		}
		if st.KV >= 0 { // an attention step: the keys and values it reads
			kv := p.KV[st.KV]
			visible := ctx + 1
			if kv.Window > 0 {
				visible = min(visible, kv.Window)
			}
			b += 2 * int64(visible) * int64(kv.NKV*kv.HeadDim*dtypeBytes(kv.DType))
		}
		per[st.Layer] += b
		total += b
	}
	return total, per
}

func dtypeBytes(dt string) int {
	if dt == "f32" {
		return 4
	}
	return 2
}

// scaleBytes estimates the bytes per token of the full depth, and returns
// the bytes of an average MoE layer.
func scaleBytes(per map[int]int64, benched, full *config.Config) (int64, int64) {
	f := map[int]float64{}
	for l, v := range per {
		f[l] = float64(v)
	}
	total := f[-1]
	for _, v := range estimate(f, benched, full) {
		total += v
	}
	var moe, n float64
	for l := 0; l < benched.NumLayers; l++ {
		if benched.IsMoE(l) {
			moe += f[l]
			n++
		}
	}
	if n == 0 {
		return int64(total), int64(f[0])
	}
	return int64(total), int64(moe / n)
}

// fullWeightBytes estimates the weight bytes of the full depth from the
// benched layers' (each layer by the benched layers of its kind).
func fullWeightBytes(p *lower.Plan, benched, full *config.Config) int64 {
	per := map[int]float64{}
	for _, w := range p.Weights {
		if w.Offset < 0 {
			continue
		}
		l, ok := ir.LayerOf(w.Name)
		if !ok {
			l = -1
		}
		per[l] += float64(w.Bytes)
	}
	total := per[-1]
	for _, v := range estimate(per, benched, full) {
		total += v
	}
	return int64(total)
}

func printBench(w io.Writer, r *benchReport) {
	fmt.Fprintf(w, "lagc bench: %s, %s weights, activations %s, %d of %d layers, on %s\n", r.Model, r.Weights, r.DType, r.Layers, r.FullLayers, r.Device)
	fmt.Fprintf(w, "passes: %s (%d graph nodes launch work)\n", strings.Join(r.Passes, ","), r.Kernels)
	fmt.Fprintf(w, "memory: weights %s (%s at full depth), KV caches %s (context %d), activations %s, scratch %s\n",
		lower.FormatBytes(r.WeightBytes), lower.FormatBytes(r.WeightBytes48), lower.FormatBytes(r.KVBytes), r.Context,
		lower.FormatBytes(r.ArenaBytes), lower.FormatBytes(r.WorkspaceBytes))
	if r.CublasLtBytes > 0 {
		fmt.Fprintf(w, "prefill GEMMs on cuBLASLt (LAGC_CUBLASLT=0: lagc's own), its workspace %s\n", lower.FormatBytes(r.CublasLtBytes))
	}
	if r.ShadowBytes > 0 {
		fmt.Fprintf(w, "prefill reads bf16 copies of the quantised dense weights (LAGC_PREFILL_BF16=0: not): %s for these %d layers\n",
			lower.FormatBytes(r.ShadowBytes), r.Layers)
	}
	if r.ShadowsDropped != "" {
		fmt.Fprintf(w, "%s\n", r.ShadowsDropped)
	}
	if r.SkippedLaunches > 0 {
		fmt.Fprintf(w, "ABLATION: %s=%q left out %d launches: the outputs are wrong, the times are the model's without those kernels\n",
			gpu.EnvSkipKernels, r.SkipKernels, r.SkippedLaunches)
	}
	fmt.Fprintf(w, "median of %d runs; roofline %.2f TB/s (%s)\n\n", r.Runs, r.Bandwidth/1e12, r.BandwidthFrom)
	if r.Load != nil {
		printLoad(w, r.Load)
	}
	fmt.Fprintf(w, "decode at context %d: %s read per token (%s at full depth; %s per MoE layer)\n",
		r.Context, lower.FormatBytes(r.BytesPerToken), lower.FormatBytes(r.BytesPerToken48), lower.FormatBytes(r.LayerBytes))
	ahead := "one step ahead"
	if !r.DecodeAhead {
		ahead = fmt.Sprintf("one step at a time (%s=0, or no mapped pinned memory)", gpu.EnvDecodeAhead)
	}
	fmt.Fprintf(w, "greedy steps (eager, graph): %s; graph-queued: queued back to back, the last read\n", ahead)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "mode\tms/token\ttok/s\troofline\ttok/s at full depth\t")
	for _, d := range r.Decode {
		fmt.Fprintf(tw, "%s\t%.3f\t%.1f\t%.1f%%\t%.1f\t\n", d.Mode, d.MsToken, d.TokS, 100*d.Roofline, d.TokS48)
	}
	tw.Flush()
	kind := "MoE layer"
	if r.Layers == 1 {
		kind = "layer (the dense layer 0: no MoE layer benched)"
	}
	fmt.Fprintf(w, "graph decode per %s: %.1f us (%.1f%% of its roofline)\n\n", kind, r.DecodeLayerUs, 100*r.DecodeLayerFrac)
	fmt.Fprintf(w, "prefill (chunk %d):\n", r.Chunk)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "tokens\tms\ttok/s\ttok/s at full depth\t")
	for _, p := range r.Prefill {
		fmt.Fprintf(tw, "%d\t%.2f\t%.0f\t%.0f\t\n", p.Tokens, p.Ms, p.TokS, p.TokS48)
	}
	tw.Flush()
	if r.PrefillLayerMs > 0 {
		fmt.Fprintf(w, "prefill 2048 per %s: %.3f ms\n", kind, r.PrefillLayerMs)
	}
	if len(r.PrefillLast) > 0 {
		fmt.Fprintf(w, "\nprefill computing the last row only after the last attention (as lagc run):\n")
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "tokens\tms\ttok/s\ttok/s at full depth\t")
		for _, p := range r.PrefillLast {
			fmt.Fprintf(tw, "%d\t%.2f\t%.0f\t%.0f\t\n", p.Tokens, p.Ms, p.TokS, p.TokS48)
		}
		tw.Flush()
	}
	r.PrefillRoutes.print(w)
	fmt.Fprintf(w, "\n%s\n", r.ScaledNote)
}
