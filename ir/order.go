package ir

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"gonum.org/v1/gonum/graph"
	"gonum.org/v1/gonum/graph/simple"
	"gonum.org/v1/gonum/graph/topo"
	"gonum.org/v1/gonum/graph/traverse"
)

// dataflow builds the gonum graph of g's nodes: an edge p -> c when c reads
// an output of p. Node IDs are Node.ID.
func (g *Graph) dataflow() (*simple.DirectedGraph, map[int64]*Node) {
	g.Compact()
	dg := simple.NewDirectedGraph()
	byID := make(map[int64]*Node, len(g.Nodes))
	for _, n := range g.Nodes {
		byID[int64(n.ID)] = n
		dg.AddNode(simple.Node(n.ID))
	}
	for _, n := range g.Nodes {
		for _, v := range n.Inputs {
			p := v.Def
			if p == nil || byID[int64(p.ID)] != p || p == n {
				continue // inputs, weights, dangling values and self-loops are reported by Verify
			}
			if !dg.HasEdgeFromTo(int64(p.ID), int64(n.ID)) {
				dg.SetEdge(dg.NewEdge(simple.Node(p.ID), simple.Node(n.ID)))
			}
		}
	}
	return dg, byID
}

// Order returns the nodes in a topological order, ties broken by node ID so
// the order is deterministic. A cycle is an error naming its nodes.
func (g *Graph) Order() ([]*Node, error) {
	g.Compact()
	for _, n := range g.Nodes {
		for _, v := range n.Inputs {
			if v.Def == n {
				return nil, fmt.Errorf("cycle: %s reads its own output %s", n, v)
			}
		}
	}
	dg, byID := g.dataflow()
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

// Live returns the nodes whose results reach a graph output, plus every
// side-effecting node and what it depends on.
func (g *Graph) Live() map[*Node]bool {
	dg, byID := g.dataflow()
	rev := simple.NewDirectedGraph()
	for _, n := range g.Nodes {
		rev.AddNode(simple.Node(n.ID))
	}
	edges := dg.Edges()
	for edges.Next() {
		e := edges.Edge()
		rev.SetEdge(rev.NewEdge(e.To(), e.From()))
	}
	live := map[*Node]bool{}
	var roots []*Node
	for _, v := range g.Outputs {
		if v.Def != nil && byID[int64(v.Def.ID)] == v.Def {
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
			live[byID[x.ID()]] = true
			return false
		})
	}
	return live
}
