package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"lagc/config"
	"lagc/exec/cpu"
	"lagc/exec/gpu"
	"lagc/exec/routes"
	"lagc/lower"
	"lagc/models"
)

func runPlanCmd(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	planStdout = &out
	defer func() { planStdout = os.Stdout }()
	code := runMain(args, &out, &errb)
	return out.String(), errb.String(), code
}

func TestPlanCommand(t *testing.T) {
	out, errs, code := runPlanCmd(t, "plan", "--preset", "synthetic-tiny", "--chunk", "16", "--ctx", "40")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"plan laguna: dtype bf16, context 40", "decode T=1", "prefill T=16", "attn_prefill"} {
		if !strings.Contains(out, want) {
			t.Errorf("plan output lacks %q", want)
		}
	}
	out, errs, code = runPlanCmd(t, "plan", "--preset", "synthetic-tiny", "--json", "--dtype", "f32")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	p, err := lower.ReadJSON(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	if p.DType != "f32" || p.MaxContext != 64 || p.Prefill.Tokens != lower.DefaultChunk {
		t.Errorf("plan: dtype %s context %d chunk %d", p.DType, p.MaxContext, p.Prefill.Tokens)
	}
	out, errs, code = runPlanCmd(t, "plan", "--preset", "synthetic-tiny", "--ctx", "40", "--slots", "12", "--batch", "3,9")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"12 sequence slots", "batch buckets [1 2 4 8 16]", "batched decode of 4 sequences", "batched decode of 16 sequences", "seq+0"} {
		if !strings.Contains(out, want) {
			t.Errorf("plan --slots 12 --batch 3,9 output lacks %q", want)
		}
	}
	const soloNote = "runs a step of one decode row on the decode schedule"
	if strings.Contains(out, soloNote) {
		t.Errorf("plan --batch 3,9 notes the lone row's program: %q", soloNote)
	}
	// Bucket 1's program is printed with a note that the executor runs a
	// lone row on the decode schedule instead.
	if out, errs, code = runPlanCmd(t, "plan", "--preset", "synthetic-tiny", "--ctx", "40", "--slots", "2", "--batch", "1"); code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	} else if !strings.Contains(out, soloNote) || !strings.Contains(out, "batched decode of 1 sequences") {
		t.Errorf("plan --batch 1 output lacks the bucket or the note %q", soloNote)
	}
	for _, c := range []struct {
		args []string
		want string // in the error
	}{
		{[]string{"plan"}, "usage error"},
		{[]string{"plan", "--preset", "synthetic-tiny", "--dtype", "f16"}, `--dtype "f16"`},
		{[]string{"plan", "--preset", "synthetic-tiny", "--chunk", "0"}, "--chunk 0: must be positive"},
		{[]string{"plan", "--preset", "synthetic-tiny", "--ctx", "-1"}, "--ctx -1: must not be negative"},
		{[]string{"plan", "--preset", "synthetic-tiny", "--sms", "0"}, "--sms 0"},
		{[]string{"plan", "--preset", "synthetic-tiny", "--cc", "0"}, "--cc 0"},
		{[]string{"plan", "--preset", "synthetic-tiny", "--gpu-mem", "NaN"}, "--gpu-mem NaN: want a number >= 0"},
		{[]string{"plan", "--preset", "synthetic-tiny", "--slots", "2", "--batch", "3"}, `--batch "3"`},
		{[]string{"plan", "--preset", "synthetic-tiny", "--slots", "2000"}, "--slots 2000"},
	} {
		if _, errs, code := runPlanCmd(t, c.args...); code != 2 || !strings.Contains(errs, c.want) {
			t.Errorf("%v: exit %d (%q), want 2 naming %s", c.args, code, errs, c.want)
		}
	}
}

func TestBenchUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string // in the error
	}{
		{[]string{"bench"}, "give --preset NAME --synthetic or --model"},
		{[]string{"bench", "--preset", "synthetic-tiny"}, "add --synthetic"},
		{[]string{"bench", "--preset", "synthetic-tiny", "--synthetic", "--runs", "0"}, "--runs 0: must be positive"},
		{[]string{"bench", "--preset", "synthetic-tiny", "--synthetic", "--decode-tokens", "0"}, "--decode-tokens 0"},
		{[]string{"bench", "--preset", "synthetic-tiny", "--synthetic", "--chunk", "-3"}, "--chunk -3"},
		{[]string{"bench", "--preset", "synthetic-tiny", "--synthetic", "--layers", "-1"}, "--layers -1: must not be negative"},
		{[]string{"bench", "--preset", "synthetic-tiny", "--synthetic", "--prefill", "12,x"}, `--prefill "12,x"`},
		{[]string{"bench", "--preset", "synthetic-tiny", "--synthetic", "--dtype", "f16"}, `--dtype "f16"`},
		{[]string{"bench", "--device", "tpu"}, `--device "tpu"`},
		{[]string{"bench", "--device", "cpu", "--preset", "synthetic-tiny", "--synthetic"}, "not --preset/--synthetic"},
		{[]string{"bench", "--device", "cpu", "--threads", "-1"}, "--threads -1: must not be negative"},
		{[]string{"bench", "--device", "cpu", "--ctx", "0"}, "--ctx 0: must be positive"},
		{[]string{"bench", "--device", "cpu", "--layers", "2"}, "GPU-only"},
		{[]string{"bench", "--device", "cpu", "--prefill", "0"}, `--prefill "0"`},
		{[]string{"bench", "--preset", "synthetic-tiny", "--synthetic", "--batch", "0"}, `--batch "0"`},
		{[]string{"bench", "--preset", "synthetic-tiny", "--synthetic", "--batch", "1,x"}, `--batch "1,x"`},
		{[]string{"bench", "--preset", "synthetic-tiny", "--synthetic", "--bw", "-1"}, "--bw -1: want a number >= 0"},
		{[]string{"bench", "--preset", "synthetic-tiny", "--synthetic", "--bw", "NaN"}, "--bw NaN"},
	} {
		if _, errs, code := runPlanCmd(t, c.args...); code != 2 || !strings.Contains(errs, c.want) {
			t.Errorf("%v: exit %d (%q), want 2 naming %s", c.args, code, errs, c.want)
		}
	}
}

// TestKernelBenchUsage: bad flags are usage errors (exit 2, naming the
// flag) before any device is opened.
func TestKernelBenchUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"kernel-bench", "--moe-quant", "q2_k"}, "--moe-quant"},
		{[]string{"kernel-bench", "--moe-quant", "q4_k,bogus"}, "--moe-quant"},
		{[]string{"kernel-bench", "--moe-t", "2048,x"}, "--moe-t"},
		{[]string{"kernel-bench", "--runs", "0"}, "--runs"},
		{[]string{"kernel-bench", "--moe-skew", "-1"}, "--moe-skew"},
		{[]string{"kernel-bench", "--moe-skew", "NaN"}, "--moe-skew"},
		{[]string{"kernel-bench", "--bw", "-1"}, "--bw"},
		{[]string{"kernel-bench", "--bw", "NaN"}, "--bw"},
		{[]string{"kernel-bench", "--flops", "NaN"}, "--flops"},
		{[]string{"kernel-bench", "extra"}, "no arguments"},
	} {
		if _, errs, code := runPlanCmd(t, c.args...); code != 2 || !strings.Contains(errs, c.want) {
			t.Errorf("%v: exit %d (%q), want 2 naming %s", c.args, code, errs, c.want)
		}
	}
}

// TestKernelBenchQMoEShape: a bad LAGC_QMOE_SHAPE fails kernel-bench
// (exit 1, naming the variable) before any device is opened.
func TestKernelBenchQMoEShape(t *testing.T) {
	t.Setenv("LAGC_QMOE_SHAPE", "rows=x")
	if _, errs, code := runPlanCmd(t, "kernel-bench"); code != 1 || !strings.Contains(errs, "LAGC_QMOE_SHAPE") || strings.Contains(errs, "driver") {
		t.Errorf("exit %d (%q), want 1 naming LAGC_QMOE_SHAPE and no device", code, errs)
	}
}

