package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"lagc/ckpt"
	"lagc/config"
	"lagc/engine"
)

// runConvertSynthetic writes a GGUF of random weights at a preset's
// shapes (lagc convert --synthetic): each tensor in the type --quant
// gives it (or --dtype; bf16 for keep), quantised blocks made directly,
// streamed to the file a few chunks per core at a time.
func runConvertSynthetic(o convertOpts, log io.Writer) error {
	switch {
	case !o.synthetic:
		return fmt.Errorf("%w: --preset, --layers, --seed and --tokenizer go with --synthetic (a checkpoint's own tokenizer is embedded)", errUsage)
	case o.model != "":
		return fmt.Errorf("%w: --synthetic writes random weights: it takes no --model", errUsage)
	case o.preset == "":
		return fmt.Errorf("%w: --synthetic needs --preset NAME (%s)", errUsage, strings.Join(config.PresetNames(), ", "))
	case o.out == "":
		return fmt.Errorf("%w: -o is required", errUsage)
	case o.layers < 0:
		return fmt.Errorf("%w: --layers %d: expected 0 (all) or more", errUsage, o.layers)
	case o.quant != "" && o.dtype != "keep":
		return fmt.Errorf("%w: --dtype %s and --quant %s exclude each other", errUsage, o.dtype, o.quant)
	}
	recipe := o.quant
	if recipe == "" {
		recipe = o.dtype
		if recipe == "keep" {
			recipe = "bf16"
		}
	}
	r, err := ckpt.ParseRecipe(recipe)
	if err != nil {
		return fmt.Errorf("%w: --quant: %v", errUsage, err)
	}
	if o.quant == "" && len(o.tensorTypes) > 0 {
		_, err := withTensorTypes(nil, o.tensorTypes) // needs --quant
		return err
	}
	if r, err = withTensorTypes(r, o.tensorTypes); err != nil {
		return err
	}
	full, err := config.Preset(o.preset)
	if err != nil {
		return fmt.Errorf("%w: --preset: %v", errUsage, err)
	}
	cfg, err := full.FirstLayers(o.layers)
	if err != nil {
		return err
	}
	if err := checkOutput(o.out, nil); err != nil {
		return err
	}
	start := time.Now()
	tensors, total, err := engine.SyntheticTensors(cfg, r)
	if err != nil {
		return err
	}
	name := o.name
	if name == "" {
		name = fmt.Sprintf("synthetic %s, %d layers, %s", o.preset, cfg.NumLayers, r.Name)
	}
	src, err := ckpt.Synthetic(cfg, "synthetic:"+o.preset, tensors, o.seed)
	if err != nil {
		return err
	}
	fmt.Fprintf(log, "convert: synthetic %s: %d of %d layers, hidden %d, %d experts, %d tensors, %.1f MiB of %s weights (seed %d) -> %s\n",
		o.preset, cfg.NumLayers, full.NumLayers, cfg.HiddenSize, cfg.NumExperts, len(tensors), float64(total)/(1<<20), r.Name, o.seed, o.out)
	opt := ckpt.WriteOptions{Recipe: r, Name: name}
	if o.tokenizer != "" {
		if opt.Extra, err = ckpt.HFTokenizerMetadata(o.tokenizer, cfg.VocabSize); err != nil {
			return fmt.Errorf("--tokenizer: %w", err)
		}
	}
	return writeConverted(o, src, opt, total, start, log)
}
