package ir

import (
	"cmp"
	"slices"
)

// ParamCount returns the number of checkpoint parameters (every weight that
// is not derived from others) and the number active for one token: the
// embedding table is excluded there (it is a lookup, not a matmul), routed
// expert tensors count top_k/num_experts of their size, everything else in
// full. A derived weight passes its consumers' use on to its sources.
func (g *Graph) ParamCount() (total, active int64) {
	for _, t := range g.WeightTypes() {
		total += t.Params
		active += t.Active
	}
	return total, active
}

// useFrac is the fraction of a weight one token reads, num/den.
type useFrac struct{ num, den int64 }

// weightUse returns the fraction of each weight one token reads (see
// ParamCount); weights no node reads are absent.
func (g *Graph) weightUse() map[*Value]useFrac {
	// use[w] is the fraction of w read per token, as num/den.
	use := map[*Value]useFrac{}
	more := func(w *Value, f useFrac) bool {
		old, ok := use[w]
		if ok && old.num*f.den >= f.num*old.den {
			return false
		}
		use[w] = f
		return true
	}
	for _, n := range g.Nodes {
		for i, v := range n.Inputs {
			if v == nil || v.Kind != Weight {
				continue
			}
			f := useFrac{1, 1}
			switch {
			case n.Op == "embedding" && i == 1:
				f = useFrac{0, 1}
			case (n.Op == "moe_experts" || n.Op == "moe_grouped") && i >= 3 && len(v.Type.Shape) == 3 && len(n.Inputs[1].Type.Shape) == 2:
				k, e := n.Inputs[1].Type.Shape[1], v.Type.Shape[0]
				if !k.IsConst() || !e.IsConst() {
					break
				}
				routed := e.N - n.AttrInt("shared")
				if routed <= 0 {
					break
				}
				f = useFrac{int64(k.N), int64(routed)}
				if routed != e.N && v.From != nil && v.From.Op == "concat" {
					// A stack with the shared expert appended (shared-expert-merge):
					// the routed source is read k/E, the shared one in full.
					for _, s := range v.From.Srcs {
						fs := useFrac{1, 1}
						if sh := s.Type.Shape; len(sh) == 3 && sh[0].IsConst() && sh[0].N == routed {
							fs = f
						}
						more(s, fs)
					}
					continue
				}
			}
			more(v, f)
		}
	}
	for changed := true; changed; {
		changed = false
		for _, w := range g.Weights {
			if f, ok := use[w]; ok && w.From != nil {
				for _, s := range w.From.Srcs {
					if s != nil && more(s, f) {
						changed = true
					}
				}
			}
		}
	}
	return use
}

// WeightTypeStat is what the checkpoint weights (those not derived from
// others) of one dtype hold, and the parameters and bytes of them one
// decode token reads (ParamCount's fractions: routed experts at
// top_k/num_experts, the embedding's one row not counted).
type WeightTypeStat struct {
	DType                         DType
	Tensors                       int
	Params, Bytes, Active, PerTok int64
}

// WeightTypes returns the checkpoint weights grouped by dtype, the most
// bytes first.
func (g *Graph) WeightTypes() []WeightTypeStat {
	use := g.weightUse()
	byType := map[DType]*WeightTypeStat{}
	var out []*WeightTypeStat
	for _, w := range g.Weights {
		if w.From != nil {
			continue
		}
		n, ok := w.Type.Shape.ConstElems()
		if !ok {
			continue
		}
		st := byType[w.Type.DType]
		if st == nil {
			st = &WeightTypeStat{DType: w.Type.DType}
			byType[w.Type.DType] = st
			out = append(out, st)
		}
		b := w.Type.DType.Bytes(n)
		st.Tensors++
		st.Params += n
		st.Bytes += b
		if f, ok := use[w]; ok {
			st.Active += n * f.num / f.den
			st.PerTok += b * f.num / f.den
		}
	}
	stats := make([]WeightTypeStat, len(out))
	for i, st := range out {
		stats[i] = *st
	}
	slices.SortStableFunc(stats, func(a, b WeightTypeStat) int { return cmp.Compare(b.Bytes, a.Bytes) })
	return stats
}
