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

// censusStep counts the routed expert ids that router_topk step i of p
// selected, where its selecting launch wrote them (lower.StepSelection:
// a fused selection writes the routes buffer with the shared experts'
// routes appended, not the step's own ids rows).
func (e *Executor) censusStep(st *lower.Step, p *program, i int) error {
	if st.Op != "router_topk" {
		return nil
	}
	sel, ok := lower.StepSelection(p.lowered, i)
	if !ok {
		return fmt.Errorf("census of %s: no launch before it selects experts", st.Name)
	}
	base, err := e.base(sel.IDs.Base)
	if err != nil {
		return fmt.Errorf("census of %s: %w", st.Name, err)
	}
	rows := make([]int32, sel.T*sel.Stride)
	if err := cuda.Download(e.q, rows, base.Add(sel.IDs.Offset)); err != nil {
		return fmt.Errorf("census of %s: %w", st.Name, err)
	}
	ids := make([]int32, 0, sel.T*sel.K)
	for r := range sel.T {
		ids = append(ids, rows[r*sel.Stride:r*sel.Stride+sel.K]...)
	}
	e.census.Add(st.Layer, ids)
	return nil
}
