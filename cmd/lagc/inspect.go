package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	"lagc/ckpt"
	"lagc/config"
	"lagc/engine"
	"lagc/exec/gpu"
	"lagc/ir"
	"lagc/lower"
	"lagc/passes"
)

func init() {
	register(&command{
		name:    "inspect",
		summary: "describe a checkpoint: shape, types and quantisation recipe, parameters, GPU memory, metadata, tensors",
		usage:   "inspect CKPT [--ctx N] [--json] [--tensors=false]",
		setup: func(fs *flag.FlagSet) func([]string) error {
			var o inspectOpts
			fs.IntVar(&o.ctx, "ctx", 0, "context length of the GPU memory estimate (default: the model's max_position_embeddings)")
			fs.BoolVar(&o.json, "json", false, "print one JSON object instead of text")
			fs.BoolVar(&o.tensors, "tensors", true, "list every tensor")
			return func(args []string) error {
				if len(args) != 1 {
					return fmt.Errorf("%w: want one checkpoint (an HF directory or a .gguf file), got %d arguments", errUsage, len(args))
				}
				if o.ctx < 0 {
					return fmt.Errorf("%w: --ctx %d: want a positive context length", errUsage, o.ctx)
				}
				return runInspect(args[0], o, inspectStdout)
			}
		},
	})
}

// inspectStdout is where inspect prints (tests replace it).
var inspectStdout io.Writer = os.Stdout

type inspectOpts struct {
	ctx           int
	json, tensors bool
}

// inspectJSON is the --json output: ckpt.Report plus what only the
// command knows.
type inspectJSON struct {
	*ckpt.Report
	FileBytes int64          `json:"file_bytes"`
	Config    *config.Config `json:"config"`
	// Valid says whether the configuration is valid (ckpt.Validate) and the
	// tensors are the ones the model graph reads (engine.CheckCheckpoint);
	// Problems lists what does not.
	Valid    bool           `json:"valid"`
	Problems string         `json:"problems,omitempty"`
	Metadata map[string]any `json:"metadata"`
	// GPUWeightBytes is what the GPU plan uploads (lower.Plan.WeightBytes:
	// the device layouts, fused weights, and the block-quantised weights
	// no GPU kernel reads in their type converted, GPUConversions); 0 where
	// no plan is made (an invalid checkpoint).
	GPUWeightBytes int64              `json:"gpu_weight_bytes,omitempty"`
	GPUConversions []lower.Conversion `json:"gpu_conversions,omitempty"`
	// GPUPrefillDequant is what each prefill chunk of that plan
	// dequantises into the workspace (lower.Plan.PrefillDequant); absent
	// where nothing.
	GPUPrefillDequant *lower.Dequant `json:"gpu_prefill_dequant,omitempty"`
}

func runInspect(path string, o inspectOpts, stdout io.Writer) error {
	ck, err := ckpt.OpenUnchecked(path)
	if err != nil {
		return err
	}
	defer ck.Close()
	rep := ckpt.Inspect(ck, o.ctx)
	out := inspectJSON{Report: rep, Config: ck.Config(), Valid: true, FileBytes: fileBytes(path), Metadata: map[string]any{}}
	if err := ckpt.Validate(ck); err != nil {
		out.Valid, out.Problems = false, err.Error()
	} else if err := engine.CheckCheckpoint(ck); err != nil {
		out.Valid, out.Problems = false, err.Error()
	} else if p, err := inspectPlan(ck, rep.Memory.Context); err == nil {
		out.GPUWeightBytes, out.GPUConversions = p.WeightBytes, p.Conversions()
		if d := p.PrefillDequant(); d.Matrices > 0 {
			out.GPUPrefillDequant = &d
		}
	}
	for k, v := range ck.Metadata() {
		out.Metadata[k] = summarizeValue(v, o.json)
	}
	if !o.tensors {
		rep.Tensors = nil
	}
	if o.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	printInspect(stdout, out, ck.Config())
	return nil
}

