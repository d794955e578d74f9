package ir

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"gonum.org/v1/gonum/graph"
	"gonum.org/v1/gonum/graph/iterator"
	"gonum.org/v1/gonum/graph/simple"
	"gonum.org/v1/gonum/graph/topo"
	"gonum.org/v1/gonum/graph/traverse"
)

// dataflow presents g's nodes to gonum as a directed graph, without
// copying them: an edge p -> c when c reads an output of p (reversed: c ->
// p). Node IDs are Node.ID. Successors come from the use-def information;
// values of nodes outside g, and self-loops, make no edge (Verify reports
// them).
type dataflow struct {
	g        *Graph
	byID     map[int64]*Node
	reversed bool
}

func (g *Graph) dataflow(reversed bool) *dataflow {
	g.Compact()
	g.buildUseDef()
	byID := make(map[int64]*Node, len(g.Nodes))
	for _, n := range g.Nodes {
		byID[int64(n.ID)] = n
	}
	return &dataflow{g: g, byID: byID, reversed: reversed}
}

func (d *dataflow) in(n *Node) bool { return n != nil && d.byID[int64(n.ID)] == n }

// next lists the nodes an edge leads to from n, each once, by ID.
func (d *dataflow) next(n *Node, reversed bool) []graph.Node {
	var ms []*Node
	if reversed {
		for _, v := range n.Inputs {
			if v != nil {
				ms = append(ms, v.Def)
			}
		}
	} else {
		for _, v := range n.Outputs {
			ms = append(ms, v.users...)
		}
	}
	out := make([]graph.Node, 0, len(ms))
	for _, m := range ms {
		if m != n && d.in(m) {
			out = append(out, simple.Node(m.ID))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID() < out[j].ID() })
	return slices.CompactFunc(out, func(a, b graph.Node) bool { return a.ID() == b.ID() })
}

func (d *dataflow) Node(id int64) graph.Node {
	if _, ok := d.byID[id]; ok {
		return simple.Node(id)
	}
	return nil
}

func (d *dataflow) Nodes() graph.Nodes {
	ns := make([]graph.Node, len(d.g.Nodes))
	for i, n := range d.g.Nodes {
		ns[i] = simple.Node(n.ID)
	}
	return iterator.NewOrderedNodes(ns)
}

func (d *dataflow) From(id int64) graph.Nodes {
	if n, ok := d.byID[id]; ok {
		return iterator.NewOrderedNodes(d.next(n, d.reversed))
	}
	return graph.Empty
}

func (d *dataflow) To(id int64) graph.Nodes {
	if n, ok := d.byID[id]; ok {
		return iterator.NewOrderedNodes(d.next(n, !d.reversed))
	}
	return graph.Empty
}

func (d *dataflow) HasEdgeFromTo(uid, vid int64) bool {
	u, v := d.byID[uid], d.byID[vid]
	if u == nil || v == nil || u == v {
		return false
	}
	if d.reversed {
		u, v = v, u
	}
	for _, x := range v.Inputs {
		if x != nil && x.Def == u {
			return true
		}
	}
	return false
}

func (d *dataflow) HasEdgeBetween(xid, yid int64) bool {
	return d.HasEdgeFromTo(xid, yid) || d.HasEdgeFromTo(yid, xid)
}

func (d *dataflow) Edge(uid, vid int64) graph.Edge {
	if !d.HasEdgeFromTo(uid, vid) {
		return nil
	}
	return simple.Edge{F: simple.Node(uid), T: simple.Node(vid)}
}

// Order returns the nodes in a topological order, ties broken by node ID so
// the order is deterministic. A cycle is an error naming its nodes. The
// order is kept until a method of g changes its nodes or edges (direct
// edits must call Reindex); the slice returned is the caller's.
func (g *Graph) Order() ([]*Node, error) {
	g.Compact()
	if g.order == nil {
		order, err := g.sort()
		if err != nil {
			return nil, err
		}
		g.order = order
	}
	return append([]*Node(nil), g.order...), nil
}

// sort computes the topological order with gonum's stabilized sort.
func (g *Graph) sort() ([]*Node, error) {
	for _, n := range g.Nodes {
		for _, v := range n.Inputs {
			if v.Def == n {
				return nil, fmt.Errorf("cycle: %s reads its own output %s", n, v)
			}
		}
	}
	dg := g.dataflow(false)
	byID := dg.byID
	sorted, err := topo.SortStabilized(dg, func(ns []graph.Node) {
		sort.Slice(ns, func(i, j int) bool { return ns[i].ID() < ns[j].ID() })
	})
	if err != nil {
		var u topo.Unorderable
		if errors.As(err, &u) && len(u) > 0 {
			cyc := u[0]
			names := make([]string, len(cyc))
			ns := make([]*Node, len(cyc))
			for i, x := range cyc {
				ns[i] = byID[x.ID()]
			}
			ns = sortedNodes(ns)
			for i, n := range ns {
				names[i] = n.String()
			}
			return nil, fmt.Errorf("cycle through %s", strings.Join(names, ", "))
		}
		return nil, fmt.Errorf("ordering nodes: %w", err)
	}
	out := make([]*Node, len(sorted))
	for i, x := range sorted {
		out[i] = byID[x.ID()]
	}
	return out, nil
}

// checkOrder reports whether order lists every node of g once, each after
// the producers of its inputs: proof that g has no cycle. Verify uses it so
// that a kept order cannot hide a cycle made by a direct edit.
func (g *Graph) checkOrder(order []*Node) bool {
	if len(order) != len(g.Nodes) {
		return false
	}
	pos := make(map[*Node]int, len(order))
	for i, n := range order {
		pos[n] = i
	}
	for _, n := range g.Nodes {
		i, ok := pos[n]
		if !ok {
			return false
		}
		for _, v := range n.Inputs {
			if v == nil || v.Def == nil {
				continue
			}
			if j, ok := pos[v.Def]; ok && j >= i {
				return false
			}
		}
	}
	return true
}

// Live returns the nodes whose results reach a graph output, plus every
// side-effecting node and what it depends on.
func (g *Graph) Live() map[*Node]bool {
	rev := g.dataflow(true)
	live := map[*Node]bool{}
	var roots []*Node
	for _, v := range g.Outputs {
		if v != nil && rev.in(v.Def) {
			roots = append(roots, v.Def)
		}
	}
	for _, n := range g.Nodes {
		if d, ok := n.Def(); ok && d.SideEffect {
			roots = append(roots, n)
		}
	}
	var bf traverse.BreadthFirst
	for _, r := range roots {
		if live[r] {
			continue
		}
		bf.Walk(rev, simple.Node(r.ID), func(x graph.Node, _ int) bool {
			live[rev.byID[x.ID()]] = true
			return false
		})
	}
	return live
}
