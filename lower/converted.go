package lower

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"lagc/ir"
)

// Conversion is the uploaded weights of one block-quantised source type
// that the device holds in a float type instead: the types without GPU
// kernels (q2_k, q3_k, q4_0, ...), and the expert stacks of a layer where
// one stack's type has none (lower's quantKeep). They take the float
// type's bytes, which can be several times the file's.
type Conversion struct {
	Source  string `json:"source_dtype"`
	DType   string `json:"dtype"`
	Tensors int    `json:"tensors"`
	Stored  int64  `json:"stored_bytes"` // as the source type holds them
	Bytes   int64  `json:"bytes"`        // on the device
}

// Conversions lists the plan's conversions of block-quantised weights to
// float types at upload, the most device bytes first.
func (p *Plan) Conversions() []Conversion {
	byType := map[[2]string]*Conversion{}
	for _, w := range p.Weights {
		if w.Offset < 0 || w.Source == w.DType || !IsQuantized(w.Source) || IsQuantized(w.DType) {
			continue
		}
		src, err := ir.ParseDType(w.Source)
		if err != nil {
			continue
		}
		n := int64(1)
		for _, d := range w.Shape {
			n *= int64(d)
		}
		k := [2]string{w.Source, w.DType}
		c := byType[k]
		if c == nil {
			c = &Conversion{Source: w.Source, DType: w.DType}
			byType[k] = c
		}
		c.Tensors++
		c.Stored += src.Bytes(n)
		c.Bytes += w.Bytes
	}
	var out []Conversion
	for _, c := range byType {
		out = append(out, *c)
	}
	slices.SortFunc(out, func(a, b Conversion) int {
		return cmp.Or(cmp.Compare(b.Bytes, a.Bytes), strings.Compare(a.Source+a.DType, b.Source+b.DType))
	})
	return out
}

// ConversionNote says what Conversions holds in one line ("" if
// nothing): why a quantised model needs more device memory than its file.
func (p *Plan) ConversionNote() string {
	cs := p.Conversions()
	if len(cs) == 0 {
		return ""
	}
	var parts []string
	for _, c := range cs {
		parts = append(parts, fmt.Sprintf("%d %s tensors, %s as stored, %s in %s", c.Tensors, c.Source, FormatBytes(c.Stored), FormatBytes(c.Bytes), c.DType))
	}
	return "converted at upload, no GPU kernel reading their type there: " + strings.Join(parts, "; ")
}

// Dequant is what a full prefill chunk dequantises into the workspace
// before its GEMMs read it (qdequant launches): the dense matmuls of
// quantised weights without a bf16 copy, and the expert stacks of types
// without a grouped GEMM (before Hopper; q5_k, q6_k where QMoEForce turns
// theirs off). Every chunk writes these bytes and reads them back.
type Dequant struct {
	Matrices int   `json:"matrices"`
	Bytes    int64 `json:"bytes"` // written a chunk
	Experts  int   `json:"expert_stacks"`
}

// PrefillDequant sums the prefill schedule's qdequant launches.
func (p *Plan) PrefillDequant() Dequant {
	var d Dequant
	if p.Prefill == nil {
		return d
	}
	for _, st := range p.Prefill.Steps {
		for _, l := range st.Launches {
			if l.Kernel != "qdequant" || len(l.Args) < 4 || len(l.DTypes) != 1 {
				continue
			}
			d.Matrices++
			d.Bytes += l.Args[3].Int * l.Args[1].Int * int64(dtypeSize(l.DTypes[0])) // rows n x K
			if strings.HasPrefix(st.Op, "moe") {
				d.Experts++
			}
		}
	}
	return d
}

// DequantNote says what PrefillDequant counts in one line ("" if
// nothing).
func (p *Plan) DequantNote() string {
	d := p.PrefillDequant()
	if d.Matrices == 0 {
		return ""
	}
	return "prefill dequantises " + d.String()
}

// String is "N matrices (M expert stacks) into the workspace every chunk,
// X written and read back".
func (d Dequant) String() string {
	plural := func(n int, one, many string) string {
		if n == 1 {
			return "1 " + one
		}
		return fmt.Sprintf("%d %s", n, many)
	}
	return fmt.Sprintf("%s (%s) into the workspace every chunk, %s written and read back",
		plural(d.Matrices, "matrix", "matrices"), plural(d.Experts, "expert stack", "expert stacks"), FormatBytes(d.Bytes))
}
