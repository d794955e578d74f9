package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"

	"lagc/config"
	"lagc/engine"
	"lagc/ir"
	"lagc/lower"
	"lagc/models"
	"lagc/passes"
)

func init() {
	register(&command{
		name:    "compile",
		summary: "build the model graph, run the passes, print a summary (and dumps)",
		usage:   "compile [MODEL.yaml] (--preset NAME | --config config.json | --model CKPT) [--quant RECIPE] [flags]",
		setup:   setupCompile,
	})
}

// compileFlags are the flags of `lagc compile`.
type compileFlags struct {
	preset, config, model string
	passes, disable       string
	dumpAfter, dumpDir    string
	dumpFormat, emit      string
	layers                string
	weightDType, quant    string
	tensorTypes           tensorTypes
	prefill               int
}

func setupCompile(fs *flag.FlagSet) func([]string) error {
	f := &compileFlags{}
	fs.StringVar(&f.preset, "preset", "", "model shape by name: "+strings.Join(config.PresetNames(), ", "))
	fs.StringVar(&f.config, "config", "", "a Hugging Face config.json to take the model shape from")
	fs.StringVar(&f.model, "model", "", "a checkpoint (HF directory or .gguf): its config, weight dtypes and shapes")
	fs.StringVar(&f.passes, "passes", "", "comma-separated pass pipeline (default "+strings.Join(passes.DefaultPipeline, ",")+"); passes: "+passList())
	fs.StringVar(&f.disable, "disable-pass", "", "comma-separated passes to skip")
	fs.StringVar(&f.dumpAfter, "dump-after", "", "dump the graph after these passes (comma-separated) or all; each dump starts with what the pass changed")
	fs.StringVar(&f.dumpDir, "dump-dir", "lagc-dumps", "directory for dumps, named NN-pass.ext")
	fs.StringVar(&f.dumpFormat, "dump-format", "text", "dump format: text, dot or json")
	fs.StringVar(&f.emit, "emit", "", "print the final graph (text, dot or json) instead of the summary")
	fs.StringVar(&f.layers, "layers", "", "with --emit dot: draw only these layers, e.g. 0-3 or 0,5-7")
	fs.StringVar(&f.weightDType, "weight-dtype", "bf16", "dtype of weights (overridden per tensor by --model)")
	fs.StringVar(&f.quant, "quant", "", quantFlagDoc)
	fs.Var(&f.tensorTypes, "tensor-type", tensorTypeDoc)
	fs.IntVar(&f.prefill, "prefill", 2048, "prefill step size for the memory plan")
	return func(args []string) error { return runCompile(compileStdout, f, args) }
}

// compileStdout receives the summary; tests capture it.
var compileStdout io.Writer = os.Stdout

func passList() string {
	var parts []string
	for _, n := range passes.Names() {
		p, _ := passes.Lookup(n)
		off := ""
		if !p.Default {
			off = ", off by default"
		}
		parts = append(parts, n+" ("+p.Doc+off+")")
	}
	return strings.Join(parts, "; ")
}

