// Package routes counts how a MoE model's routers spread tokens over
// their experts: a benchmark's routing decides how many expert weights a
// prefill reads and how full the grouped GEMMs' tiles are, and synthetic
// weights route as their random routers do, which need not resemble a
// trained model's near-uniform load. Both executors fill a Census from
// their router_topk steps (gpu and cpu's CensusRoutes).
package routes

import "slices"

// Layer is one MoE layer's routing over a census.
type Layer struct {
	Layer   int `json:"layer"`
	Routes  int `json:"routes"`  // tokens x top-k (a shared expert not counted)
	Used    int `json:"used"`    // experts with at least one route
	Busiest int `json:"busiest"` // routes of the busiest expert
	// The grouped prefill GEMMs' row tiles for these routes (sum over the
	// experts of ceil(routes / rows)): 128 rows for bf16 stacks' gemm_wgmma,
	// 96 for the quantised ones' gemm_wgmma_q, 112 a candidate height for
	// those (docs/PERF.md). Each tile past one an expert is another pass
	// over that expert's weights.
	Tiles128 int `json:"tiles_128"`
	Tiles96  int `json:"tiles_96"`
	Tiles112 int `json:"tiles_112"`
}

// Census counts expert ids by layer.
type Census struct {
	counts map[int]map[int32]int
}

// Add counts a router step's expert ids of one layer (invalid ids, below
// zero, route nowhere).
func (c *Census) Add(layer int, ids []int32) {
	if c.counts == nil {
		c.counts = map[int]map[int32]int{}
	}
	m := c.counts[layer]
	if m == nil {
		m = map[int32]int{}
		c.counts[layer] = m
	}
	for _, id := range ids {
		if id >= 0 {
			m[id]++
		}
	}
}

// Layers is each counted layer's routing, in layer order.
func (c *Census) Layers() []Layer {
	var out []Layer
	for layer, m := range c.counts {
		r := Layer{Layer: layer, Used: len(m)}
		for _, n := range m {
			r.Routes += n
			r.Busiest = max(r.Busiest, n)
			r.Tiles128 += (n + 127) / 128
			r.Tiles96 += (n + 95) / 96
			r.Tiles112 += (n + 111) / 112
		}
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b Layer) int { return a.Layer - b.Layer })
	return out
}

// Take counts one run: after reset, install gives the executor a fresh
// census, run feeds its tokens, and whatever happens the executor is
// uninstalled (install(nil)) and reset again. It returns the run's
// layers.
func Take(install func(*Census), reset func(), run func() error) ([]Layer, error) {
	reset()
	c := &Census{}
	install(c)
	defer func() {
		install(nil)
		reset()
	}()
	if err := run(); err != nil {
		return nil, err
	}
	return c.Layers(), nil
}
