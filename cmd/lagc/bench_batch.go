package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"lagc/config"
	"lagc/exec/gpu"
)

// Batched decode bench (lagc bench --batch): B sequences, each prefilled
// with --ctx tokens in its own slot, decode greedily together; a step is
// one batched decode step of B rows.

// batchRow is one batch size's measurement.
type batchRow struct {
	Batch    int     `json:"batch"`
	Bucket   int     `json:"bucket"`
	MsStep   float64 `json:"ms_per_step"`
	TokS     float64 `json:"tok_per_s"`         // all sequences together
	SeqTokS  float64 `json:"tok_per_s_per_seq"` // each sequence
	Speedup  float64 `json:"speedup_vs_first"`  // aggregate, against the first batch size
	Captured bool    `json:"graph"`
	// Solo: one row a step ran on the decode schedule (gpu.EnvSoloDecode),
	// not on the batched program of bucket 1.
	Solo bool `json:"solo_decode"`
}

type batchReport struct {
	Model     string     `json:"model"`
	DType     string     `json:"dtype"`
	Layers    int        `json:"layers"`
	Context   int        `json:"decode_context"`
	Runs      int        `json:"runs"`
	Steps     int        `json:"steps_per_run"`
	BatchGEMM bool       `json:"batch_gemm"`
	Device    string     `json:"device"`
	Rows      []batchRow `json:"batches"`
}

func batchSizes(f *benchFlags) ([]int, error) {
	var out []int
	for _, s := range splitList(f.batch) {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 1024 {
			return nil, fmt.Errorf("%w: --batch %q: batch sizes from 1 to 1024", errUsage, f.batch)
		}
		out = append(out, n)
	}
	return out, nil
}

func runBatchBench(w io.Writer, f *benchFlags, ex *gpu.Executor, name string, cfg *config.Config, batches []int) error {
	props := ex.Kernels().Dev.Props()
	rep := &batchReport{Model: name, DType: ex.Plan().DType, Layers: cfg.NumLayers, Context: f.ctx, Runs: f.runs, Steps: f.tokens,
		BatchGEMM: ex.Plan().BatchGEMM, Device: fmt.Sprintf("%s (%d SMs)", props.Name, props.SMs)}
	toks := make([]int32, f.ctx+maxInts(batches))
	for i := range toks {
		toks[i] = int32((i*7919 + 13) % cfg.VocabSize)
	}
	for _, B := range batches {
		// Each sequence its own prompt (a shifted window of toks).
		next := make([]int32, B)
		for s := range B {
			ex.ResetSlot(s)
			nx, err := ex.StepArgmax([]gpu.Segment{{Slot: s, Tokens: toks[s : s+f.ctx]}})
			if err != nil {
				return fmt.Errorf("batch %d: prefill of slot %d: %w", B, s, err)
			}
			next[s] = nx[len(nx)-1]
		}
		segs := make([]gpu.Segment, B)
		step := func() error {
			for s := range B {
				segs[s] = gpu.Segment{Slot: s, Tokens: next[s : s+1]}
			}
			nx, err := ex.StepArgmax(segs)
			if err != nil {
				return err
			}
			copy(next, nx)
			return nil
		}
		// Warm-up: the eager step compiles the bucket's kernels, the
		// second captures its graph.
		for range 2 {
			if err := step(); err != nil {
				return fmt.Errorf("batch %d: %w", B, err)
			}
		}
		var ts []time.Duration
		for r := 0; r < f.runs; r++ {
			t0 := time.Now()
			for range f.tokens {
				if err := step(); err != nil {
					return fmt.Errorf("batch %d: %w", B, err)
				}
			}
			ts = append(ts, time.Since(t0)/time.Duration(f.tokens))
		}
		s := medianDur(ts).Seconds()
		row := batchRow{Batch: B, Bucket: ex.Plan().Bucket(B), MsStep: 1e3 * s, TokS: float64(B) / s, SeqTokS: 1 / s}
		if row.Solo = B == 1 && ex.SoloDecode(); row.Solo {
			row.Captured = ex.Captured() // slot 0's: the single-sequence decode graph
		}
		for _, b := range ex.BatchGraphs() {
			row.Captured = row.Captured || (b == row.Bucket && !row.Solo)
		}
		if len(rep.Rows) > 0 {
			row.Speedup = row.TokS / rep.Rows[0].TokS
		} else {
			row.Speedup = 1
		}
		rep.Rows = append(rep.Rows, row)
	}
	if f.jsonOut {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	kernels := "GEMVs in runs of 8 rows (a row's bits do not depend on the batch)"
	if rep.BatchGEMM {
		kernels = "GEMMs above 8 rows"
	}
	fmt.Fprintf(w, "batched decode: %s, %s, %d layers, context %d, %s; %s\n", rep.Model, rep.DType, rep.Layers, rep.Context, rep.Device, kernels)
	fmt.Fprintf(w, "median of %d runs of %d steps\n\n", rep.Runs, rep.Steps)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "batch\tbucket\tms/step\ttok/s\ttok/s per seq\tvs first\tgraph\t")
	for _, r := range rep.Rows {
		bucket := strconv.Itoa(r.Bucket)
		if r.Solo {
			bucket = "decode" // the lone row on the decode schedule
		}
		fmt.Fprintf(tw, "%d\t%s\t%.3f\t%.1f\t%.1f\t%.2fx\t%v\t\n", r.Batch, bucket, r.MsStep, r.TokS, r.SeqTokS, r.Speedup, r.Captured)
	}
	return tw.Flush()
}
