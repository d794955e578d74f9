package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"lagc/config"
	"lagc/engine"
	"lagc/exec/gpu"
	"lagc/ir"
	"lagc/lower"
	"lagc/passes"
)

func init() {
	register(&command{
		name:    "plan",
		summary: "compile a model to its GPU kernel plan (decode and prefill schedules) and print it",
		usage:   "plan [MODEL.yaml] (--preset NAME | --config config.json | --model CKPT) [--quant RECIPE] [--json] [flags]",
		setup:   setupPlan,
	})
}

type planFlags struct {
	preset, config, model string
	quant                 string
	tensorTypes           tensorTypes
	passes, disable       string
	dtype                 string
	chunk, ctx, sms, cc   int
	gpuMem                float64
	at, batch, tail       string
	slots                 int
	batchGEMM             bool
	jsonOut, resources    bool
	warn                  io.Writer // stderr
}

// planStdout receives the plan; tests capture it.
var planStdout io.Writer = os.Stdout

func setupPlan(fs *flag.FlagSet) func([]string) error {
	f := &planFlags{}
	fs.StringVar(&f.preset, "preset", "", "model shape by name: "+strings.Join(config.PresetNames(), ", "))
	fs.StringVar(&f.config, "config", "", "a Hugging Face config.json to take the model shape from")
	fs.StringVar(&f.model, "model", "", "a checkpoint (HF directory or .gguf): its config and weight dtypes")
	fs.StringVar(&f.passes, "passes", "", "comma-separated pass pipeline (default: the standard one)")
	fs.StringVar(&f.disable, "disable-pass", "", "comma-separated passes to skip")
	fs.StringVar(&f.quant, "quant", "", quantFlagDoc)
	fs.Var(&f.tensorTypes, "tensor-type", tensorTypeDoc)
	fs.StringVar(&f.dtype, "dtype", "bf16", "activations and weights on the GPU: bf16 or f32")
	fs.IntVar(&f.chunk, "chunk", lower.DefaultChunk, "prefill chunk (the prefill schedule's T)")
	fs.IntVar(&f.ctx, "ctx", 0, "context length of the KV caches (0: max_position_embeddings)")
	fs.IntVar(&f.sms, "sms", 132, "multiprocessors of the target GPU (sizes split-KV decode attention)")
	fs.IntVar(&f.cc, "cc", 90, "compute capability of the target GPU, major*10+minor (90 and up: the TMA + wgmma GEMMs)")
	fs.Float64Var(&f.gpuMem, "gpu-mem", 140, "memory of the target GPU in GiB (default: an H200's); warn when the plan needs more (0: no check)")
	fs.StringVar(&f.at, "at", "", "also print the prefill launches at these chunk sizes (a prompt's last chunk), comma-separated")
	fs.StringVar(&f.tail, "tail", "all", "with --at: the rows the steps after the last attention run on: all, last (as lagc run's last chunk) or none (its earlier chunks)")
	fs.IntVar(&f.slots, "slots", 1, "sequence slots (lagc serve --slots): KV caches for each, and batched decode steps")
	fs.StringVar(&f.batch, "batch", "", "also print the batched decode launches at these batch sizes (rounded up to a bucket), comma-separated")
	fs.BoolVar(&f.batchGEMM, "batch-gemm", false, "batches above 8 rows on the GEMMs (lagc serve --batch-gemm)")
	fs.BoolVar(&f.jsonOut, "json", false, "print the plan as JSON")
	fs.BoolVar(&f.resources, "resources", false, "print, instead of the plan, what each decode launch takes of an SM (registers, shared memory, blocks an SM, waves) and how many of its blocks fit beside the launch before it; compiles every kernel with NVRTC, no GPU needed")
	return func(args []string) error {
		f.warn = fs.Output()
		return runPlan(planStdout, f, args)
	}
}

