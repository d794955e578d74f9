package main

import (
	"bytes"
	"cmp"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"

	"lagc/config"
	"lagc/exec/gpu"
	"lagc/ir"
	"lagc/lower"
)

// planSections splits `lagc plan` output into its schedules ("decode T=1",
// "prefill T=512", ...), each the list of its launch lines.
func planSections(out string) map[string][]string {
	secs := map[string][]string{}
	var cur string
	for _, line := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(line, "decode T=") || strings.HasPrefix(line, "prefill T="):
			cur = line[:strings.Index(line, ":")]
		case cur != "" && strings.HasPrefix(line, "    "):
			secs[cur] = append(secs[cur], strings.TrimSpace(line))
		}
	}
	return secs
}

// TestPlanPrintsBenchLaunches: `lagc plan --preset laguna-s-2.1 [--quant
// Q]` (with the context bench sizes its caches for, and --at for its short
// prefill) prints exactly the launches `lagc bench --preset laguna-s-2.1
// --synthetic [--quant Q]` makes, in bf16 and two recipes: bench's own graph and executor configuration,
// lowered for the 132 SMs of an H200 and run without a GPU (a dry run
// records every launch).
func TestPlanPrintsBenchLaunches(t *testing.T) {
	for _, quant := range []string{"", "q4_k_m", "iq4_xs"} {
		t.Run("weights="+cmp.Or(quant, "bf16"), func(t *testing.T) { planPrintsBenchLaunches(t, quant) })
	}
}

func planPrintsBenchLaunches(t *testing.T, quant string) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f := benchFlagSet(fs)
	if err := fs.Parse([]string{"--preset", "laguna-s-2.1", "--synthetic", "--quant", quant}); err != nil {
		t.Fatal(err)
	}
	sizes, err := benchSizes(f)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Preset(f.preset)
	if err != nil {
		t.Fatal(err)
	}
	g, _, err := benchGraph(f, ir.BF16, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	bc := benchConfig(f, ir.BF16, sizes, nil)
	opts, err := gpu.PlanOptions(bc, 132, 90)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := lower.Lower(g, opts)
	if err != nil {
		t.Fatal(err)
	}
	ex, rec, err := gpu.DryRun(plan)
	if err != nil {
		t.Fatal(err)
	}
	defer ex.Close()

	var short []string
	for _, n := range append([]int{f.ctx}, sizes...) {
		if r := n % f.chunk; r != 0 && !slices.Contains(short, fmt.Sprint(r)) {
			short = append(short, fmt.Sprint(r))
		}
	}
	var out bytes.Buffer
	pf := &planFlags{preset: f.preset, quant: quant, dtype: "bf16", chunk: f.chunk, ctx: bc.MaxContext, sms: 132, cc: 90, at: strings.Join(short, ",")}
	if err := runPlan(&out, pf, nil); err != nil {
		t.Fatal(err)
	}
	secs := planSections(out.String())

	toks := make([]int32, max(f.ctx, maxInts(sizes)))
	for i := range toks {
		toks[i] = int32(i % cfg.VocabSize)
	}
	check := func(what string, want []string, run func() error) {
		t.Helper()
		rec.Reset()
		if err := run(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		var got []string
		for _, ev := range rec.Events {
			if ev.Kind == "launch" || ev.Kind == "memcpy" {
				got = append(got, ex.Format(ev))
			}
		}
		if len(want) == 0 {
			t.Fatalf("%s: lagc plan printed no launches for it", what)
		}
		for i := 0; i < max(len(got), len(want)); i++ {
			if i >= len(got) || i >= len(want) || got[i] != want[i] {
				g, w := "(none)", "(none)"
				if i < len(got) {
					g = got[i]
				}
				if i < len(want) {
					w = want[i]
				}
				t.Fatalf("%s: launch %d differs (bench %d launches, plan %d):\n bench %s\n plan  %s", what, i, len(got), len(want), g, w)
			}
		}
	}
	// Bench's decode runs follow a prefill of its context.
	ex.Reset()
	if _, err := ex.Prefill(toks[:f.ctx]); err != nil {
		t.Fatal(err)
	}
	check("decode", secs["decode T=1"], func() error { _, err := ex.DecodeNext(1); return err })
	for _, n := range sizes {
		var want []string
		for s := 0; s < n; s += f.chunk {
			want = append(want, secs[fmt.Sprintf("prefill T=%d", min(f.chunk, n-s))]...)
		}
		ex.Reset()
		check(fmt.Sprintf("prefill %d", n), want, func() error { _, err := ex.Prefill(toks[:n]); return err })
	}
}
