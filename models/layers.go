package models

import (
	"sort"

	"lagc/config"
	"lagc/ir"
)

// LayerInfo describes one decoder layer as the graph computes it.
type LayerInfo struct {
	Layer   int
	Sliding bool
	Window  int // 0 for full attention
	Heads   int // query heads
	KVHeads int
	MLP     string // "dense" or "moe"
}

// Kind returns the layer's attention type, as in HF layer_types.
func (li LayerInfo) Kind() string {
	if li.Sliding {
		return config.SlidingAttention
	}
	return config.FullAttention
}

// LayerTable reads the per-layer structure back from a graph: attention
// nodes give the layer index, window and head counts; a moe_experts (or
// fused moe_grouped) node reading blk.N.* weights marks layer N as MoE,
// otherwise it is dense.
func LayerTable(g *ir.Graph) []LayerInfo {
	byLayer := map[int]*LayerInfo{}
	for _, n := range g.Nodes {
		if !ir.IsAttention(n) || len(n.Inputs) < 2 {
			continue
		}
		l := n.AttrInt("layer")
		li := &LayerInfo{Layer: l, Window: n.AttrInt("window"), MLP: config.MLPDense}
		li.Sliding = li.Window > 0
		if q := n.Inputs[0].Type.Shape; len(q) == 3 {
			li.Heads = q[1].N
		}
		if k := n.Inputs[1].Type.Shape; len(k) == 3 {
			li.KVHeads = k[1].N
		}
		byLayer[l] = li
	}
	for _, n := range g.Nodes {
		if n.Op != "moe_experts" && n.Op != "moe_grouped" {
			continue
		}
		for _, v := range n.Inputs {
			if l, ok := ir.LayerOf(v.Name); ok && v.Kind == ir.Weight && byLayer[l] != nil {
				byLayer[l].MLP = "moe"
			}
		}
	}
	out := make([]LayerInfo, 0, len(byLayer))
	for _, li := range byLayer {
		out = append(out, *li)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Layer < out[j].Layer })
	return out
}
