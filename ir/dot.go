package ir

import (
	"fmt"
	"io"
	"strings"

	"gonum.org/v1/gonum/graph"
	"gonum.org/v1/gonum/graph/encoding"
	"gonum.org/v1/gonum/graph/encoding/dot"
	"gonum.org/v1/gonum/graph/simple"
)

// dotNode is a DOT vertex: an op node, a graph input or the output sink.
type dotNode struct {
	id    int64
	label string
	shape string
}

func (n dotNode) ID() int64     { return n.id }
func (n dotNode) DOTID() string { return fmt.Sprintf("n%d", n.id) }
func (n dotNode) Attributes() []encoding.Attribute {
	return []encoding.Attribute{{Key: "label", Value: n.label}, {Key: "shape", Value: n.shape}}
}

// dotEdge carries the names and types of the values flowing along it.
type dotEdge struct {
	from, to graph.Node
	label    string
}

func (e dotEdge) From() graph.Node         { return e.from }
func (e dotEdge) To() graph.Node           { return e.to }
func (e dotEdge) ReversedEdge() graph.Edge { return dotEdge{e.to, e.from, e.label} }
func (e dotEdge) Attributes() []encoding.Attribute {
	return []encoding.Attribute{{Key: "label", Value: e.label}}
}

// WriteDOT writes g as a Graphviz digraph: one vertex per node (its weights
// listed in the label), inputs and outputs as ellipses, edges labelled with
// the values they carry.
func WriteDOT(w io.Writer, g *Graph) error {
	dg := simple.NewDirectedGraph()
	var next int64
	vtx := map[*Node]dotNode{}
	src := map[*Value]dotNode{}
	for _, v := range g.Inputs {
		n := dotNode{next, fmt.Sprintf("%s\n%s", v, v.Type), "ellipse"}
		next++
		src[v] = n
		dg.AddNode(n)
	}
	for _, n := range g.Nodes {
		var lines []string
		lines = append(lines, n.Op+attrText(n.Op, n.Attrs))
		for _, v := range n.Inputs {
			if v != nil && v.Kind == Weight {
				lines = append(lines, fmt.Sprintf("%s %s", v, v.Type))
			}
		}
		d := dotNode{next, strings.Join(lines, "\n"), "box"}
		next++
		vtx[n] = d
		dg.AddNode(d)
		for _, v := range n.Outputs {
			src[v] = d
		}
	}
	sink := dotNode{next, "outputs", "ellipse"}
	dg.AddNode(sink)
	labels := map[[2]int64][]string{}
	var order [][2]int64
	link := func(from, to dotNode, v *Value) {
		k := [2]int64{from.id, to.id}
		if _, ok := labels[k]; !ok {
			order = append(order, k)
		}
		labels[k] = append(labels[k], fmt.Sprintf("%s %s", v, v.Type))
	}
	for _, n := range g.Nodes {
		for _, v := range n.Inputs {
			if s, ok := src[v]; ok && s != vtx[n] {
				link(s, vtx[n], v)
			}
		}
	}
	for _, v := range g.Outputs {
		if s, ok := src[v]; ok {
			link(s, sink, v)
		}
	}
	for _, k := range order {
		dg.SetEdge(dotEdge{dg.Node(k[0]), dg.Node(k[1]), strings.Join(labels[k], "\n")})
	}
	b, err := dot.Marshal(dg, g.Name, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding DOT: %w", err)
	}
	b = append(b, '\n')
	_, err = w.Write(b)
	return err
}