// inspectPlan is the GPU plan lagc run would make for ck at ctx (bf16
// activations; lower's default target, an H200), without a GPU: what it
// uploads.
func inspectPlan(ck ckpt.Checkpoint, ctx int) (*lower.Plan, error) {
	g, err := engine.BuildGraph(ck.Config(), "")
	if err != nil {
		return nil, err
	}
	if err := engine.BindCheckpoint(g, ck); err != nil {
		return nil, err
	}
	if _, err := passes.Run(g, passes.Options{}); err != nil {
		return nil, err
	}
	opts, err := gpu.PlanOptions(gpu.Config{DType: ir.BF16, MaxContext: max(ctx, 1)}, 0, 0)
	if err != nil {
		return nil, err
	}
	return lower.Lower(g, opts)
}

// fileBytes is the size of a file, or of the files in a directory.
func fileBytes(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	if !st.IsDir() {
		return st.Size()
	}
	var n int64
	entries, _ := os.ReadDir(path)
	for _, e := range entries {
		if info, err := e.Info(); err == nil && !e.IsDir() {
			n += info.Size()
		}
	}
	return n
}

func printInspect(w io.Writer, r inspectJSON, cfg *config.Config) {
	fmt.Fprintf(w, "file:          %s (%s, %s)\n", r.Path, r.Format, lower.FormatBytes(r.FileBytes))
	arch := r.Architecture
	if r.Name != "" {
		arch += fmt.Sprintf(", name %q", r.Name)
	}
	fmt.Fprintf(w, "architecture:  %s\n", arch)
	fmt.Fprintf(w, "shape:         %s\n", shapeSummary(cfg))
	q := r.Recipe + ": " + r.RecipeNote
	if r.FileType != nil {
		q += fmt.Sprintf("; general.file_type %d", *r.FileType)
		if r.FileTypeName != "" {
			q += " (" + r.FileTypeName + ")"
		}
	}
	fmt.Fprintf(w, "quantisation:  %s\n", q)
	fmt.Fprintf(w, "parameters:    %s total, %s active per token (embedding excluded, routed experts at top_k/num_experts)\n",
		count(r.Parameters), count(r.ActiveParameters))
	fmt.Fprintf(w, "weights:       %s, %.2f bits per weight\n", lower.FormatBytes(r.WeightBytes), r.BitsPerWeight)
	m := r.Memory
	if r.GPUWeightBytes > 0 {
		fmt.Fprintf(w, "gpu memory:    %s at context %d: weights %s as the GPU holds them + KV caches (bf16) %s; activations come on top (lagc plan)\n",
			lower.FormatBytes(r.GPUWeightBytes+m.KVBytes), m.Context, lower.FormatBytes(r.GPUWeightBytes), lower.FormatBytes(m.KVBytes))
		for _, c := range r.GPUConversions {
			fmt.Fprintf(w, "               %d %s tensors converted to %s on upload (no GPU kernel reads their type there): %s as stored, %s on the GPU\n",
				c.Tensors, c.Source, c.DType, lower.FormatBytes(c.Stored), lower.FormatBytes(c.Bytes))
		}
		if d := r.GPUPrefillDequant; d != nil {
			fmt.Fprintf(w, "gpu prefill:   dequantises %s\n", d)
		}
	} else {
		fmt.Fprintf(w, "gpu memory:    %s at context %d: weights %s + KV caches (bf16) %s; activations come on top (lagc plan)\n",
			lower.FormatBytes(m.TotalBytes), m.Context, lower.FormatBytes(m.WeightBytes), lower.FormatBytes(m.KVBytes))
	}
	if r.Valid {
		fmt.Fprintln(w, "checks:        the tensors match the configuration")
	} else {
		fmt.Fprintf(w, "checks:        %s\n", r.Problems)
	}

	fmt.Fprintln(w, "\ntypes:")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "  type\ttensors\telements\tbytes\tbits/weight\t")
	for _, s := range r.Types {
		fmt.Fprintf(tw, "  %s\t%d\t%d\t%s\t%.2f\t\n", s.Type, s.Tensors, s.Elements, lower.FormatBytes(s.Bytes), s.BitsPerWeight)
	}
	tw.Flush()

	if len(r.Metadata) == 0 {
		fmt.Fprintf(w, "\nmetadata: none (%s; the configuration comes from config.json)\n", r.Format)
	} else {
		fmt.Fprintf(w, "\nmetadata (%d keys):\n", len(r.Metadata))
		keys := make([]string, 0, len(r.Metadata))
		for k := range r.Metadata {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(w, "  %s = %s\n", k, formatValue(r.Metadata[k]))
		}
	}

	if len(r.Tensors) > 0 {
		fmt.Fprintf(w, "\ntensors (%d):\n", len(r.Tensors))
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  name\ttype\tshape\tbytes\tbits/weight")
		for _, t := range r.Tensors {
			fmt.Fprintf(tw, "  %s\t%s\t%v\t%d\t%.2f\n", t.Name, t.Type, t.Shape, t.Bytes, t.BitsPerWeight)
		}
		tw.Flush()
	}
}

