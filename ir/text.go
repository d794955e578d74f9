package ir

import (
	"bufio"
	"fmt"
	"io"
	"strings"
)

// The text form, one statement a line ('#' starts a comment line):
//
//	graph laguna
//	sym T
//	input %tokens: i32[T]
//	weight @token_embd.weight: bf16[100352,3072]
//	weight @blk.1.ffn_gate_up.weight: bf16[2048,3072] = concat(@blk.1.ffn_gate.weight, @blk.1.ffn_up.weight) {axis=0}
//	%h: f32[T,3072] = embedding(%tokens, @token_embd.weight)
//	%blk.1.rw: f32[T,10], %blk.1.ids: i32[T,10] = router_topk(%blk.1.rl, @blk.1.exp_probs_b.bias) {top_k=10}
//	output %logits, %next
//
// Weights are written @name, everything else %name. Attribute values are
// ints, floats (always with '.', 'e', Inf or NaN), "strings", int lists and
// shapes ([T,48,128]). Nodes are printed in topological order.

// Print writes g in the text form.
func Print(w io.Writer, g *Graph) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "graph %s\n", g.Name)
	if len(g.Syms) > 0 {
		fmt.Fprintf(bw, "sym %s\n", strings.Join(g.Syms, ", "))
	}
	for _, v := range g.Inputs {
		fmt.Fprintf(bw, "input %s: %s\n", v, v.Type)
	}
	for _, v := range g.Weights {
		fmt.Fprintf(bw, "weight %s: %s", v, v.Type)
		if v.From != nil {
			fmt.Fprintf(bw, " = %s(%s)%s", v.From.Op, valueList(v.From.Srcs), attrText(v.From.Op, v.From.Attrs))
		}
		bw.WriteByte('\n')
	}
	order, err := g.Order()
	if err != nil {
		order = g.Nodes // print broken graphs too, for debugging
	}
	for _, n := range order {
		for i, v := range n.Outputs {
			if i > 0 {
				bw.WriteString(", ")
			}
			fmt.Fprintf(bw, "%s: %s", v, v.Type)
		}
		fmt.Fprintf(bw, " = %s(%s)%s\n", n.Op, valueList(n.Inputs), attrText(n.Op, n.Attrs))
	}
	if len(g.Outputs) > 0 {
		fmt.Fprintf(bw, "output %s\n", valueList(g.Outputs))
	}
	return bw.Flush()
}

// String returns g in the text form.
func (g *Graph) String() string {
	var b strings.Builder
	_ = Print(&b, g)
	return b.String()
}

func valueList(vs []*Value) string {
	parts := make([]string, len(vs))
	for i, v := range vs {
		if v == nil {
			parts[i] = "%<nil>"
			continue
		}
		parts[i] = v.String()
	}
	return strings.Join(parts, ", ")
}

// attrText prints attributes in the op's schema order, unknown ones last.
func attrText(op string, a Attrs) string {
	if len(a) == 0 {
		return ""
	}
	var keys []string
	seen := map[string]bool{}
	if d, ok := Op(op); ok {
		for _, s := range d.Attrs {
			if _, ok := a[s.Name]; ok {
				keys = append(keys, s.Name)
				seen[s.Name] = true
			}
		}
	}
	for _, k := range a.Keys() {
		if !seen[k] {
			keys = append(keys, k)
		}
	}
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + formatAttr(a[k])
	}
	return " {" + strings.Join(parts, ", ") + "}"
}

// canonicalAttrs converts each attribute to its schema kind where it can
// (ints given for floats become floats), leaving the rest for Verify.
func canonicalAttrs(op string, a Attrs) Attrs {
	out := a.Clone()
	d, ok := Op(op)
	if !ok {
		return out
	}
	for k, v := range out {
		if s, ok := d.Attr(k); ok {
			if c, ok := coerceAttr(s.Kind, v); ok {
				out[k] = c
			}
		}
	}
	return out
}
