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

// DOTOptions choose what WriteDOTWith draws.
type DOTOptions struct {
	// Layers, when not nil, keeps the nodes of the layers it accepts; the
	// nodes before the first layer (embedding) are kept with the first
	// layer, those after the last (head) with the last.
	Layers func(layer int) bool
}

// dotNode is a DOT vertex: an op node, a graph input, a value from a node
// left out, or the output sink.
type dotNode struct {
	id    int64
	attrs []encoding.Attribute
}

func (n dotNode) ID() int64                        { return n.id }
func (n dotNode) DOTID() string                    { return fmt.Sprintf("n%d", n.id) }
func (n dotNode) Attributes() []encoding.Attribute { return n.attrs }

// dotRef names, at the top level, a vertex drawn inside a cluster.
type dotRef struct{ id int64 }

func (n dotRef) ID() int64     { return n.id }
func (n dotRef) DOTID() string { return fmt.Sprintf("n%d", n.id) }

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

// dotAttrs is a list of graph attributes.
type dotAttrs []encoding.Attribute

func (a dotAttrs) Attributes() []encoding.Attribute { return a }

// dotCluster is one layer's subgraph, drawn as a labelled box.
type dotCluster struct {
	*simple.DirectedGraph
	layer int
}

func (c dotCluster) DOTID() string { return fmt.Sprintf("cluster_%d", c.layer) }
func (c dotCluster) DOTAttributers() (g, n, e encoding.Attributer) {
	return dotAttrs{{Key: "label", Value: fmt.Sprintf("layer %d", c.layer)}}, nil, nil
}

// dotGraph is the whole drawing: its vertices and edges, and the clusters
// that hold each layer's vertices.
type dotGraph struct {
	*simple.DirectedGraph
	clusters []dot.Graph
}

func (g dotGraph) Structure() []dot.Graph { return g.clusters }

// WriteDOT writes g as a Graphviz digraph with every layer.
func WriteDOT(w io.Writer, g *Graph) error { return WriteDOTWith(w, g, DOTOptions{}) }

// WriteDOTWith writes g as a Graphviz digraph: one vertex per node (its
// weights listed in the label), each layer's nodes in a cluster of their
// own, edges labelled with the values they carry. A graph input read in
// several layers (pos) is drawn once in each, rather than with an edge
// across the whole drawing. With o.Layers, a value from a node left out is
// a dashed vertex.
func WriteDOTWith(w io.Writer, g *Graph, o DOTOptions) error {
	d := &dotBuilder{top: simple.NewDirectedGraph(), clusters: map[int]dotCluster{},
		src: map[*Value]int64{}, inputAt: map[dotInputKey]int64{}}
	keep := d.selectNodes(g, o.Layers)
	vertex := map[*Node]int64{}
	for _, n := range g.Nodes {
		if !keep[n] {
			continue
		}
		lines := []string{n.Op + attrText(n.Op, n.Attrs)}
		for _, v := range n.Inputs {
			if v != nil && v.Kind == Weight {
				lines = append(lines, fmt.Sprintf("%s %s", v, v.Type))
			}
		}
		id := d.add(d.layer[n], strings.Join(lines, "\n"), "box", false)
		vertex[n] = id
		for _, v := range n.Outputs {
			d.src[v] = id
		}
	}
	for _, n := range g.Nodes {
		if !keep[n] {
			continue
		}
		to := vertex[n]
		for _, v := range n.Inputs {
			if v == nil || v.Kind == Weight {
				continue
			}
			if from, ok := d.from(v, d.layer[n]); ok && from != to {
				d.link(from, to, v)
			}
		}
	}
	var outs []*Value
	for _, v := range g.Outputs {
		if v.Def == nil || keep[v.Def] {
			outs = append(outs, v)
		}
	}
	if len(outs) > 0 {
		sink := d.add(-1, "outputs", "ellipse", false)
		for _, v := range outs {
			if from, ok := d.from(v, -1); ok {
				d.link(from, sink, v)
			}
		}
	}
	for _, k := range d.order {
		d.top.SetEdge(dotEdge{d.top.Node(k[0]), d.top.Node(k[1]), strings.Join(d.labels[k], "\n")})
	}
	out := dotGraph{DirectedGraph: d.top}
	for _, l := range d.layers {
		out.clusters = append(out.clusters, d.clusters[l])
	}
	b, err := dot.Marshal(out, g.Name, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding DOT: %w", err)
	}
	b = append(b, '\n')
	_, err = w.Write(b)
	return err
}

