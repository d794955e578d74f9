package main

import (
	"cmp"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"lagc/cuda"
	"lagc/exec/gpu"
	"lagc/lower"
	"lagc/quant"
)

func init() {
	register(&command{
		name:    "kernel-bench",
		summary: "time the matmul and MoE kernels at Laguna-S-2.1 shapes (GB/s, TFLOP/s, roofline fractions)",
		usage:   "kernel-bench [--runs N] [--gemm-t 512,2048,8192] [--moe-t 512,2048,8192] [--moe-quant q4_k] [--json]",
		setup: func(fs *flag.FlagSet) func([]string) error {
			o := kbOpts{}
			fs.IntVar(&o.device, "device", 0, "CUDA device ordinal")
			fs.IntVar(&o.runs, "runs", 7, "timed runs of each case; the median is reported")
			fs.StringVar(&o.gemmT, "gemm-t", "512,2048,8192", "token counts of the prefill GEMMs")
			fs.StringVar(&o.moeT, "moe-t", "512,2048,8192", "token counts of the grouped MoE (prefill)")
			fs.StringVar(&o.moeQuant, "moe-quant", "q4_k", "quantised expert types the grouped MoE is also timed with on Hopper, comma-separated (\"\": none)")
			fs.Float64Var(&o.moeSkew, "moe-skew", 0, "the MoE cases' routes: 0 uniform at random; > 0 each expert biased by a normal draw of this spread (a random router's load: 0.08 gives the busiest expert about 150 of 2048 tokens' routes, as the synthetic Laguna-S-2.1 weights route; 0.1 175, 0.2 310)")
			fs.Float64Var(&o.bw, "bw", 0, "bandwidth roofline, bytes/s (0: 4.3e12, an H200 copy's rate, scaled on other GPUs by their peak memory bandwidth against the H200's)")
			fs.Float64Var(&o.flops, "flops", 790e12, "bf16 tensor roofline, FLOP/s (an H200 GEMM measured ~790 TFLOP/s)")
			fs.BoolVar(&o.json, "json", false, "print JSON instead of a table")
			return func(args []string) error {
				if len(args) != 0 {
					return fmt.Errorf("%w: kernel-bench takes no arguments", errUsage)
				}
				var err error
				if o.gemmTs, err = parseInts(o.gemmT); err != nil {
					return fmt.Errorf("%w: --gemm-t: %v", errUsage, err)
				}
				if o.moeTs, err = parseInts(o.moeT); err != nil {
					return fmt.Errorf("%w: --moe-t: %v", errUsage, err)
				}
				for _, n := range strings.Split(o.moeQuant, ",") {
					if n = strings.TrimSpace(n); n == "" {
						continue
					}
					t, err := quant.ParseType(n)
					if err != nil || !lower.HasQuantKernels(t) {
						return fmt.Errorf("%w: --moe-quant %q: want types with GPU kernels (%v)", errUsage, n, lower.QuantKernelTypes)
					}
					o.moeQuants = append(o.moeQuants, t)
				}
				if err := checkFlagRules(positive("--runs", o.runs),
					bwRule(o.bw),
					flagRule{"--moe-skew", o.moeSkew, o.moeSkew >= 0 && o.moeSkew <= 10, "want a number from 0 to 10"},
					flagRule{"--flops", o.flops, o.flops > 0, "want a number > 0"}); err != nil {
					return err
				}
				// The grouped calls' shapes as LAGC_QMOE_SHAPE forces them in a
				// plan, read before any device is opened.
				if o.qmoe, err = lower.ParseQMoEForce(os.Getenv("LAGC_QMOE_SHAPE")); err != nil {
					return fmt.Errorf("LAGC_QMOE_SHAPE: %w", err)
				}
				return runKernelBench(o, os.Stdout)
			}
		},
	})
}