func splitList(s string) []string {
	if strings.TrimSpace(s) == "" {
		return nil
	}
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func runCompile(w io.Writer, f *compileFlags, args []string) error {
	if len(args) > 1 {
		return fmt.Errorf("%w: expected at most one model file, got %q", errUsage, args)
	}
	file, src := "laguna.yaml (embedded)", models.LagunaYAML
	if len(args) == 1 {
		b, err := os.ReadFile(args[0])
		if err != nil {
			return fmt.Errorf("reading model file: %w", err)
		}
		file, src = args[0], b
	}
	wdt, err := ir.ParseDType(f.weightDType)
	if err != nil {
		return fmt.Errorf("%w: --weight-dtype: %v", errUsage, err)
	}
	if _, err := passes.DumpExt(f.dumpFormat); err != nil {
		return fmt.Errorf("%w: --dump-format: %v", errUsage, err)
	}
	if f.prefill <= 0 {
		return fmt.Errorf("%w: --prefill must be positive", errUsage)
	}
	if err := checkPassNames(f.passes, f.disable); err != nil {
		return err
	}
	if f.layers != "" && f.emit != "dot" {
		return fmt.Errorf("%w: --layers goes with --emit dot", errUsage)
	}
	recipe, err := parseQuantFlag(f.quant, f.model, f.tensorTypes)
	if err != nil {
		return err
	}
	cfg, ck, source, err := modelShape(f.preset, f.config, f.model)
	if ck != nil {
		defer ck.Close()
	}
	if err != nil {
		return err
	}
	var layers func(int) bool
	if f.layers != "" {
		if layers, err = parseLayers(f.layers, cfg.NumLayers); err != nil {
			return err
		}
	}
	g, err := models.Build(file, src, cfg, models.BuildOptions{WeightDType: wdt})
	if err != nil {
		return err
	}
	if ck != nil {
		if err := engine.BindCheckpoint(g, ck); err != nil {
			return err
		}
	}
	if err := setQuantTypes(g, recipe); err != nil {
		return err
	}
	opt := passes.Options{
		Passes: splitList(f.passes), Disable: splitList(f.disable), DumpAfter: splitList(f.dumpAfter),
		DumpDir: f.dumpDir, DumpFormat: f.dumpFormat, Tokens: []int{1, f.prefill},
	}
	// What the model is (parameters, layers) is read from the graph as
	// built; the fused ops rearrange the weights but not the model.
	model := modelFacts(g)
	unfused := g.Clone()
	res, err := passes.Run(g, opt)
	if err != nil {
		return err
	}
	switch f.emit {
	case "":
		kc, err := countKernels(g, unfused, opt, f.prefill)
		if err != nil {
			return err
		}
		printSummary(w, g, file, source, res, f.prefill, model, kc)
		return nil
	case "text":
		return ir.Print(w, g)
	case "dot":
		return ir.WriteDOTWith(w, g, ir.DOTOptions{Layers: layers})
	case "json":
		return ir.WriteJSON(w, g)
	}
	return fmt.Errorf("%w: --emit %q: expected text, dot or json", errUsage, f.emit)
}

// facts are the properties of the model the summary reports.
type facts struct {
	total, active int64
	types         []ir.WeightTypeStat
	layers        []models.LayerInfo
}

func modelFacts(g *ir.Graph) facts {
	total, active := g.ParamCount()
	return facts{total, active, g.WeightTypes(), models.LayerTable(g)}
}

func printSummary(w io.Writer, g *ir.Graph, file, source string, res *passes.Result, prefill int, model facts, kc *kernelCounts) {
	fmt.Fprintf(w, "model %s from %s, shape from %s\n", g.Name, file, source)
	var outs []string
	for _, v := range g.Outputs {
		outs = append(outs, fmt.Sprintf("%s %s", v.Name, v.Type))
	}
	fmt.Fprintf(w, "graph: %d nodes, %d weights, inputs %d, outputs %s\n\n", len(g.Nodes), len(g.Weights), len(g.Inputs), strings.Join(outs, ", "))

	total, active := model.total, model.active
	fmt.Fprintf(w, "parameters: %s total (%d)\n", paramCount(total), total)
	fmt.Fprintf(w, "active per token: %s (%d; embedding excluded, lm_head counted, routed experts at top_k/num_experts)\n\n", paramCount(active), active)
	printWeightTypes(w, model.types)

	fmt.Fprintln(w, "ops by kind:")
	counts := g.OpCounts()
	ops := make([]string, 0, len(counts))
	for op := range counts {
		ops = append(ops, op)
	}
	sort.Slice(ops, func(i, j int) bool {
		if counts[ops[i]] != counts[ops[j]] {
			return counts[ops[i]] > counts[ops[j]]
		}
		return ops[i] < ops[j]
	})
	for _, op := range ops {
		fmt.Fprintf(w, "  %-14s %5d\n", op, counts[op])
	}

	layers := model.layers
	fmt.Fprintf(w, "\nlayers (%d):\n", len(layers))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  layer\tattention\twindow\theads\tkv heads\tmlp")
	for _, li := range layers {
		win := "-"
		if li.Sliding {
			win = fmt.Sprint(li.Window)
		}
		kind := "full"
		if li.Sliding {
			kind = "sliding"
		}
		fmt.Fprintf(tw, "  %d\t%s\t%s\t%d\t%d\t%s\n", li.Layer, kind, win, li.Heads, li.KVHeads, li.MLP)
	}
	tw.Flush()

	kc.print(w)

	if len(res.State.Memory) > 0 {
		fmt.Fprintln(w, "\nactivation arena (one buffer for all activations; weights and KV caches excluded):")
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  step\tf32 activations\tbf16 activations")
		for _, t := range []int{1, prefill} {
			name := fmt.Sprintf("decode T=%d", t)
			if t != 1 {
				name = fmt.Sprintf("prefill T=%d", t)
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\n", name, planSize(res.State.Plan(t, ir.F32)), planSize(res.State.Plan(t, ir.BF16)))
		}
		tw.Flush()
	}

	fmt.Fprintln(w, "\npasses:")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for i, t := range res.Timings {
		fmt.Fprintf(tw, "  %02d\t%s\t%v\tnodes %d -> %d\n", i+1, t.Name, t.Elapsed.Round(1000), t.NodesBefore, t.NodesAfter)
	}
	tw.Flush()
	for _, n := range res.State.Notes {
		fmt.Fprintf(w, "  %s\n", n)
	}
	if len(res.Dumps) > 0 {
		fmt.Fprintf(w, "\ndumps: %s\n", strings.Join(res.Dumps, ", "))
	}
}

// printWeightTypes writes the weights by stored type: what a decode token
// reads of them is the bytes of its active parameters, the bound of a
// memory-bound step (docs/PERF.md's byte roofline).
func printWeightTypes(w io.Writer, types []ir.WeightTypeStat) {
	fmt.Fprintln(w, "weights by type (as stored; a decode token reads its active parameters' bytes):")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  type\ttensors\tparameters\tbytes\ta token")
	var all ir.WeightTypeStat
	for _, t := range types {
		fmt.Fprintf(tw, "  %s\t%d\t%s\t%s\t%s\n", t.DType, t.Tensors, paramCount(t.Params), lower.FormatBytes(t.Bytes), lower.FormatBytes(t.PerTok))
		all.Tensors += t.Tensors
		all.Params += t.Params
		all.Bytes += t.Bytes
		all.PerTok += t.PerTok
	}
	if len(types) > 1 {
		fmt.Fprintf(tw, "  all\t%d\t%s\t%s\t%s\n", all.Tensors, paramCount(all.Params), lower.FormatBytes(all.Bytes), lower.FormatBytes(all.PerTok))
	}
	tw.Flush()
	fmt.Fprintln(w)
}

func planSize(p *passes.MemoryPlan) string {
	if p == nil {
		return "-"
	}
	return lower.FormatBytes(p.Arena)
}

// paramCount writes a parameter count as people quote them: 117.56B,
// 2.80M, 51.4K. A count that would round to 1000 of a unit takes the next.
func paramCount(n int64) string {
	f := float64(n)
	switch {
	case f >= 999.995e6:
		return fmt.Sprintf("%.2fB", f/1e9)
	case f >= 999.95e3:
		return fmt.Sprintf("%.2fM", f/1e6)
	case n >= 1000:
		return fmt.Sprintf("%.1fK", f/1e3)
	}
	return fmt.Sprint(n)
}

// kernelCounts compares the kernel launches of a step with and without the
// fusion passes.
type kernelCounts struct {
	prefill       int
	fusions       []string // fusion passes that ran
	with, without int
}

// launches counts the nodes of g that launch work: every node but reshape,
// which is a view of its input's buffer. A node is one kernel (the MoE
// grouped GEMM counts as one), so a decode step (T=1) and a prefill chunk
// launch the same number.
func launches(g *ir.Graph) int {
	n := 0
	for _, node := range g.Nodes {
		if node.Op != "reshape" {
			n++
		}
	}
	return n
}

// countKernels counts the launches of the compiled graph g and of
// unfused (the graph before the passes) run through the same pipeline
// without the fusion passes (and without memplan, which moves no node).
func countKernels(g, unfused *ir.Graph, opt passes.Options, prefill int) (*kernelCounts, error) {
	names := opt.Passes
	if names == nil {
		names = passes.DefaultPipeline
	}
	kc := &kernelCounts{prefill: prefill, with: launches(g)}
	var plain []string
	for _, n := range names {
		switch {
		case slices.Contains(passes.FusionPasses, n):
			if !slices.Contains(opt.Disable, n) {
				kc.fusions = append(kc.fusions, n)
			}
		case n != "memplan" && !slices.Contains(opt.Disable, n):
			plain = append(plain, n)
		}
	}
	if len(plain) == 0 {
		plain = []string{} // an empty pipeline, not the default one
	}
	if _, err := passes.Run(unfused, passes.Options{Passes: plain}); err != nil {
		return nil, fmt.Errorf("counting kernels without fusions: %w", err)
	}
	kc.without = launches(unfused)
	return kc, nil
}

func (kc *kernelCounts) print(w io.Writer) {
	fused := "none"
	if len(kc.fusions) > 0 {
		fused = strings.Join(kc.fusions, ", ")
	}
	fmt.Fprintf(w, "\nkernels per step (nodes that launch work; reshape views excluded), fusions: %s\n", fused)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  \tdecode T=1\tprefill T=%d\n", kc.prefill)
	fmt.Fprintf(tw, "  with fusions\t%d\t%d\n", kc.with, kc.with)
	fmt.Fprintf(tw, "  without fusions\t%d\t%d\n", kc.without, kc.without)
	tw.Flush()
}
