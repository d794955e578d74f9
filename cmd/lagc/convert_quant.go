package main

import (
	"fmt"
	"sort"
	"strings"

	"lagc/ckpt"
)

// applyQuant sets opt's recipe from --quant.
func applyQuant(o convertOpts, opt *ckpt.WriteOptions) error {
	if o.quant == "" {
		_, err := withTensorTypes(nil, o.tensorTypes) // an error where there are any
		return err
	}
	if o.dtype != "keep" {
		return fmt.Errorf("%w: --dtype %s and --quant %s exclude each other (--quant f16 and --quant bf16 exist)", errUsage, o.dtype, o.quant)
	}
	r, err := ckpt.ParseRecipe(o.quant)
	if err != nil {
		return fmt.Errorf("%w: --quant: %v", errUsage, err)
	}
	if r, err = withTensorTypes(r, o.tensorTypes); err != nil {
		return err
	}
	opt.Recipe, opt.KeepDType = r, false
	return nil
}

// outputDesc names what the output's matrices will be, for the log.
func outputDesc(o convertOpts) string {
	if o.quant != "" {
		return "quant " + strings.ToLower(o.quant)
	}
	return "dtype " + o.dtype
}

// requantWarnings lists the tensors that are already quantised and will be
// quantised again to another type (which loses more than quantising the
// original weights would).
func requantWarnings(src ckpt.Checkpoint, opt ckpt.WriteOptions) []string {
	if opt.Recipe == nil {
		return nil
	}
	byPair := map[string]int{}
	for _, t := range src.Tensors() {
		if out := opt.Recipe.TypeFor(t); t.DType.Quantized() && out != t.DType {
			byPair[fmt.Sprintf("%s to %s", t.DType, out)]++
		}
	}
	var out []string
	for pair, n := range byPair {
		out = append(out, fmt.Sprintf("requantising %d tensors from %s: quantising the original weights loses less", n, pair))
	}
	sort.Strings(out)
	return out
}

// typeSummary counts a checkpoint's tensors by type, most first: "q4_k
// 12, q8_0 9, f32 11".
func typeSummary(ck ckpt.Checkpoint) string {
	counts := map[ckpt.DType]int{}
	for _, t := range ck.Tensors() {
		counts[t.DType]++
	}
	types := make([]ckpt.DType, 0, len(counts))
	for t := range counts {
		types = append(types, t)
	}
	sort.Slice(types, func(i, j int) bool {
		if counts[types[i]] != counts[types[j]] {
			return counts[types[i]] > counts[types[j]]
		}
		return types[i] < types[j]
	})
	parts := make([]string, len(types))
	for i, t := range types {
		parts[i] = fmt.Sprintf("%s %d", t, counts[t])
	}
	return strings.Join(parts, ", ")
}
