// Package passes is lagc's pass manager, in the spirit of Go's SSA compiler:
// one table of named passes with their docs, ordering constraints and
// default selection (table.go), checked; the IR verifier after every pass;
// selection by name; timing per pass; and dumps (text, DOT, JSON) after any
// or every pass, each saying what the pass changed (dump.go). The fusions
// are rewrite patterns applied by ir.Graph.Rewrite.
package passes

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"gonum.org/v1/gonum/graph/simple"
	"gonum.org/v1/gonum/graph/topo"

	"lagc/ir"
)

// Pass is one named graph transformation or analysis: an entry of the
// pass table.
type Pass struct {
	Name string
	Doc  string // one line, shown by `lagc compile --help`
	Run  func(*State) error
	// After names the passes that must run before this one whenever both
	// run.
	After []string
	// Default puts the pass in the pipeline used when none is given.
	Default bool
	// Fusion marks the rewrites that fuse ops (kernel counts compare the
	// pipeline with and without them).
	Fusion bool
}

// State is what passes share: the graph they rewrite and the results of
// analyses, for later passes, lowering and the summary.
type State struct {
	Graph   *ir.Graph
	Options Options
	// Memory holds the plans made by memplan, one per (tokens, dtype).
	Memory []*MemoryPlan
	// Notes are one-line reports by passes ("cse: 3 nodes merged").
	Notes []string
}

// Notef records a one-line report of the running pass.
func (s *State) Notef(format string, args ...any) {
	s.Notes = append(s.Notes, fmt.Sprintf(format, args...))
}

// Lookup returns the pass of that name.
func Lookup(name string) (*Pass, bool) {
	for _, p := range table {
		if p.Name == name {
			return p, true
		}
	}
	return nil, false
}

// Names lists the passes, sorted.
func Names() []string {
	out := tableNames(func(*Pass) bool { return true })
	sort.Strings(out)
	return out
}

// CheckConstraints verifies the pass table: names unique, every pass an
// ordering constraint names exists, the constraints admit an order (no
// cycle, checked with gonum's topological sort), and the default pipeline
// obeys them.
func CheckConstraints() error {
	dg := simple.NewDirectedGraph()
	ids := map[string]int64{}
	for i, p := range table {
		if _, dup := ids[p.Name]; dup {
			return fmt.Errorf("pass %q is in the table twice", p.Name)
		}
		ids[p.Name] = int64(i)
		dg.AddNode(simple.Node(i))
	}
	for _, p := range table {
		for _, b := range p.After {
			if _, ok := ids[b]; !ok {
				return fmt.Errorf("ordering constraint %s < %s names unknown pass %q", b, p.Name, b)
			}
			if b == p.Name {
				return fmt.Errorf("ordering constraint %s < %s is a cycle", b, p.Name)
			}
			dg.SetEdge(dg.NewEdge(simple.Node(ids[b]), simple.Node(ids[p.Name])))
		}
	}
	if _, err := topo.Sort(dg); err != nil {
		return fmt.Errorf("ordering constraints contain a cycle: %v", err)
	}
	if _, err := resolve(tableNames(func(p *Pass) bool { return p.Default }), nil); err != nil {
		return fmt.Errorf("default pipeline: %w", err)
	}
	return nil
}

// resolve turns pass names into passes: drops disabled ones, rejects
// unknown and repeated names and ordering violations.
func resolve(names, disable []string) ([]*Pass, error) {
	for _, d := range disable {
		if _, ok := Lookup(d); !ok {
			return nil, fmt.Errorf("--disable-pass %q: unknown pass (known: %s)", d, strings.Join(Names(), ", "))
		}
	}
	var out []*Pass
	pos := map[string]int{}
	for _, n := range names {
		p, ok := Lookup(n)
		if !ok {
			return nil, fmt.Errorf("unknown pass %q (known: %s)", n, strings.Join(Names(), ", "))
		}
		if _, dup := pos[n]; dup {
			return nil, fmt.Errorf("pass %q listed twice", n)
		}
		if slices.Contains(disable, n) {
			continue
		}
		pos[n] = len(out)
		out = append(out, p)
	}
	for _, p := range out {
		for _, b := range p.After {
			if i, ok := pos[b]; ok && i > pos[p.Name] {
				return nil, fmt.Errorf("pass %s must run before %s", b, p.Name)
			}
		}
	}
	return out, nil
}

// Options select and observe passes.
type Options struct {
	Passes     []string // nil: DefaultPipeline
	Disable    []string
	DumpAfter  []string // pass names, or "all"
	DumpDir    string   // default "."
	DumpFormat string   // text (default), dot or json
	// Tokens are the step sizes memplan plans for (default 1 and 2048).
	Tokens []int
}

// Timing is one pass's run.
type Timing struct {
	Name        string
	Elapsed     time.Duration
	NodesBefore int
	NodesAfter  int
}

// Result reports a pipeline run.
type Result struct {
	State   *State
	Timings []Timing
	Dumps   []string // files written, in order
}

// Run runs the selected passes over g in place, verifying after each.
func Run(g *ir.Graph, opt Options) (*Result, error) {
	if err := CheckConstraints(); err != nil {
		return nil, err
	}
	names := opt.Passes
	if names == nil {
		names = DefaultPipeline
	}
	pipeline, err := resolve(names, opt.Disable)
	if err != nil {
		return nil, err
	}
	d, err := newDumper(opt, pipeline)
	if err != nil {
		return nil, err
	}
	if err := ir.Verify(g); err != nil {
		return nil, fmt.Errorf("input graph: %w", err)
	}
	st := &State{Graph: g, Options: opt}
	res := &Result{State: st}
	for i, p := range pipeline {
		var ch *change
		if d.wants(p) {
			ch = d.before(st, i, len(pipeline), p)
		}
		before := len(g.Nodes)
		start := time.Now()
		if err := p.Run(st); err != nil {
			return res, fmt.Errorf("pass %s: %w", p.Name, err)
		}
		elapsed := time.Since(start)
		if err := ir.Verify(g); err != nil {
			return res, fmt.Errorf("after pass %s: %w", p.Name, err)
		}
		res.Timings = append(res.Timings, Timing{p.Name, elapsed, before, len(g.Nodes)})
		if ch != nil {
			path, err := d.write(st, ch)
			if err != nil {
				return res, fmt.Errorf("dump after %s: %w", p.Name, err)
			}
			res.Dumps = append(res.Dumps, path)
		}
	}
	return res, nil
}
