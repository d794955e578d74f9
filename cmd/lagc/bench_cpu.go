package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"text/tabwriter"
	"time"

	"lagc/engine"
	"lagc/exec/cpu"
	"lagc/internal/cputime"
)

// cpuBenchReport is what `lagc bench --device cpu` measures; --json prints it.
type cpuBenchReport struct {
	Model   string    `json:"model"`
	Device  string    `json:"device"`
	Threads int       `json:"threads"`
	Kernels string    `json:"kernels"`
	Runs    int       `json:"runs"`
	Context int       `json:"decode_context"`
	Decode  cpuRate   `json:"decode"`
	Prefill []cpuRate `json:"prefill"`
	// PrefillRoutes: how the smallest prefill's tokens spread over each
	// MoE layer's experts (the CPU executor's CensusRoutes).
	PrefillRoutes *routesReport `json:"prefill_routes,omitempty"`
}

// cpuRate is one measurement (the median run): wall and process CPU ms for
// Tokens tokens (decode: per token).
type cpuRate struct {
	Tokens int     `json:"tokens"`
	Ms     float64 `json:"ms"`
	TokS   float64 `json:"tok_per_s"`
	CPUMs  float64 `json:"cpu_ms"`
}

// timing is one run: wall time and the process's CPU time.
type timing struct{ wall, cpu time.Duration }

// medianRate returns the run of median wall time as the rate of tokens.
func medianRate(runs []timing, tokens int) cpuRate {
	sort.Slice(runs, func(i, j int) bool { return runs[i].wall < runs[j].wall })
	m := runs[len(runs)/2]
	s := m.wall.Seconds()
	return cpuRate{Tokens: tokens, Ms: 1e3 * s, TokS: float64(tokens) / s, CPUMs: 1e3 * m.cpu.Seconds()}
}

// cpuPrefillDefault replaces the GPU's prefill lengths when --prefill is
// not given: the reference executor would take minutes over 8192 tokens.
const cpuPrefillDefault = "128,512"

// runCPUBench times the CPU reference executor on a checkpoint (the
// bundled model without --model): greedy decode steps after a prefill of
// --ctx tokens, and prefills of each --prefill length in one step.
func runCPUBench(w io.Writer, f *benchFlags, prefillSet bool) error {
	if f.preset != "" || f.synthetic {
		return fmt.Errorf("%w: --device cpu benches a checkpoint (--model, default the bundled model), not --preset/--synthetic", errUsage)
	}
	if f.profile != "" || f.layers != 0 {
		return fmt.Errorf("%w: --profile and --layers are GPU-only", errUsage)
	}
	if err := checkFlagRules(positive("--runs", f.runs), positive("--decode-tokens", f.tokens), positive("--ctx", f.ctx),
		notNegative("--threads", f.threads)); err != nil {
		return err
	}
	spec := f.prefill
	if !prefillSet {
		spec = cpuPrefillDefault
	}
	var sizes []int
	for _, s := range splitList(spec) {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return fmt.Errorf("%w: --prefill %q: positive token counts", errUsage, spec)
		}
		sizes = append(sizes, n)
	}
	ck, name, err := openModelCheckpoint(f.model, false)
	if err != nil {
		return err
	}
	maxCtx := max(f.ctx+f.tokens+1, maxInts(sizes))
	m, err := engine.OpenCheckpoint(ck, engine.Options{Device: "cpu", Passes: splitList(f.passes), Disable: splitList(f.disable), MaxContext: maxCtx})
	if err != nil {
		return err
	}
	defer m.Close()
	if maxCtx > m.Config.MaxPositionEmbeddings {
		return fmt.Errorf("%w: the bench needs %d positions; the model has %d", errUsage, maxCtx, m.Config.MaxPositionEmbeddings)
	}
	cpu.SetMaxThreads(f.threads)
	defer cpu.SetMaxThreads(0)
	rep := &cpuBenchReport{Model: name, Device: "cpu", Threads: cpu.Threads(), Kernels: cpu.Kernels(), Runs: f.runs, Context: f.ctx}

	rng := rand.New(rand.NewPCG(f.seed, 7))
	toks := make([]int32, max(f.ctx, maxInts(sizes)))
	for i := range toks {
		toks[i] = int32(rng.IntN(m.Config.VocabSize))
	}
	be := m.Backend
	// decode times one greedy step (the mean of --decode-tokens).
	decode := func() (timing, error) {
		be.Reset()
		_, next, err := be.Forward(toks[:f.ctx])
		if err != nil {
			return timing{}, err
		}
		tok := next[len(next)-1]
		t0, c0 := time.Now(), cputime.Process()
		for i := 0; i < f.tokens; i++ {
			if _, next, err = be.Forward([]int32{tok}); err != nil {
				return timing{}, err
			}
			tok = next[0]
		}
		n := time.Duration(f.tokens)
		return timing{time.Since(t0) / n, (cputime.Process() - c0) / n}, nil
	}
	prefill := func(n int) (timing, error) {
		be.Reset()
		t0, c0 := time.Now(), cputime.Process()
		_, _, err := be.Forward(toks[:n])
		return timing{time.Since(t0), cputime.Process() - c0}, err
	}
	if _, err := decode(); err != nil { // warm up
		return err
	}
	var ts []timing
	for r := 0; r < f.runs; r++ {
		t, err := decode()
		if err != nil {
			return err
		}
		ts = append(ts, t)
	}
	rep.Decode = medianRate(ts, 1)
	for _, n := range sizes {
		ts = ts[:0]
		for r := 0; r < f.runs; r++ {
			t, err := prefill(n)
			if err != nil {
				return err
			}
			ts = append(ts, t)
		}
		rep.Prefill = append(rep.Prefill, medianRate(ts, n))
	}
	if c, ok := be.(routeCensus); ok && len(sizes) > 0 {
		var err error
		if rep.PrefillRoutes, err = censusReport(c, toks[:slices.Min(sizes)], m.Config); err != nil {
			return err
		}
	}
	if f.jsonOut {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	fmt.Fprintf(w, "lagc bench: %s on the CPU, %d threads, kernels %s, median of %d runs\n", rep.Model, rep.Threads, rep.Kernels, rep.Runs)
	fmt.Fprintf(w, "decode at context %d: %.3f ms/token (CPU time %.3f ms), %.0f tok/s\n", rep.Context, rep.Decode.Ms, rep.Decode.CPUMs, rep.Decode.TokS)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "prefill tokens\tms\tCPU ms\ttok/s\t")
	for _, p := range rep.Prefill {
		fmt.Fprintf(tw, "%d\t%.2f\t%.2f\t%.0f\t\n", p.Tokens, p.Ms, p.CPUMs, p.TokS)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	rep.PrefillRoutes.print(w)
	return nil
}