type kbOpts struct {
	device, runs  int
	gemmT, moeT   string
	gemmTs, moeTs []int
	moeQuant      string
	qmoe          lower.QMoEForce // LAGC_QMOE_SHAPE: the grouped calls' shapes (bf16 and quantised), as in a plan
	moeQuants     []quant.Type
	moeSkew       float64
	bw, flops     float64
	json          bool
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%q is not a positive integer", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// kbRow is one timed case. Bytes and FLOPs are what the op must move and
// compute at least: weights read (only the selected experts' for MoE),
// activations read and written.
type kbRow struct {
	Kernel   string  `json:"kernel"`
	Case     string  `json:"case"`
	T        int     `json:"t"`
	Us       float64 `json:"us"`       // median GPU time per call, replayed from a CUDA graph
	UsEager  float64 `json:"us_eager"` // the same launched eagerly (host launch cost included)
	Bytes    int64   `json:"bytes"`
	Flops    float64 `json:"flops"`
	GBps     float64 `json:"gb_per_s"`
	TFlops   float64 `json:"tflop_per_s"`
	Fraction float64 `json:"roofline_fraction"` // of --bw (GEMV, MoE decode) or --flops (GEMM, MoE prefill)
	Bound    string  `json:"bound"`             // "bandwidth" or "compute"
}

type kbReport struct {
	Device string  `json:"device"`
	Arch   string  `json:"arch"`
	Runs   int     `json:"runs"`
	BW     float64 `json:"roofline_bytes_per_s"`
	BWFrom string  `json:"roofline_from"`
	Flops  float64 `json:"roofline_flop_per_s"`
	// What the driver says of the memory (0: it did not say), so that a
	// run records the figures roofline scales by (PeakMemBandwidth).
	MemClockKHz int     `json:"mem_clock_khz"`
	MemBusBits  int     `json:"mem_bus_bits"`
	PeakMemBW   float64 `json:"peak_mem_bytes_per_s"`
	Rows        []kbRow `json:"rows"`
}

// kbEnv holds what every case uses: device, stream, events, and a pattern
// buffer of random bf16 that fills weights and activations (tensor cores
// draw less power on zeros, so zeros would flatter the GEMMs).
type kbEnv struct {
	o       kbOpts
	d       *cuda.Device
	k       *gpu.Kernels
	s       *cuda.Stream
	e0, e1  *cuda.Event
	pattern cuda.DevicePtr
	patN    int64
	allocs  []cuda.DevicePtr
}

func (e *kbEnv) alloc(n int64) (cuda.DevicePtr, error) {
	p, err := e.d.Alloc(n)
	if err != nil {
		return 0, err
	}
	e.allocs = append(e.allocs, p)
	return p, nil
}

// freeAll releases the buffers of the last case.
func (e *kbEnv) freeAll() {
	for _, p := range e.allocs {
		_ = e.d.Free(p)
	}
	e.allocs = nil
}

// random allocates n bytes filled from the random pattern.
func (e *kbEnv) random(n int64) (cuda.DevicePtr, error) {
	p, err := e.alloc(n)
	if err != nil {
		return 0, err
	}
	for off := int64(0); off < n; off += e.patN {
		if err := e.s.CopyDtoD(p.Add(off), e.pattern, min(e.patN, n-off)); err != nil {
			return 0, err
		}
	}
	return p, nil
}

// time runs f once to warm up (and compile), captures `reps` calls of f
// in a CUDA graph, and returns the median GPU seconds per call over o.runs
// replays, and the same for eager launches (which include the host's
// launch cost where kernels are shorter than it).
func (e *kbEnv) time(reps int, f func(rep int) error) (graph, eager float64, err error) {
	if err := f(0); err != nil {
		return 0, 0, err
	}
	if err := e.s.Synchronize(); err != nil {
		return 0, 0, err
	}
	all := func() error {
		for i := 0; i < reps; i++ {
			if err := f(i); err != nil {
				return err
			}
		}
		return nil
	}
	g, err := e.s.Capture(all)
	if err != nil {
		return 0, 0, fmt.Errorf("capturing: %w", err)
	}
	defer g.Close()
	ex, err := g.Instantiate()
	if err != nil {
		return 0, 0, err
	}
	defer ex.Close()
	if err := ex.Launch(e.s); err != nil {
		return 0, 0, err
	}
	var gs, es []float64
	for r := 0; r < e.o.runs; r++ {
		t, _, err := timed(e.s, e.e0, e.e1, func() error { return ex.Launch(e.s) })
		if err != nil {
			return 0, 0, err
		}
		gs = append(gs, t/float64(reps))
		t, _, err = timed(e.s, e.e0, e.e1, all)
		if err != nil {
			return 0, 0, err
		}
		es = append(es, t/float64(reps))
	}
	return median(gs), median(es), nil
}

func (e *kbEnv) row(kernel, name string, T int, sec, eager float64, bytes int64, flops float64, bound string) kbRow {
	r := kbRow{Kernel: kernel, Case: name, T: T, Us: sec * 1e6, UsEager: eager * 1e6, Bytes: bytes, Flops: flops, Bound: bound,
		GBps: float64(bytes) / sec / 1e9, TFlops: flops / sec / 1e12}
	if bound == "bandwidth" {
		r.Fraction = float64(bytes) / sec / e.o.bw
	} else {
		r.Fraction = flops / sec / e.o.flops
	}
	return r
}

// Laguna-S-2.1 shapes.
const (
	kbH      = 3072
	kbVocab  = 100352
	kbQKVG   = 72*128 + 2*8*128 + 72 // q, k, v and the per-head gate of a 72-head layer
	kbAttn   = 72 * 128              // o_proj input
	kbDense  = 12288                 // layer 0's MLP width
	kbE      = 256
	kbTopK   = 10
	kbExpert = 1024 // routed and shared expert width
)

type kbMM struct {
	name   string
	n, k   int // output columns, reduction
	swiglu bool
}

var kbMatmuls = []kbMM{
	{"lm_head", kbVocab, kbH, false},
	{"qkvg_proj", kbQKVG, kbH, false},
	{"o_proj", kbH, kbAttn, false},
	{"dense_gate_up+swiglu", kbDense, kbH, true},
	{"dense_down", kbH, kbDense, false},
	{"shared_gate_up+swiglu", kbExpert, kbH, true},
	{"shared_down", kbH, kbExpert, false},
}

func runKernelBench(o kbOpts, w io.Writer) error {
	d, err := cuda.Open(o.device)
	if err != nil {
		return err
	}
	defer d.Close()
	p := d.Props()
	var bwFrom string
	o.bw, bwFrom = roofline(o.bw, p)
	e := &kbEnv{o: o, d: d, k: gpu.NewKernels(d)}
	if e.s, err = d.NewStream(); err != nil {
		return err
	}
	defer e.s.Close()
	if e.e0, err = d.NewEvent(); err != nil {
		return err
	}
	defer e.e0.Close()
	if e.e1, err = d.NewEvent(); err != nil {
		return err
	}
	defer e.e1.Close()
	e.patN = 64 << 20
	pat := make([]uint16, e.patN/2)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range pat {
		pat[i] = cuda.F32ToBF16((r.Float32()*2 - 1) * 0.05)
	}
	if e.pattern, err = d.Alloc(e.patN); err != nil {
		return err
	}
	defer d.Free(e.pattern)
	if err := cuda.Upload(e.s, e.pattern, pat); err != nil {
		return err
	}
	defer e.freeAll()

	rep := kbReport{Device: p.Name, Arch: d.Arch(), Runs: o.runs, BW: o.bw, BWFrom: bwFrom, Flops: o.flops,
		MemClockKHz: p.MemClockKHz, MemBusBits: p.MemBusBits, PeakMemBW: p.PeakMemBandwidth()}
	add := func(rows []kbRow, err error) error {
		e.freeAll()
		rep.Rows = append(rep.Rows, rows...)
		if err == nil && !o.json {
			for _, r := range rows {
				fmt.Fprintf(os.Stderr, "  %s %s T=%d: %.1f us\n", r.Kernel, r.Case, r.T, r.Us)
			}
		}
		return err
	}
	for _, m := range kbMatmuls {
		if err := add(e.benchMatMul(m, []int{1, 8})); err != nil {
			return fmt.Errorf("gemv %s: %w", m.name, err)
		}
	}
	for _, m := range kbMatmuls {
		if m.name == "lm_head" {
			continue // prefill projects only the last token
		}
		if err := add(e.benchMatMul(m, o.gemmTs)); err != nil {
			return fmt.Errorf("gemm %s: %w", m.name, err)
		}
	}
	if err := add(e.benchMoE(append([]int{1}, o.moeTs...))); err != nil {
		return fmt.Errorf("moe: %w", err)
	}
	if e.k.CC() >= 90 {
		for _, t := range o.moeQuants {
			if err := add(e.benchMoEQuant(t, o.moeTs)); err != nil {
				return fmt.Errorf("moe %s: %w", t, err)
			}
		}
	}
	if o.json {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	printKernelBench(w, rep)
	return nil
}

// kbVariant is one kernel choice a prefill row times: a forced mma.sync K
// step (cc 0 keeps lower off the wgmma core) or, on Hopper, lower's
// wgmma choice (the one a plan runs there).
type kbVariant struct {
	label  string
	bk, cc int
}

func (e *kbEnv) gemmVariants(kind string) []kbVariant {
	vs := []kbVariant{{fmt.Sprintf("%s bk=32", kind), 32, 0}, {fmt.Sprintf("%s bk=64", kind), 64, 0}}
	if cc := e.k.CC(); cc >= 90 {
		vs = append(vs, kbVariant{kind + " wgmma", 0, cc})
	}
	return vs
}

// benchMatMul times y = x w^T (bf16) at each T. Where the weights are
// smaller than 8x the L2 cache, calls cycle through copies of them so
// every call streams its weights from HBM, as in a real step.
func (e *kbEnv) benchMatMul(m kbMM, Ts []int) ([]kbRow, error) {
	rows := m.n
	if m.swiglu {
		rows *= 2
	}
	wBytes := int64(rows) * int64(m.k) * 2
	copies := int(min(64, max(1, (8*int64(e.d.Props().L2Bytes)+wBytes-1)/wBytes)))
	ws := make([]cuda.DevicePtr, copies)
	for i := range ws {
		var err error
		if ws[i], err = e.random(wBytes); err != nil {
			return nil, err
		}
	}
	var out []kbRow
	for _, T := range Ts {
		x, err := e.random(int64(T) * int64(m.k) * 2)
		if err != nil {
			return nil, err
		}
		y, err := e.alloc(int64(T) * int64(m.n) * 2)
		if err != nil {
			return nil, err
		}
		flops := 2 * float64(T) * float64(rows) * float64(m.k)
		bytes := wBytes + int64(T)*int64(m.k+m.n)*2
		name := fmt.Sprintf("%s N=%d K=%d", m.name, m.n, m.k)
		vs := []kbVariant{{label: "gemv"}} // the GEMV has no tiles
		if T > gpu.GEMVMaxRows {
			vs = e.gemmVariants("gemm")
		}
		for _, v := range vs {
			a := gpu.MatMulArgs{T: T, K: m.k, N: m.n, X: x, Y: y, XType: cuda.BF16, WType: cuda.BF16, YType: cuda.BF16,
				SwiGLU: m.swiglu, Tile: gpu.MMATile{K: v.bk}, CC: v.cc}
			reps := max(copies, 3)
			if T > gpu.GEMVMaxRows {
				reps = 3
			}
			sec, eager, err := e.time(reps, func(i int) error {
				a.W = ws[i%copies]
				return e.k.MatMul(e.s, a)
			})
			if err != nil {
				return nil, err
			}
			bound := "compute"
			if T <= gpu.GEMVMaxRows {
				bound = "bandwidth"
			}
			out = append(out, e.row(v.label, name, T, sec, eager, bytes, flops, bound))
		}
		if err := e.d.Free(x); err == nil {
			e.forget(x)
		}
		if err := e.d.Free(y); err == nil {
			e.forget(y)
		}
	}
	return out, nil
}

func (e *kbEnv) forget(p cuda.DevicePtr) {
	for i, q := range e.allocs {
		if q == p {
			e.allocs = append(e.allocs[:i], e.allocs[i+1:]...)
			return
		}
	}
}

// benchMoE times the routed experts of one S-2.1 layer (256 experts, top
// 10, H 3072, I 1024): the decode path at T=1 (distinct random experts per
// call, cycling through 16 routings) and the grouped path at larger T.
func (e *kbEnv) benchMoE(Ts []int) ([]kbRow, error) {
	const E, K, H, I = kbE, kbTopK, kbH, kbExpert
	expertBytes := int64(I) * H * 2
	// One allocation for gate and up: the wgmma path wants the up stack
	// right after the gate stack, as a plan lays them out.
	gate, err := e.random(2 * E * expertBytes)
	if err != nil {
		return nil, err
	}
	up := gate.Add(E * expertBytes)
	down, err := e.random(E * expertBytes)
	if err != nil {
		return nil, err
	}
	r := rand.New(rand.NewPCG(3, 4))
	var out []kbRow
	for _, T := range Ts {
		const routings = 16
		calls := 1
		if T <= gpu.GEMVMaxRows {
			calls = routings
		}
		c, err := e.moeCall(r, T, calls)
		if err != nil {
			return nil, err
		}
		idsP, wP, x, y := c.ids, c.wts, c.x, c.y
		flops := 2 * float64(T) * K * 3 * float64(I) * H
		bound, vs := "bandwidth", []kbVariant{{label: "moe-decode"}}
		// Distinct experts of the call's routes, each read once at least.
		bytes := int64(T*K)*3*expertBytes + int64(T)*H*4
		if T > gpu.GEMVMaxRows {
			bound, vs = "compute", e.gemmVariants("moe-grouped")
			bytes = int64(c.used)*3*expertBytes + int64(T)*H*4
		}
		args := func(v kbVariant) gpu.MoEArgs {
			return gpu.MoEArgs{T: T, H: H, I: I, E: E, TopK: K, X: x, Gate: gate, Up: up, Down: down, Out: y,
				XType: cuda.BF16, WType: cuda.BF16, OutType: cuda.BF16, Order: gpu.ExpertsByLoad,
				Tile: gpu.MMATile{K: v.bk}, CC: v.cc, SMs: e.k.SMs(), IDs: idsP, Weights: wP, QMoE: e.o.qmoe}
		}
		// One workspace for every variant, as large as the largest needs
		// (the paths lay theirs out differently).
		var wsBytes int64
		for _, v := range vs {
			n, err := gpu.MoEWorkspaceBytes(args(v))
			if err != nil {
				return nil, err
			}
			wsBytes = max(wsBytes, n)
		}
		wsP, err := e.alloc(wsBytes)
		if err != nil {
			return nil, err
		}
		for _, v := range vs {
			a := args(v)
			a.Workspace = wsP
			sec, eager, err := e.time(calls, func(i int) error {
				a.IDs = idsP.Add(int64(4 * T * K * (i % calls)))
				a.Weights = wP.Add(int64(4 * T * K * (i % calls)))
				return e.k.MoEExperts(e.s, a)
			})
			if err != nil {
				return nil, err
			}
			out = append(out, e.row(v.label, e.moeCase(), T, sec, eager, bytes, flops, bound))
			// Each stage alone, on the first routing (the workspace holds
			// its schedule from the runs above).
			a.IDs, a.Weights = idsP, wP
			stages, err := e.moeStages(a, bound)
			if err != nil {
				return nil, err
			}
			out = append(out, stages...)
		}
		for _, p := range []cuda.DevicePtr{wsP, idsP, wP, x, y} {
			if err := e.d.Free(p); err == nil {
				e.forget(p)
			}
		}
	}
	return out, nil
}

func printKernelBench(w io.Writer, r kbReport) {
	fmt.Fprintf(w, "device: %s (%s); median of %d runs; rooflines %.2f TB/s (%s) and %.0f TFLOP/s\n",
		r.Device, r.Arch, r.Runs, r.BW/1e12, r.BWFrom, r.Flops/1e12)
	if r.PeakMemBW > 0 {
		fmt.Fprintf(w, "memory (driver): %d MHz, %d-bit bus, peak %.2f TB/s\n", r.MemClockKHz/1000, r.MemBusBits, r.PeakMemBW/1e12)
	}
	fmt.Fprintln(w, "bf16 weights and activations, f32 accumulation; Laguna-S-2.1 shapes; us (graph): kernels replayed")
	fmt.Fprintln(w, "from a CUDA graph, the figure rates use; us (eager): launched one by one, host launch cost included")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "kernel\tcase\tT\tus (graph)\tus (eager)\tGB/s\tTFLOP/s\troofline\t")
	for _, x := range r.Rows {
		if x.Bytes == 0 { // a stage of the row above: time only
			fmt.Fprintf(tw, "%s\t%s\t%d\t%.1f\t%.1f\t\t\t\t\n", x.Kernel, x.Case, x.T, x.Us, x.UsEager)
			continue
		}
		bound := "of BW"
		if x.Bound == "compute" {
			bound = "of FLOP/s"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%.1f\t%.1f\t%.0f\t%.1f\t%.1f%% %s\t\n", x.Kernel, x.Case, x.T, x.Us, x.UsEager, x.GBps, x.TFlops, 100*x.Fraction, bound)
	}
	tw.Flush()
}

// benchMoEQuant times the grouped routed experts of one S-2.1 layer with
// quantised stacks (synthetic blocks, as lagc bench --quant makes them) on
// the wgmma path at each T above the decode GEMV's rows; the rate counts
// the quantised bytes of the experts the routes use.
func (e *kbEnv) benchMoEQuant(t quant.Type, Ts []int) ([]kbRow, error) {
	const E, K, H, I = kbE, kbTopK, kbH, kbExpert
	gu, gub, err := e.qsynth(t, 2*E*I, H, 1)
	if err != nil {
		return nil, err
	}
	dn, db, err := e.qsynth(t, E*H, I, 2)
	if err != nil {
		return nil, err
	}
	perExpert := (gub + db) / E
	r := rand.New(rand.NewPCG(5, 6))
	var out []kbRow
	for _, T := range Ts {
		if T <= gpu.GEMVMaxRows {
			continue
		}
		c, err := e.moeCall(r, T, 1)
		if err != nil {
			return nil, err
		}
		a := gpu.MoEArgs{T: T, H: H, I: I, E: E, TopK: K, X: c.x, Out: c.y, XType: cuda.BF16, WType: cuda.BF16, OutType: cuda.BF16,
			Order: gpu.ExpertsByLoad, CC: e.k.CC(), SMs: e.k.SMs(), IDs: c.ids, Weights: c.wts, WQuant: t,
			QGate: gpu.QMatrix{W: gu, Total: 2 * E * I}, QUp: gpu.QMatrix{W: gu, Total: 2 * E * I, Row0: E * I}, QDown: gpu.QMatrix{W: dn, Total: E * H},
			QMoE: e.o.qmoe}
		wsBytes, err := gpu.MoEWorkspaceBytes(a)
		if err != nil {
			return nil, err
		}
		if a.Workspace, err = e.alloc(wsBytes); err != nil {
			return nil, err
		}
		sec, eager, err := e.time(1, func(int) error { return e.k.MoEExperts(e.s, a) })
		if err != nil {
			return nil, err
		}
		bytes := int64(c.used)*perExpert + int64(T)*H*4
		flops := 2 * float64(T) * K * 3 * float64(I) * H
		out = append(out, e.row("moe-grouped "+t.String(), e.moeCase(), T, sec, eager, bytes, flops, "compute"))
		stages, err := e.moeStages(a, "compute")
		if err != nil {
			return nil, err
		}
		out = append(out, stages...)
	}
	return out, nil
}

// kbMoECall is a MoE case's device inputs: `calls` routings of T tokens
// (kbRoutes: each token's top kbTopK of kbE experts, weights 0.1) one
// after another, x [T, kbH] bf16 and y, and how many distinct experts the
// routes use.
type kbMoECall struct {
	ids, wts, x, y cuda.DevicePtr
	used           int
}

// moeCase names the MoE cases' shape (and their routes' skew where not
// uniform).
func (e *kbEnv) moeCase() string {
	c := fmt.Sprintf("E=%d k=%d H=%d I=%d", kbE, kbTopK, kbH, kbExpert)
	if e.o.moeSkew > 0 {
		c += fmt.Sprintf(" skew=%g", e.o.moeSkew)
	}
	return c
}

// kbRoutes is n tokens' expert ids, k distinct ones of E a token. Skew 0:
// uniformly at random. Skew > 0: each expert gets a bias drawn once from
// a normal of that spread, and a token takes the k highest of bias plus a
// standard normal draw an expert, as a random router's logits would.
func kbRoutes(r *rand.Rand, n, E, k int, skew float64) []int32 {
	ids := make([]int32, 0, n*k)
	if skew == 0 {
		for range n {
			for _, id := range r.Perm(E)[:k] {
				ids = append(ids, int32(id))
			}
		}
		return ids
	}
	bias := make([]float64, E)
	for i := range bias {
		bias[i] = skew * r.NormFloat64()
	}
	score := make([]float64, E)
	order := make([]int, E)
	for range n {
		for i := range score {
			score[i], order[i] = bias[i]+r.NormFloat64(), i
		}
		slices.SortFunc(order, func(a, b int) int { return cmp.Compare(score[b], score[a]) })
		for _, id := range order[:k] {
			ids = append(ids, int32(id))
		}
	}
	return ids
}

func (e *kbEnv) moeCall(r *rand.Rand, T, calls int) (kbMoECall, error) {
	const E, K = kbE, kbTopK
	ids := kbRoutes(r, calls*T, E, K, e.o.moeSkew)
	wts := make([]float32, len(ids))
	used := map[int32]bool{}
	for i, id := range ids {
		wts[i] = 0.1
		used[id] = true
	}
	var c kbMoECall
	var err error
	if c.ids, err = e.alloc(int64(4 * len(ids))); err != nil {
		return c, err
	}
	if c.wts, err = e.alloc(int64(4 * len(wts))); err != nil {
		return c, err
	}
	if err := cuda.Upload(e.s, c.ids, ids); err != nil {
		return c, err
	}
	if err := cuda.Upload(e.s, c.wts, wts); err != nil {
		return c, err
	}
	if c.x, err = e.random(int64(T) * kbH * 2); err != nil {
		return c, err
	}
	if c.y, err = e.alloc(int64(T) * kbH * 2); err != nil {
		return c, err
	}
	c.used = len(used)
	return c, nil
}

// moeStages times each launch of a's routed experts alone (the workspace
// holds the schedule a timed call of a left there), then each in the call:
// the call's first i launches as one graph for each i, a launch's row the
// difference from the prefix before it. Alone, a stage runs after itself;
// in the call after the stage before it (its L2 contents, its tail), so
// the rows "in call" add up to the whole call where the stages alone may
// not.
func (e *kbEnv) moeStages(a gpu.MoEArgs, bound string) ([]kbRow, error) {
	ls, err := e.k.MoELaunches(a)
	if err != nil {
		return nil, err
	}
	var out []kbRow
	for _, l := range ls {
		sec, eager, err := e.time(3, func(int) error { return l.Launch(e.s) })
		if err != nil {
			return nil, fmt.Errorf("%s: %w", l.Name, err)
		}
		out = append(out, e.row("  stage", l.Name, a.T, sec, eager, 0, 0, bound))
	}
	in, err := prefixMarginals(len(ls), func(n int) (float64, float64, error) {
		return e.time(1, func(int) error {
			for _, p := range ls[:n] {
				if err := p.Launch(e.s); err != nil {
					return err
				}
			}
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	for i, l := range ls {
		out = append(out, e.row("  in call", l.Name, a.T, in[i][0], in[i][1], 0, 0, bound))
	}
	return out, nil
}

// prefixMarginals times the first n of a sequence's steps, for n = 1..len,
// with prefix (graph and eager seconds) and returns each step's share: its
// prefix's time less the one before. A share may come out slightly
// negative where a step costs less than the runs' spread.
func prefixMarginals(steps int, prefix func(n int) (graph, eager float64, err error)) ([][2]float64, error) {
	out := make([][2]float64, steps)
	var last [2]float64
	for i := range out {
		g, e, err := prefix(i + 1)
		if err != nil {
			return nil, fmt.Errorf("the first %d launches: %w", i+1, err)
		}
		out[i] = [2]float64{g - last[0], e - last[1]}
		last = [2]float64{g, e}
	}
	return out, nil
}

// qsynth allocates a quantised matrix of t (rows x K, the device layout)
// filled with synthetic blocks, and returns it with its size in bytes.
func (e *kbEnv) qsynth(t quant.Type, rows, K int, seed uint32) (cuda.DevicePtr, int64, error) {
	n, err := lower.QuantDeviceBytes(t, rows, K)
	if err != nil {
		return 0, 0, err
	}
	p, err := e.alloc(n)
	if err != nil {
		return 0, 0, err
	}
	return p, n, e.k.QSynth(e.s, t, p, rows, K, seed)
}
