package passes

import (
	"slices"
	"testing"

	"lagc/config"
	"lagc/models"
)

// TestParamCountSurvivesFusion: the fused graph (stacks concatenated, the
// shared expert merged into the routed gather) counts the same parameters,
// total and active per token, and the same bytes of each weight type, as
// the graph before the passes.
func TestParamCountSurvivesFusion(t *testing.T) {
	for _, name := range []string{"laguna-s-2.1", "synthetic-tiny"} {
		cfg, err := config.Preset(name)
		if err != nil {
			t.Fatal(err)
		}
		g, err := models.BuildLaguna(cfg)
		if err != nil {
			t.Fatal(err)
		}
		total0, active0 := g.ParamCount()
		types0 := g.WeightTypes()
		if _, err := Run(g, Options{Passes: append([]string{"shapes"}, append(FusionPasses, "cse", "dce")...)}); err != nil {
			t.Fatal(err)
		}
		if g.OpCounts()["moe_grouped"] == 0 {
			t.Fatalf("%s: no moe_grouped after the fusion passes", name)
		}
		total, active := g.ParamCount()
		if total != total0 || active != active0 {
			t.Errorf("%s: fused graph counts %d total, %d active; unfused %d, %d", name, total, active, total0, active0)
		}
		if types := g.WeightTypes(); !slices.Equal(types, types0) {
			t.Errorf("%s: fused graph's weight types %+v; unfused %+v", name, types, types0)
		}
	}
}

// TestLayerTableSurvivesFusion: the layer table read back from the fused
// graph is the unfused one.
func TestLayerTableSurvivesFusion(t *testing.T) {
	cfg, err := config.Preset("laguna-s-2.1")
	if err != nil {
		t.Fatal(err)
	}
	g, err := models.BuildLaguna(cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := models.LayerTable(g)
	if _, err := Run(g, Options{}); err != nil {
		t.Fatal(err)
	}
	got := models.LayerTable(g)
	if len(got) != len(want) {
		t.Fatalf("%d layers after fusion, %d before", len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			t.Errorf("layer %d: %+v after fusion, %+v before", i, got[i], want[i])
		}
	}
}
