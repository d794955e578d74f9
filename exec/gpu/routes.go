package gpu

import (
	"fmt"
	"slices"

	"lagc/cuda"
	"lagc/lower"
)

// RouteCensus is how one MoE layer's router spread a prefill's tokens over
// its experts: a benchmark on synthetic weights routes as their random
// router does, which need not resemble a trained model's near-uniform
// load (the grouped GEMMs' speed depends on it: kernel-bench routes
// uniformly at random).
type RouteCensus struct {
	Layer   int `json:"layer"`
	Routes  int `json:"routes"`  // tokens x top-k (the shared expert not counted)
	Used    int `json:"used"`    // experts with at least one route
	Busiest int `json:"busiest"` // routes of the busiest expert
}

// routeCensus collects the expert ids of every router_topk step by layer.
type routeCensus struct {
	counts map[int]map[int32]int
}

// CensusRoutes prefills tokens from position 0 eagerly, copying each
// router step's expert ids to the host after its launches, and returns
// every MoE layer's census, in layer order; the sequence is reset
// afterwards. A step's synchronisation and copy per MoE layer: slower
// than a prefill, meant for benchmark reports.
func (e *Executor) CensusRoutes(tokens []int32) ([]RouteCensus, error) {
	e.Reset()
	e.census = &routeCensus{counts: map[int]map[int32]int{}}
	c := e.census
	defer func() {
		e.census = nil
		e.Reset()
	}()
	if _, err := e.Prefill(tokens); err != nil {
		return nil, err
	}
	return c.report(), nil
}

// censusStep counts the expert ids a router_topk step st wrote at T
// tokens (its i32 output).
func (e *Executor) censusStep(st *lower.Step, T int) error {
	if st.Op != "router_topk" {
		return nil
	}
	for _, o := range st.Out {
		if o.DType != "i32" || o.Kind != "activation" {
			continue
		}
		ids := make([]int32, o.Elems(T))
		if err := cuda.Download(e.q, ids, e.arena.Add(o.Offset)); err != nil {
			return fmt.Errorf("census of %s: %w", o.Value, err)
		}
		e.census.add(st.Layer, ids)
	}
	return nil
}

func (c *routeCensus) add(layer int, ids []int32) {
	m := c.counts[layer]
	if m == nil {
		m = map[int32]int{}
		c.counts[layer] = m
	}
	for _, id := range ids {
		if id >= 0 { // an invalid id routes nowhere
			m[id]++
		}
	}
}

func (c *routeCensus) report() []RouteCensus {
	var out []RouteCensus
	for layer, m := range c.counts {
		r := RouteCensus{Layer: layer, Used: len(m)}
		for _, n := range m {
			r.Routes += n
			r.Busiest = max(r.Busiest, n)
		}
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b RouteCensus) int { return a.Layer - b.Layer })
	return out
}