type dotInputKey struct {
	v     *Value
	layer int
}

// dotBuilder collects the vertices and edges of a drawing.
type dotBuilder struct {
	top      *simple.DirectedGraph
	clusters map[int]dotCluster
	layers   []int         // clusters in order of appearance
	layer    map[*Node]int // -1 outside every layer
	next     int64
	src      map[*Value]int64      // the vertex a value comes from
	inputAt  map[dotInputKey]int64 // a graph input's vertex in one layer
	labels   map[[2]int64][]string // edge labels
	order    [][2]int64            // edges in order of appearance
	ghosts   map[*Value]int64      // values from nodes left out
}

// selectNodes finds each node's layer (from its first output's name; a node
// outside every layer belongs with the layer before or after it) and
// returns the nodes to draw.
func (d *dotBuilder) selectNodes(g *Graph, accept func(int) bool) map[*Node]bool {
	d.layer = map[*Node]int{}
	first, last, seen := 0, 0, false
	for _, n := range g.Nodes {
		l, ok := -1, false
		if len(n.Outputs) > 0 {
			l, ok = LayerOf(n.Outputs[0].Name)
		}
		if !ok {
			l = -1
		} else if !seen {
			first, last, seen = l, l, true
		} else {
			first, last = min(first, l), max(last, l)
		}
		d.layer[n] = l
	}
	keep := map[*Node]bool{}
	before := true
	for _, n := range g.Nodes {
		l := d.layer[n]
		if l >= 0 {
			before = false
		}
		switch {
		case accept == nil:
			keep[n] = true
		case l >= 0:
			keep[n] = accept(l)
		case before || !seen:
			keep[n] = !seen || accept(first)
		default:
			keep[n] = accept(last)
		}
	}
	return keep
}

// add creates a vertex in layer l's cluster (l >= 0) or at the top level.
func (d *dotBuilder) add(l int, label, shape string, dashed bool) int64 {
	id := d.next
	d.next++
	attrs := []encoding.Attribute{{Key: "label", Value: label}, {Key: "shape", Value: shape}}
	if dashed {
		attrs = append(attrs, encoding.Attribute{Key: "style", Value: "dashed"})
	}
	n := dotNode{id, attrs}
	if l < 0 {
		d.top.AddNode(n)
		return id
	}
	c, ok := d.clusters[l]
	if !ok {
		c = dotCluster{simple.NewDirectedGraph(), l}
		d.clusters[l] = c
		d.layers = append(d.layers, l)
	}
	c.AddNode(n)
	d.top.AddNode(dotRef{id})
	return id
}

// from returns the vertex v comes from, for a reader in layer l: a node's
// vertex, the input's vertex in that layer, or a dashed vertex for a value
// whose node is left out.
func (d *dotBuilder) from(v *Value, l int) (int64, bool) {
	if id, ok := d.src[v]; ok {
		return id, true
	}
	label := fmt.Sprintf("%s\n%s", v, v.Type)
	if v.Kind == Input {
		k := dotInputKey{v, l}
		if id, ok := d.inputAt[k]; ok {
			return id, true
		}
		id := d.add(l, label, "ellipse", false)
		d.inputAt[k] = id
		return id, true
	}
	if v.Kind != Activation {
		return 0, false
	}
	if d.ghosts == nil {
		d.ghosts = map[*Value]int64{}
	}
	if id, ok := d.ghosts[v]; ok {
		return id, true
	}
	id := d.add(-1, label, "ellipse", true)
	d.ghosts[v] = id
	return id, true
}

// link records that v flows from one vertex to another; values sharing a
// pair of vertices share an edge.
func (d *dotBuilder) link(from, to int64, v *Value) {
	if d.labels == nil {
		d.labels = map[[2]int64][]string{}
	}
	k := [2]int64{from, to}
	if _, ok := d.labels[k]; !ok {
		d.order = append(d.order, k)
	}
	d.labels[k] = append(d.labels[k], fmt.Sprintf("%s %s", v, v.Type))
}
