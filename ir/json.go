package ir

import (
	"encoding/json"
	"io"
)

// jsonGraph is the JSON dump format: a plain description for tools.
type jsonGraph struct {
	Name    string       `json:"name"`
	Syms    []string     `json:"syms"`
	Inputs  []jsonValue  `json:"inputs"`
	Weights []jsonWeight `json:"weights"`
	Nodes   []jsonNode   `json:"nodes"`
	Outputs []string     `json:"outputs"`
}

type jsonValue struct {
	Name string `json:"name"`
	Type string `json:"type"`
}

type jsonWeight struct {
	jsonValue
	From *jsonNode `json:"from,omitempty"`
}

type jsonNode struct {
	ID      int         `json:"id,omitempty"`
	Op      string      `json:"op"`
	Inputs  []string    `json:"inputs"`
	Outputs []jsonValue `json:"outputs,omitempty"`
	Attrs   Attrs       `json:"attrs,omitempty"`
}

// WriteJSON writes g as JSON, nodes in topological order.
func WriteJSON(w io.Writer, g *Graph) error {
	names := func(vs []*Value) []string {
		out := make([]string, len(vs))
		for i, v := range vs {
			if v != nil {
				out[i] = v.Name
			}
		}
		return out
	}
	jg := jsonGraph{Name: g.Name, Syms: g.Syms, Outputs: names(g.Outputs)}
	for _, v := range g.Inputs {
		jg.Inputs = append(jg.Inputs, jsonValue{v.Name, v.Type.String()})
	}
	for _, v := range g.Weights {
		jw := jsonWeight{jsonValue: jsonValue{v.Name, v.Type.String()}}
		if v.From != nil {
			jw.From = &jsonNode{Op: v.From.Op, Inputs: names(v.From.Srcs), Attrs: jsonAttrs(v.From.Attrs)}
		}
		jg.Weights = append(jg.Weights, jw)
	}
	order, err := g.Order()
	if err != nil {
		order = g.Nodes
	}
	for _, n := range order {
		jn := jsonNode{ID: n.ID, Op: n.Op, Inputs: names(n.Inputs), Attrs: jsonAttrs(n.Attrs)}
		for _, v := range n.Outputs {
			jn.Outputs = append(jn.Outputs, jsonValue{v.Name, v.Type.String()})
		}
		jg.Nodes = append(jg.Nodes, jn)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", " ")
	return enc.Encode(jg)
}

// jsonAttrs writes shapes as strings ("[T,48,128]"); other kinds are plain.
func jsonAttrs(a Attrs) Attrs {
	if len(a) == 0 {
		return nil
	}
	out := Attrs{}
	for k, v := range a {
		if s, ok := v.(Shape); ok {
			out[k] = s.String()
			continue
		}
		out[k] = v
	}
	return out
}
