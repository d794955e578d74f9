package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"lagc/ckpt"
	"lagc/config"
	"lagc/engine"
	"lagc/progress"
)

func init() {
	register(&command{
		name:    "convert",
		summary: "convert a Laguna checkpoint (HF safetensors or GGUF) to GGUF with llama.cpp's laguna names",
		usage:   "convert (--model CKPT | --synthetic --preset NAME [--layers N]) -o OUT.gguf [--dtype keep|f32|f16|bf16 | --quant TYPE|RECIPE [--tensor-type PATTERN=TYPE]...]",
		setup: func(fs *flag.FlagSet) func([]string) error {
			var o convertOpts
			fs.StringVar(&o.model, "model", "", "checkpoint to convert: HF directory (config.json + safetensors) or .gguf file")
			fs.StringVar(&o.out, "o", "", "output GGUF file")
			fs.StringVar(&o.out, "output", "", "output GGUF file (same as -o)")
			fs.StringVar(&o.dtype, "dtype", "keep", "type of weight matrices: keep (as stored), f32, f16 or bf16; vectors, norms and the router stay f32")
			fs.StringVar(&o.quant, "quant", "", "quantise the weight matrices: a type (every matrix in it, with llama-quantize's fallbacks) or a recipe; one of "+
				strings.Join(ckpt.RecipeNames(), ", ")+"; vectors, norms and the router stay f32")
			fs.Var(&o.tensorTypes, "tensor-type", tensorTypeDoc)
			fs.StringVar(&o.name, "name", "", "general.name to record (default: the checkpoint's base name)")
			fs.BoolVar(&o.synthetic, "synthetic", false, "write random weights of a preset's shapes instead of converting a checkpoint (with --preset; for load benchmarks)")
			fs.StringVar(&o.preset, "preset", "", "with --synthetic: the model shape, one of "+strings.Join(config.PresetNames(), ", "))
			fs.IntVar(&o.layers, "layers", 0, "with --synthetic: only the first N layers (0: all)")
			fs.Uint64Var(&o.seed, "seed", 1, "with --synthetic: the random seed (the same seed writes the same file)")
			fs.StringVar(&o.tokenizer, "tokenizer", "", "with --synthetic: embed the tokenizer.json (and chat template) of this directory, its ids padded to the preset's vocabulary, so that lagc serve and chat take the file")
			return func(args []string) error {
				if len(args) != 0 {
					return fmt.Errorf("%w: unexpected arguments %q (the checkpoint goes in --model)", errUsage, args)
				}
				if set := setFlags(fs); o.synthetic || set["preset"] || set["layers"] || set["seed"] || set["tokenizer"] {
					return runConvertSynthetic(o, fs.Output())
				}
				if o.model == "" || o.out == "" {
					return fmt.Errorf("%w: --model and -o are required", errUsage)
				}
				return runConvert(o, fs.Output()) // stderr, as runMain set it
			}
		},
	})
}

type convertOpts struct {
	model, out, dtype, quant, name string
	synthetic                      bool
	preset                         string
	layers                         int
	seed                           uint64
	tokenizer                      string // with --synthetic: a directory whose tokenizer.json to embed
	tensorTypes                    tensorTypes
}

func runConvert(o convertOpts, log io.Writer) error {
	opt := ckpt.WriteOptions{Name: o.name}
	if o.dtype == "keep" {
		opt.KeepDType = true
	} else {
		dt, err := ckpt.ParseDType(o.dtype)
		if err != nil {
			return fmt.Errorf("%w: --dtype %q: expected keep, f32, f16 or bf16 (quantised types go in --quant)", errUsage, o.dtype)
		}
		opt.DType = dt
	}
	if err := applyQuant(o, &opt); err != nil {
		return err
	}
	if opt.Name == "" {
		opt.Name = strings.TrimSuffix(filepath.Base(filepath.Clean(o.model)), ".gguf")
	}
	if err := checkOutput(o.out, []string{o.model}); err != nil {
		return err
	}
	start := time.Now()
	src, err := ckpt.Open(o.model)
	if err != nil {
		return err
	}
	defer src.Close()
	if err := engine.CheckCheckpoint(src); err != nil {
		return err
	}
	if err := checkOutput(o.out, ckpt.InputFiles(src)); err != nil {
		return err
	}
	var total int64
	for _, t := range src.Tensors() {
		total += t.Size
	}
	cfg := src.Config()
	fmt.Fprintf(log, "convert: %s (%s): %d layers, hidden %d, %d experts, %d tensors, %.1f MiB -> %s (%s)\n",
		o.model, src.Format(), cfg.NumLayers, cfg.HiddenSize, cfg.NumExperts, len(src.Tensors()),
		float64(total)/(1<<20), o.out, outputDesc(o))
	for _, w := range requantWarnings(src, opt) {
		fmt.Fprintf(log, "convert: warning: %s\n", w)
	}
	switch tok, err := ckpt.TokenizerMetadata(src); {
	case err != nil:
		fmt.Fprintf(log, "convert: warning: the tokenizer is not embedded: %v\n", err)
	case tok == nil:
		fmt.Fprintf(log, "convert: note: %s has no tokenizer.json; the GGUF carries no vocabulary\n", o.model)
	default:
		opt.Extra = tok
	}
	return writeConverted(o, src, opt, total, start, log)
}

// writeConverted writes src to o.out under opt, reads the result back and
// validates it, reporting on log.
func writeConverted(o convertOpts, src ckpt.Checkpoint, opt ckpt.WriteOptions, total int64, start time.Time, log io.Writer) error {
	bar := progress.New(log, "convert", total, "B")
	opt.Progress = func(done, n int, t ckpt.TensorInfo, out ckpt.DType) { bar.Add(t.Size) }
	// Ctrl-C or SIGTERM stops the write and removes the temporary file;
	// the previous output, if any, stays.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := ckpt.WriteGGUFFileContext(ctx, o.out, src, opt); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("interrupted: no partial file is left and %s is unchanged", o.out)
		}
		return err
	}
	bar.Done()
	// Read the result back: a file lagc wrote must open and validate.
	check, err := ckpt.Open(o.out)
	if err != nil {
		return fmt.Errorf("the written file does not read back: %w", err)
	}
	defer check.Close()
	if err := engine.CheckCheckpoint(check); err != nil {
		return fmt.Errorf("the written file does not validate: %w", err)
	}
	st, err := os.Stat(o.out)
	if err != nil {
		return err
	}
	fmt.Fprintf(log, "convert: wrote %s: %d tensors (%s), %.1f MiB in %.1fs; it reads back and validates\n",
		o.out, len(check.Tensors()), typeSummary(check), float64(st.Size())/(1<<20), time.Since(start).Seconds())
	return nil
}