// shapeSummary describes a configuration on one line.
func shapeSummary(c *config.Config) string {
	var dense, moe, full, sliding int
	for l := 0; l < c.NumLayers; l++ {
		if c.IsMoE(l) {
			moe++
		} else {
			dense++
		}
		if c.IsSliding(l) {
			sliding++
		} else {
			full++
		}
	}
	s := fmt.Sprintf("%d layers (%d full + %d sliding attention, window %d; %d dense + %d MoE), hidden %d, vocab %d",
		c.NumLayers, full, sliding, c.SlidingWindow, dense, moe, c.HiddenSize, c.VocabSize)
	s += fmt.Sprintf(", heads %s of %d over %d KV heads", intList(c.HeadsPerLayer), c.HeadDim, c.NumKVHeads)
	if dense > 0 {
		s += fmt.Sprintf(", dense width %d", c.IntermediateSize)
	}
	if moe > 0 {
		s += fmt.Sprintf(", %d experts top-%d of width %d", c.NumExperts, c.NumExpertsPerTok, c.MoEIntermediateSize)
		if c.SharedExpertSize > 0 {
			s += fmt.Sprintf(" + shared %d", c.SharedExpertSize)
		}
	}
	return s + fmt.Sprintf(", context %d", c.MaxPositionEmbeddings)
}

// intList writes 4,4,6 as "4,4,6", and a repeated value once.
func intList(v []int) string {
	same := true
	for _, x := range v {
		same = same && x == v[0]
	}
	if same && len(v) > 0 {
		return strconv.Itoa(v[0])
	}
	parts := make([]string, len(v))
	for i, x := range v {
		parts[i] = strconv.Itoa(x)
	}
	return "(" + strings.Join(parts, ",") + ")"
}

// count writes a parameter count for people: 1.41M, 117.56B.
func count(n int64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.2fB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.2fM", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.1fK", float64(n)/1e3)
	}
	return strconv.FormatInt(n, 10)
}

// maxListed bounds the array elements shown per metadata value: a
// tokenizer's vocabulary is summarised, not printed.
const maxListed = 16

// arraySummary stands for a long metadata array.
type arraySummary struct {
	Elements int    `json:"elements"`
	Type     string `json:"type"`
	First    any    `json:"first"`
}

// summarizeValue keeps scalars and short arrays and summarises long ones;
// in text mode long strings are cut too.
func summarizeValue(v any, forJSON bool) any {
	rv := reflect.ValueOf(v)
	if rv.Kind() == reflect.Slice {
		if rv.Len() <= maxListed {
			return v
		}
		return arraySummary{Elements: rv.Len(), Type: rv.Type().Elem().String(), First: rv.Slice(0, 4).Interface()}
	}
	if s, ok := v.(string); ok && !forJSON && len(s) > 100 {
		return s[:100] + fmt.Sprintf("... (%d bytes)", len(s))
	}
	return v
}

func formatValue(v any) string {
	switch x := v.(type) {
	case arraySummary:
		return fmt.Sprintf("[%d x %s: %s ...]", x.Elements, x.Type, strings.Trim(formatValue(x.First), "[]"))
	case string:
		return strconv.Quote(x)
	}
	if rv := reflect.ValueOf(v); rv.Kind() == reflect.Slice {
		parts := make([]string, rv.Len())
		for i := range parts {
			parts[i] = formatValue(rv.Index(i).Interface())
		}
		return "[" + strings.Join(parts, " ") + "]"
	}
	return fmt.Sprint(v)
}