// TestCPUBench runs the CPU bench on the bundled model, briefly.
func TestCPUBench(t *testing.T) {
	var out bytes.Buffer
	f := &benchFlags{device: "cpu", runs: 1, tokens: 2, ctx: 3, prefill: "5,9", seed: 1, jsonOut: true, threads: 1}
	if err := runCPUBench(&out, f, true); err != nil {
		t.Fatal(err)
	}
	var r cpuBenchReport
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if r.Model != "bundled model" || r.Threads != 1 || r.Kernels != cpu.Kernels() || r.Context != 3 || !(r.Decode.TokS > 0) || r.Decode.Tokens != 1 ||
		len(r.Prefill) != 2 || r.Prefill[1].Tokens != 9 || !(r.Prefill[1].Ms > 0) {
		t.Errorf("report %+v", r)
	}
	// the routing of the smallest prefill: every MoE layer's 5 x top-k
	// routes over at most E experts, none on one expert more than 5 times
	rt := r.PrefillRoutes
	if rt == nil || rt.Tokens != 5 || len(rt.Layers) == 0 {
		t.Fatalf("routes %+v", rt)
	}
	for _, l := range rt.Layers {
		if l.Routes != 5*rt.TopK || l.Used < rt.TopK || l.Used > rt.Experts || l.Busiest < 1 || l.Busiest > 5 ||
			l.Tiles128 != l.Used || l.Tiles96 != l.Used || l.Tiles112 != l.Used { // 5 routes at most: one row tile an expert
			t.Errorf("layer %+v of %d experts, top-%d", l, rt.Experts, rt.TopK)
		}
	}
	if rt.Tiles128Median < rt.TopK || rt.Tiles96Median != rt.Tiles128Median || rt.Tiles112Median != rt.Tiles128Median {
		t.Errorf("median row tiles %d (128 rows), %d (96), %d (112)", rt.Tiles128Median, rt.Tiles96Median, rt.Tiles112Median)
	}
	out.Reset()
	f.jsonOut = false
	if err := runCPUBench(&out, f, false); err != nil { // --prefill not given: the CPU defaults
		t.Fatal(err)
	}
	for _, want := range []string{"bundled model on the CPU, 1 threads, kernels " + cpu.Kernels(), "decode at context 3", "\n             128", "\n             512",
		"prefill 128 routing: ", "prefill 128 grouped-GEMM row tiles a MoE layer"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// TestDepthScale: the full-depth estimate takes each layer of the full
// model from the benched layers of its kind.
func TestDepthScale(t *testing.T) {
	full, _ := config.Preset("laguna-s-2.1")
	benched, _ := full.FirstLayers(2) // dense/full, moe/sliding
	entries := []gpu.ProfileEntry{
		{Class: "decode", Layer: -1, GPU: 10 * time.Microsecond},
		{Class: "decode", Layer: 0, GPU: 20 * time.Microsecond},
		{Class: "decode", Layer: 1, GPU: 30 * time.Microsecond},
		{Class: "prefill", Layer: 1, GPU: time.Second}, // other class: ignored
	}
	scale, layer := depthScale(entries, "decode", benched, full)
	// Full depth: 10 + 20 (layer 0) + 47 MoE layers at 30 each.
	want := (10.0 + 20 + 47*30) / 60
	if d := scale - want; d > 1e-9 || d < -1e-9 {
		t.Errorf("scale %g, want %g", scale, want)
	}
	if d := layer - 0.5; d > 1e-9 || d < -1e-9 {
		t.Errorf("MoE layer share %g, want 0.5", layer)
	}
}

// TestDecodeBytes counts the bytes of one decode step of the tiny model by
// hand: active experts only, one embedding row, the visible KV.
func TestDecodeBytes(t *testing.T) {
	cfg := config.Tiny()
	g, err := models.Build("laguna.yaml", models.LagunaYAML, cfg, models.BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := lower.Lower(g, lower.Options{MaxContext: 64, Chunk: 8})
	if err != nil {
		t.Fatal(err)
	}
	total, per := decodeBytes(p, 10)
	H, V, d, nkv := cfg.HiddenSize, cfg.VocabSize, cfg.HeadDim, cfg.NumKVHeads
	// Outside the layers: one embedding row, the final norm (f32), the LM head.
	if want := int64(2*H + 4*H + 2*V*H); per[-1] != want {
		t.Errorf("outside layers: %d bytes, want %d", per[-1], want)
	}
	// Layer 1 (MoE, sliding window 5): norms f32, projections, router, 2 of
	// 6 experts, the shared expert, 5 visible positions of K and V.
	nh := cfg.Heads(1)
	attn := 2 * (nh*d*H + 2*nkv*d*H + cfg.GateRows(1)*H + H*nh*d)
	norms := 4 * (2*H + 2*d)
	router := 2*cfg.NumExperts*H + 4*cfg.NumExperts
	experts := 2 * 3 * cfg.NumExpertsPerTok * cfg.MoEIntermediateSize * H
	shared := 2 * 3 * cfg.SharedExpertSize * H
	kv := 2 * 5 * nkv * d * 2
	if want := int64(attn + norms + router + experts + shared + kv); per[1] != want {
		t.Errorf("layer 1: %d bytes, want %d", per[1], want)
	}
	var sum int64
	for _, b := range per {
		sum += b
	}
	if sum != total {
		t.Errorf("total %d, layers sum to %d", total, sum)
	}
}

// TestPlanTail: lagc plan --at N --tail last prints the prefill chunk with
// its tail on one row (the argmax over one row of logits), --tail all over
// every row; another value is a usage error.
func TestPlanTail(t *testing.T) {
	for _, c := range []struct{ tail, want string }{{"last", "argmax<float> grid 1,"}, {"all", "argmax<float> grid 5,"}} {
		out, errs, code := runPlanCmd(t, "plan", "--preset", "synthetic-tiny", "--chunk", "16", "--ctx", "40", "--at", "5", "--tail", c.tail)
		if code != 0 {
			t.Fatalf("--tail %s: exit %d: %s", c.tail, code, errs)
		}
		sec := out[strings.Index(out, "prefill T=5"):]
		if !strings.Contains(sec, c.want) {
			t.Errorf("--tail %s: the T=5 chunk lacks %q", c.tail, c.want)
		}
	}
	if _, errs, code := runPlanCmd(t, "plan", "--preset", "synthetic-tiny", "--at", "5", "--tail", "most"); code != 2 || !strings.Contains(errs, "--tail") {
		t.Errorf("--tail most: exit %d: %s", code, errs)
	}
}

// TestMedianRuns: the median of the runs' timings, and the first error
// ends the runs.
func TestMedianRuns(t *testing.T) {
	i := 0
	times := []time.Duration{5, 1, 3}
	got, err := medianRuns(3, func() (time.Duration, error) { i++; return times[i-1], nil })
	if err != nil || got != 3 || i != 3 {
		t.Errorf("median %v after %d runs, %v; want 3 after 3", got, i, err)
	}
	i = 0
	_, err = medianRuns(3, func() (time.Duration, error) {
		i++
		if i == 2 {
			return 0, errors.New("boom")
		}
		return 1, nil
	})
	if err == nil || i != 2 {
		t.Errorf("error %v after %d runs; want boom after 2", err, i)
	}
}

// TestPrintBenchAblation: a bench run with launches left out by
// LAGC_SKIP_KERNELS says so in its header, and one without does not.
func TestPrintBenchAblation(t *testing.T) {
	r := &benchReport{Model: "m", Weights: "synthetic", DType: "bf16", Layers: 2, FullLayers: 48, Runs: 1, Bandwidth: 4.3e12}
	var b bytes.Buffer
	printBench(&b, r)
	if strings.Contains(b.String(), "ABLATION") {
		t.Errorf("no launch left out, yet:\n%s", b.String())
	}
	r.SkipKernels, r.SkippedLaunches = "^attn_decode$", 4
	b.Reset()
	printBench(&b, r)
	if want := `ABLATION: LAGC_SKIP_KERNELS="^attn_decode$" left out 4 launches: the outputs are wrong`; !strings.Contains(b.String(), want) {
		t.Errorf("output lacks %q:\n%s", want, b.String())
	}
}

// TestWarnSkipKernels: run and serve warn on a GPU when LAGC_SKIP_KERNELS
// is set, and say nothing on the CPU (which never reads it) or unset.
func TestWarnSkipKernels(t *testing.T) {
	var b bytes.Buffer
	t.Setenv(gpu.EnvSkipKernels, "")
	warnSkipKernels(&b, "NVIDIA H200")
	t.Setenv(gpu.EnvSkipKernels, "attn_decode")
	warnSkipKernels(&b, "cpu")
	if b.Len() != 0 {
		t.Errorf("unset or on the CPU: %q", b.String())
	}
	warnSkipKernels(&b, "NVIDIA H200")
	if want := `warning: LAGC_SKIP_KERNELS="attn_decode" leaves kernels out (a timing ablation): the output is wrong`; !strings.Contains(b.String(), want) {
		t.Errorf("got %q, want %q", b.String(), want)
	}
}

// TestBenchProfile: --profile keeps the decode run's decode steps and the
// prefill run's chunk, not the decode run's context prefill (which would
// add a second prefill to the class), and both runs' step counts.
func TestBenchProfile(t *testing.T) {
	ms := time.Millisecond
	dec := []gpu.ProfileEntry{
		{Class: lower.Decode, Node: "blk.0.out", Op: "moe_grouped", Launcher: "moe_gateup_gemv", Layer: 0, Launches: 8, GPU: 2 * ms},
		{Class: lower.Prefill, Node: "blk.0.out", Op: "moe_grouped", Launcher: "gemm_wgmma_q", Layer: 0, Launches: 1, GPU: 5 * ms},
	}
	pre := []gpu.ProfileEntry{
		{Class: lower.Prefill, Node: "blk.0.out", Op: "moe_grouped", Launcher: "gemm_wgmma", Layer: 0, Launches: 1, GPU: 9 * ms},
	}
	got, steps := benchProfile(dec, map[string]int{lower.Decode: 8, lower.Prefill: 1}, pre, map[string]int{lower.Prefill: 1})
	want := []gpu.ProfileEntry{dec[0], pre[0]}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("entries %+v, want %+v", got, want)
	}
	if !reflect.DeepEqual(steps, map[string]int{lower.Decode: 8, lower.Prefill: 1}) {
		t.Errorf("steps %v", steps)
	}
	p, err := gpu.BuildProfile(got, steps)
	if err != nil {
		t.Fatal(err)
	}
	if c := strings.Join(p.Comments, "; "); !strings.Contains(c, "decode steps: 8") || !strings.Contains(c, "prefill steps: 1") {
		t.Errorf("comments %q", c)
	}
	var prefill int64
	for _, s := range p.Sample {
		if s.Label["class"][0] == lower.Prefill {
			prefill += s.Value[1]
		}
	}
	if prefill != (9 * ms).Nanoseconds() {
		t.Errorf("prefill class holds %d ns, want the prefill run's %d", prefill, (9 * ms).Nanoseconds())
	}
}

// TestRoutesSummary: the experts used a layer (least, median, most) and
// the median layer's busiest expert, whatever the layers' order.
func TestRoutesSummary(t *testing.T) {
	for _, c := range []struct {
		layers               []routes.Layer
		lo, med, hi, busiest int
	}{
		{[]routes.Layer{{Layer: 1, Used: 200, Busiest: 90}}, 200, 200, 200, 90},
		{[]routes.Layer{{Layer: 1, Used: 256, Busiest: 95}, {Layer: 2, Used: 40, Busiest: 900}, {Layer: 3, Used: 120, Busiest: 300}},
			40, 120, 256, 300},
	} {
		r := &routesReport{Tokens: 2048, TopK: 10, Experts: 256, Layers: c.layers}
		if lo, med, hi, b := r.summary(); lo != c.lo || med != c.med || hi != c.hi || b != c.busiest {
			t.Errorf("%+v: summary %d %d %d %d, want %d %d %d %d", c.layers, lo, med, hi, b, c.lo, c.med, c.hi, c.busiest)
		}
	}
	r := &routesReport{Layers: []routes.Layer{{Layer: 1, Tiles128: 270, Tiles96: 300, Tiles112: 280}, {Layer: 2, Tiles128: 256, Tiles96: 290, Tiles112: 266},
		{Layer: 3, Tiles128: 262, Tiles96: 310, Tiles112: 259}}}
	if t128, t96, t112 := r.tiles(); t128 != 262 || t96 != 300 || t112 != 266 {
		t.Errorf("median tiles %d, %d, %d; want 262, 300, 266", t128, t96, t112)
	}
}

// TestRoutesCollapsed: the warning when the median layer's routes reach
// under half the experts they could (all of them, or as many as there are
// routes), and none otherwise.
func TestRoutesCollapsed(t *testing.T) {
	for _, c := range []struct {
		tokens, experts int
		used            []int
		want            bool
	}{
		{2048, 256, []int{11, 10, 11}, true}, // the old synthetic q4_k weights
		{2048, 256, []int{256, 252, 235}, false},
		{2048, 256, []int{256, 100, 127}, true}, // median 127 < 128
		{2048, 256, []int{256, 100, 128}, false},
		{4, 256, []int{21}, false}, // 40 routes: 21 of the 40 they could reach
		{4, 256, []int{19}, true},
		{64, 8, []int{8}, false},
	} {
		var ls []routes.Layer
		for i, u := range c.used {
			ls = append(ls, routes.Layer{Layer: i + 1, Used: u, Busiest: 1})
		}
		r := &routesReport{Tokens: c.tokens, TopK: 10, Experts: c.experts, Layers: ls}
		var b strings.Builder
		r.print(&b)
		if got := strings.Contains(b.String(), "warning: the routing collapsed"); got != c.want || r.collapsed() != c.want {
			t.Errorf("%d tokens, %d experts, used %v: warned %v (collapsed() %v), want %v:\n%s", c.tokens, c.experts, c.used, got,
				r.collapsed(), c.want, b.String())
		}
	}
}

// TestKBRoutes: kernel-bench's routes are k distinct experts a token in
// range; uniform ones keep every expert under a 128-row tile at 2048
// tokens, skewed ones (a random router's bias) load the busiest expert
// past it, as the synthetic S-2.1 weights do.
func TestKBRoutes(t *testing.T) {
	const n, E, k = 2048, 256, 10
	busiest := func(skew float64) int {
		ids := kbRoutes(rand.New(rand.NewPCG(5, 6)), n, E, k, skew)
		if len(ids) != n*k {
			t.Fatalf("skew %g: %d ids, want %d", skew, len(ids), n*k)
		}
		count := make([]int, E)
		for tok := range n {
			seen := map[int32]bool{}
			for _, id := range ids[tok*k : (tok+1)*k] {
				if id < 0 || id >= E || seen[id] {
					t.Fatalf("skew %g: token %d routes %v", skew, tok, ids[tok*k:(tok+1)*k])
				}
				seen[id] = true
				count[id]++
			}
		}
		return slices.Max(count)
	}
	u, s := busiest(0), busiest(0.15)
	if u >= 128 || s <= 128 {
		t.Errorf("busiest expert %d routes uniformly, %d at skew 0.15: want under and over 128", u, s)
	}
	// Uniform routes are the ones kernel-bench always drew (its figures
	// stay comparable): a permutation's first k a token.
	r := rand.New(rand.NewPCG(7, 8))
	got := kbRoutes(rand.New(rand.NewPCG(7, 8)), 3, E, k, 0)
	for tok := range 3 {
		for j, id := range r.Perm(E)[:k] {
			if got[tok*k+j] != int32(id) {
				t.Fatalf("uniform routes %v differ from the permutations'", got)
			}
		}
	}
}

// TestPrefixMarginals: kernel-bench's "in call" rows are each prefix's time
// less the one before, so they add up to the whole sequence's; an error
// names how far the sequence got.
func TestPrefixMarginals(t *testing.T) {
	stage := [][2]float64{{1e-5, 2e-5}, {3e-4, 3.5e-4}, {2e-6, 9e-6}}
	var asked []int
	got, err := prefixMarginals(len(stage), func(n int) (float64, float64, error) {
		asked = append(asked, n)
		var g, e float64
		for _, s := range stage[:n] {
			g, e = g+s[0], e+s[1]
		}
		return g, e, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(asked, []int{1, 2, 3}) {
		t.Errorf("prefixes timed %v, want 1, 2, 3", asked)
	}
	for i := range stage {
		for j := range 2 {
			if math.Abs(got[i][j]-stage[i][j]) > 1e-12 {
				t.Errorf("step %d: %v, want %v", i, got[i], stage[i])
			}
		}
	}
	_, err = prefixMarginals(3, func(n int) (float64, float64, error) {
		if n == 2 {
			return 0, 0, errors.New("launch failed")
		}
		return 1, 1, nil
	})
	if err == nil || !strings.Contains(err.Error(), "first 2 launches: launch failed") {
		t.Errorf("error %v, want the prefix named", err)
	}
}
