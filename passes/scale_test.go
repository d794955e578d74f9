package passes

import (
	"testing"
	"time"

	"lagc/config"
	"lagc/ir"
	"lagc/models"
)

// manyLayers returns synthetic-tiny's shape with n layers (layer 0 dense).
func manyLayers(t testing.TB, n int) *config.Config {
	t.Helper()
	c, err := config.Preset("synthetic-tiny")
	if err != nil {
		t.Fatal(err)
	}
	c.NumLayers = n
	c.LayerTypes, c.MLPLayerTypes, c.HeadsPerLayer = nil, nil, nil
	if err := c.Normalize(); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestCompileMaxLayers guards against compile time growing faster than the
// layer count: the deepest configuration accepted (config.MaxLayers) builds
// and runs the default pipeline far within the bound, in CPU time so that
// a busy machine does not fail it. It takes about 2 s of CPU
// (BenchmarkCompile1024 measures it); passes quadratic in the graph took
// over a minute.
func TestCompileMaxLayers(t *testing.T) {
	const bound = 20 * time.Second
	start := cpuTime()
	g, err := models.BuildLaguna(manyLayers(t, config.MaxLayers))
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(g, Options{})
	if err != nil {
		t.Fatal(err)
	}
	d := cpuTime() - start
	if d > bound {
		t.Errorf("%d layers took %v of CPU to build and compile, more than %v", config.MaxLayers, d, bound)
	}
	t.Logf("%d layers: %v of CPU", config.MaxLayers, d.Round(time.Millisecond))
	if n := g.OpCounts()["moe_grouped"]; n != config.MaxLayers-1 || res.State.Plan(1, ir.F32) == nil {
		t.Errorf("%d fused MoE layers of %d, memory plans %d", n, config.MaxLayers-1, len(res.State.Memory))
	}
}

func benchmarkCompile(b *testing.B, layers int) {
	c := manyLayers(b, layers)
	start, n := cpuTime(), 0
	for b.Loop() {
		n++
		g, err := models.BuildLaguna(c)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := Run(g, Options{}); err != nil {
			b.Fatal(err)
		}
	}
	// CPU time as well: the wall time grows with whatever else runs.
	b.ReportMetric(float64(cpuTime()-start)/float64(n)/1e6, "cpu-ms/op")
}

// BenchmarkCompile256 and BenchmarkCompile1024 build and compile (default
// pipeline) synthetic-tiny with 256 and 1024 layers: the time should grow
// linearly.
func BenchmarkCompile256(b *testing.B)  { benchmarkCompile(b, 256) }
func BenchmarkCompile1024(b *testing.B) { benchmarkCompile(b, 1024) }
