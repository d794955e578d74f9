package gpu

import (
	"fmt"

	"lagc/cuda"
	"lagc/exec/routes"
	"lagc/lower"
)

// CensusRoutes prefills tokens from position 0 eagerly, copying each
// router step's expert ids to the host after its launches, and returns
// every MoE layer's routing (routes.Layer), in layer order; the sequence
// is reset afterwards. A synchronisation and a copy per MoE layer and
// chunk: slower than a prefill, meant for benchmark reports.
func (e *Executor) CensusRoutes(tokens []int32) ([]routes.Layer, error) {
	return routes.Take(func(c *routes.Census) { e.census = c }, e.Reset, func() error {
		_, err := e.Prefill(tokens)
		return err
	})
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
		e.census.Add(st.Layer, ids)
	}
	return nil
}
