package main

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"lagc/ckpt"
	"lagc/ir"
	"lagc/models"
)

// quantFlagDoc is --quant's help for the commands that build a model from
// a preset or config.json (bench says its own: it needs --synthetic).
const quantFlagDoc = "weights in a quantisation recipe or type (q4_k_m, q8_0, q4_k, ...), as lagc convert --quant stores them and lagc bench --synthetic --quant runs them; not with --model (a checkpoint keeps its own types)"

// tensorTypeDoc is --tensor-type's help.
const tensorTypeDoc = "PATTERN=TYPE, repeatable, as llama-quantize's: the tensors whose name the regular expression matches take TYPE, before --quant's own rules (the first match wins); with --quant"

// tensorTypes is --tensor-type PATTERN=TYPE, repeatable: rules that come
// before the recipe's own.
type tensorTypes []ckpt.TypeRule

func (t *tensorTypes) String() string {
	if t == nil {
		return ""
	}
	var parts []string
	for _, r := range *t {
		parts = append(parts, r.Pattern.String()+"="+r.Type.String())
	}
	return strings.Join(parts, ",")
}

func (t *tensorTypes) Set(s string) error {
	i := strings.LastIndex(s, "=")
	if i <= 0 || i == len(s)-1 {
		return fmt.Errorf("%q: want PATTERN=TYPE", s)
	}
	re, err := regexp.Compile(s[:i])
	if err != nil {
		return fmt.Errorf("%q: %v", s, err)
	}
	r, err := ckpt.ParseRecipe(s[i+1:])
	if err != nil || len(r.Rules) > 0 {
		return fmt.Errorf("%q: %s is not a type lagc quantises to", s, s[i+1:])
	}
	*t = append(*t, ckpt.TypeRule{Pattern: re, Type: r.Base})
	return nil
}

// withTensorTypes is r with tt's rules first (r itself when tt is empty).
func withTensorTypes(r *ckpt.Recipe, tt tensorTypes) (*ckpt.Recipe, error) {
	if len(tt) == 0 {
		return r, nil
	}
	if r == nil {
		return nil, fmt.Errorf("%w: --tensor-type %s needs --quant (the types of the other tensors)", errUsage, tt.String())
	}
	out := *r
	out.Name = r.Name + "+" + tt.String()
	out.Rules = append(slices.Clone([]ckpt.TypeRule(tt)), r.Rules...)
	return &out, nil
}

// parseQuantFlag reads --quant and --tensor-type: nil for "", else the
// recipe lagc convert knows by that name, tt's rules first. A checkpoint
// (--model) keeps its own types.
func parseQuantFlag(quant, model string, tt tensorTypes) (*ckpt.Recipe, error) {
	if quant == "" {
		return withTensorTypes(nil, tt)
	}
	if model != "" {
		return nil, fmt.Errorf("%w: --quant gives a preset's or config's weights a recipe's types; a checkpoint (--model) keeps its own", errUsage)
	}
	r, err := ckpt.ParseRecipe(quant)
	if err != nil {
		return nil, fmt.Errorf("%w: --quant: %v", errUsage, err)
	}
	return withTensorTypes(r, tt)
}

// setQuantTypes gives g's checkpoint weights r's types (nil: as built),
// before the passes.
func setQuantTypes(g *ir.Graph, r *ckpt.Recipe) error {
	if r == nil {
		return nil
	}
	if err := models.SetRecipeTypes(g, r); err != nil {
		return fmt.Errorf("--quant %s: %w", r.Name, err)
	}
	return nil
}
