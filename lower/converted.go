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
