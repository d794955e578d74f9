package models

import (
	"testing"

	"lagc/ckpt"
	"lagc/ir"
)

// TestWeightTypesS21: the per-type table adds up to ParamCount's figures
// (bf16: two bytes a parameter, total and per token), and under the
// Q4_K_M recipe a decode token reads what DESIGN.md and issue 12 quote
// for it (about 6.5 GB), the routed experts in Q4_K/Q6_K, f32 norms.
func TestWeightTypesS21(t *testing.T) {
	g := build(t, preset(t, "laguna-s-2.1"))
	total, active := g.ParamCount()
	st := g.WeightTypes()
	if len(st) != 2 || st[0].DType != ir.BF16 || st[1].DType != ir.F32 {
		t.Fatalf("bf16 graph's weight types: %+v", st)
	}
	var params, act int64
	for _, s := range st {
		params += s.Params
		act += s.Active
		if size := int64(2 + 2*b2i(s.DType == ir.F32)); s.Bytes != size*s.Params || s.PerTok != size*s.Active {
			t.Errorf("%v: %d bytes for %d parameters, %d a token for %d active", s.DType, s.Bytes, s.Params, s.PerTok, s.Active)
		}
	}
	if params != total || act != active {
		t.Errorf("types hold %d parameters, %d active; ParamCount %d, %d", params, act, total, active)
	}

	r, err := ckpt.ParseRecipe("q4_k_m")
	if err != nil {
		t.Fatal(err)
	}
	if err := SetRecipeTypes(g, r); err != nil {
		t.Fatal(err)
	}
	st = g.WeightTypes()
	var bytes, perTok int64
	params = 0
	for _, s := range st {
		t.Logf("%-5v %4d tensors %14d params %14d bytes %12d a token", s.DType, s.Tensors, s.Params, s.Bytes, s.PerTok)
		params += s.Params
		bytes += s.Bytes
		perTok += s.PerTok
	}
	if params != total {
		t.Errorf("q4_k_m: types hold %d parameters, ParamCount %d", params, total)
	}
	if perTok < 6.0e9 || perTok > 7.0e9 || bytes < 60e9 || bytes > 70e9 {
		t.Errorf("q4_k_m: %d bytes a token, %d in all; DESIGN.md: about 6.5 GB a token, about 62-66 GB in all", perTok, bytes)
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