func runPlan(w io.Writer, f *planFlags, args []string) error {
	if len(args) > 1 {
		return fmt.Errorf("%w: expected at most one model file, got %q", errUsage, args)
	}
	dt, err := ir.ParseDType(f.dtype)
	if err != nil || (dt != ir.BF16 && dt != ir.F32) {
		return fmt.Errorf("%w: --dtype %q: bf16 or f32", errUsage, f.dtype)
	}
	if err := checkFlagRules(positive("--chunk", f.chunk), notNegative("--ctx", f.ctx), positive("--sms", f.sms),
		positive("--cc", f.cc), flagRule{"--gpu-mem", f.gpuMem, f.gpuMem >= 0, "want a number >= 0"}); err != nil {
		return err
	}
	if err := checkPassNames(f.passes, f.disable); err != nil {
		return err
	}
	recipe, err := parseQuantFlag(f.quant, f.model, f.tensorTypes)
	if err != nil {
		return err
	}
	var at []int
	for _, s := range splitList(f.at) {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > f.chunk {
			return fmt.Errorf("%w: --at %q: chunk sizes from 1 to --chunk (%d)", errUsage, f.at, f.chunk)
		}
		at = append(at, n)
	}
	if f.slots == 0 {
		f.slots = 1
	}
	if f.slots < 1 || f.slots > lower.MaxSeqs {
		return fmt.Errorf("%w: --slots %d: 1 to %d", errUsage, f.slots, lower.MaxSeqs)
	}
	var batches []int
	for _, s := range splitList(f.batch) {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > f.slots {
			return fmt.Errorf("%w: --batch %q: batch sizes from 1 to --slots (%d)", errUsage, f.batch, f.slots)
		}
		batches = append(batches, n)
	}
	if f.resources && (f.jsonOut || len(at) > 0 || len(batches) > 0) {
		return fmt.Errorf("%w: --resources prints a table of the decode step alone, without --json, --at or --batch", errUsage)
	}
	if (len(at) > 0 || len(batches) > 0) && f.jsonOut {
		return fmt.Errorf("%w: --at and --batch print text; the JSON plan holds what Plan.At and Plan.AtBatch need", errUsage)
	}
	cfg, ck, _, err := modelShape(f.preset, f.config, f.model)
	if ck != nil {
		defer ck.Close()
	}
	if err != nil {
		return err
	}
	yamlPath := ""
	if len(args) == 1 {
		yamlPath = args[0]
	}
	g, err := engine.BuildGraph(cfg, yamlPath)
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
	if _, err := passes.Run(g, passes.Options{Passes: splitList(f.passes), Disable: splitList(f.disable)}); err != nil {
		return err
	}
	ctx := f.ctx
	if ctx == 0 {
		ctx = cfg.MaxPositionEmbeddings
	}
	opts, err := gpu.PlanOptions(gpu.Config{DType: dt, Chunk: f.chunk, MaxContext: ctx, Seqs: f.slots, BatchGEMM: f.batchGEMM}, f.sms, f.cc)
	if err != nil {
		return err
	}
	p, err := lower.Lower(g, opts)
	if err != nil {
		return err
	}
	warnGPUMemory(f.warn, p, f.gpuMem)
	if f.resources {
		return printResources(w, f.warn, p)
	}
	if f.jsonOut {
		return p.WriteJSON(w)
	}
	if err := p.Print(w); err != nil {
		return err
	}
	tail, ok := map[string]lower.Tail{"": lower.TailAll, "all": lower.TailAll, "last": lower.TailLast, "none": lower.TailNone}[f.tail]
	if !ok {
		return fmt.Errorf("%w: --tail %q: expected all, last or none", errUsage, f.tail)
	}
	for _, n := range at {
		ls, err := p.AtTail(p.Prefill, n, tail)
		if err != nil {
			return err
		}
		if err := p.PrintSchedule(w, p.Prefill, n, ls); err != nil {
			return err
		}
	}
	for _, n := range batches {
		b := p.Bucket(n)
		ls, err := p.AtBatch(b)
		if err != nil {
			return err
		}
		if b == 1 {
			// exec/gpu's policy (solo.go), not the plan's: say which runs.
			fmt.Fprintf(w, "note: the GPU executor runs a step of one decode row on the decode schedule above, bound to its slot, not on this program (%s=0 runs this one)\n", gpu.EnvSoloDecode)
		}
		if err := p.PrintBatch(w, b, ls); err != nil {
			return err
		}
	}
	return nil
}

// warnGPUMemory says when the plan's device memory (lower.Plan.DeviceBytes:
// weights, bf16 weight copies, every slot's KV caches, and the activations,
// workspace and rope tables) exceeds gib GiB.
func warnGPUMemory(w io.Writer, p *lower.Plan, gib float64) {
	need := p.DeviceBytes()
	kv := int64(p.SeqSlots()) * p.KVSeqBytes()
	act := need - p.WeightBytes - p.ShadowBytes - kv
	if gib > 0 && float64(need) > gib*(1<<30) {
		copies := ""
		if p.ShadowBytes > 0 {
			copies = ", bf16 weight copies " + lower.FormatBytes(p.ShadowBytes)
		}
		fmt.Fprintf(w, "warning: the plan needs %s of GPU memory (weights %s%s, KV caches %s, activations %s), more than the %g GiB of --gpu-mem\n",
			lower.FormatBytes(need), lower.FormatBytes(p.WeightBytes), copies, lower.FormatBytes(kv), lower.FormatBytes(act), gib)
		if p.ShadowBytes > 0 && os.Getenv(gpu.EnvPrefillBF16) == "" {
			fmt.Fprintf(w, "(lagc run leaves the bf16 weight copies out where they do not fit; %s=0 plans without them)\n", gpu.EnvPrefillBF16)
		}
		if note := p.ConversionNote(); note != "" {
			fmt.Fprintf(w, "(weights %s)\n", note)
		}
	}
}
