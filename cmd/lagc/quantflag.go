package main

import (
	"fmt"

	"lagc/ckpt"
	"lagc/ir"
	"lagc/models"
)

// quantFlagDoc is --quant's help for the commands that build a model from
// a preset or config.json (bench says its own: it needs --synthetic).
const quantFlagDoc = "weights in a quantisation recipe or type (q4_k_m, q8_0, q4_k, ...), as lagc convert --quant stores them and lagc bench --synthetic --quant runs them; not with --model (a checkpoint keeps its own types)"

// parseQuantFlag reads --quant: nil for "", else the recipe lagc convert
// knows by that name. A checkpoint (--model) keeps its own types.
func parseQuantFlag(quant, model string) (*ckpt.Recipe, error) {
	if quant == "" {
		return nil, nil
	}
	if model != "" {
		return nil, fmt.Errorf("%w: --quant gives a preset's or config's weights a recipe's types; a checkpoint (--model) keeps its own", errUsage)
	}
	r, err := ckpt.ParseRecipe(quant)
	if err != nil {
		return nil, fmt.Errorf("%w: --quant: %v", errUsage, err)
	}
	return r, nil
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
