// Package passes is lagc's pass manager, in the spirit of Go's SSA compiler:
// a registry of named passes, ordering constraints stated in one table and
// checked, the IR verifier after every pass, selection by name, timing per
// pass, and dumps (text, DOT, JSON) after any or every pass.
package passes

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"gonum.org/v1/gonum/graph/simple"
	"gonum.org/v1/gonum/graph/topo"

	"lagc/ir"
)

// Pass is one named graph transformation or analysis.
type Pass struct {
	Name string
	Doc  string // one line, shown by `lagc compile --help`
	Run  func(*State) error
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

var registry = map[string]*Pass{}

// Register adds a pass; it panics on a duplicate name (a programming error,
// caught by any test).
func Register(p *Pass) {
	if _, dup := registry[p.Name]; dup {
		panic("passes: registered twice: " + p.Name)
	}
	registry[p.Name] = p
}

// Lookup returns the registered pass of that name.
func Lookup(name string) (*Pass, bool) {
	p, ok := registry[name]
	return p, ok
}

// Names lists the registered passes, sorted.
func Names() []string {
	out := make([]string, 0, len(registry))
	for n := range registry {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// DefaultPipeline is the pass order used when none is given.
var DefaultPipeline = []string{"shapes", "qkvg-concat", "gate-up-fuse", "shared-expert-merge", "residual-fold", "expert-order",
	"cse", "dce", "memplan"}

// Constraint says that pass Before must run before pass After whenever both
// run.
type Constraint struct{ Before, After string }

// Constraints is the one place pass ordering is declared. Fusion passes add
// their rows here.
var Constraints = []Constraint{
	{"shapes", "cse"}, // CSE compares types
	{"shapes", "dce"}, // keeps DCE's view of types current
	{"cse", "dce"},    // CSE leaves duplicates dead
	{"shapes", "memplan"},
	{"dce", "memplan"}, // plan only what runs
	{"cse", "memplan"},
	// Fusions (fuse_*.go, expert_order.go) rewrite the graph that CSE, DCE
	// and the memory plan then see.
	{"qkvg-concat", "cse"}, {"qkvg-concat", "dce"}, {"qkvg-concat", "memplan"},
	{"gate-up-fuse", "cse"}, {"gate-up-fuse", "dce"}, {"gate-up-fuse", "memplan"},
	{"shared-expert-merge", "cse"}, {"shared-expert-merge", "dce"}, {"shared-expert-merge", "memplan"},
	{"residual-fold", "cse"}, {"residual-fold", "dce"}, {"residual-fold", "memplan"},
	{"expert-order", "memplan"},
	{"gate-up-fuse", "residual-fold"},        // as the seed engine ordered them
	{"shared-expert-merge", "residual-fold"}, // folding the shared down_proj would hide the shared expert
	{"gate-up-fuse", "expert-order"},         // the band width depends on the final stacks
	{"shared-expert-merge", "expert-order"},
	{"residual-fold", "expert-order"},
}

// CheckConstraints verifies the ordering table: every pass named exists,
// the constraints admit an order (no cycle), and DefaultPipeline obeys them.
func CheckConstraints() error {
	dg := simple.NewDirectedGraph()
	ids := map[string]int64{}
	names := Names()
	for i, n := range names {
		ids[n] = int64(i)
		dg.AddNode(simple.Node(i))
	}
	for _, c := range Constraints {
		for _, n := range []string{c.Before, c.After} {
			if _, ok := registry[n]; !ok {
				return fmt.Errorf("ordering constraint %s < %s names unknown pass %q", c.Before, c.After, n)
			}
		}
		if c.Before == c.After {
			return fmt.Errorf("ordering constraint %s < %s is a cycle", c.Before, c.After)
		}
		dg.SetEdge(dg.NewEdge(simple.Node(ids[c.Before]), simple.Node(ids[c.After])))
	}
	if _, err := topo.Sort(dg); err != nil {
		return fmt.Errorf("ordering constraints contain a cycle: %v", err)
	}
	if _, err := resolve(DefaultPipeline, nil); err != nil {
		return fmt.Errorf("default pipeline: %w", err)
	}
	return nil
}

// resolve turns pass names into passes: drops disabled ones, rejects
// unknown and repeated names and ordering violations.
func resolve(names, disable []string) ([]*Pass, error) {
	for _, d := range disable {
		if _, ok := registry[d]; !ok {
			return nil, fmt.Errorf("--disable-pass %q: unknown pass (known: %s)", d, strings.Join(Names(), ", "))
		}
	}
	var out []*Pass
	pos := map[string]int{}
	for _, n := range names {
		p, ok := registry[n]
		if !ok {
			return nil, fmt.Errorf("unknown pass %q (known: %s)", n, strings.Join(Names(), ", "))
		}
		if _, dup := pos[n]; dup {
			return nil, fmt.Errorf("pass %q listed twice", n)
		}
		if contains(disable, n) {
			continue
		}
		pos[n] = len(out)
		out = append(out, p)
	}
	for _, c := range Constraints {
		b, okb := pos[c.Before]
		a, oka := pos[c.After]
		if okb && oka && b > a {
			return nil, fmt.Errorf("pass %s must run before %s", c.Before, c.After)
		}
	}
	return out, nil
}

func contains(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
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

// DumpExt returns the file extension of a dump format.
func DumpExt(format string) (string, error) {
	switch format {
	case "", "text":
		return ".txt", nil
	case "dot":
		return ".dot", nil
	case "json":
		return ".json", nil
	}
	return "", fmt.Errorf("dump format %q: expected text, dot or json", format)
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
	ext, err := DumpExt(opt.DumpFormat)
	if err != nil {
		return nil, err
	}
	dumpAll := contains(opt.DumpAfter, "all")
	for _, d := range opt.DumpAfter {
		if d == "all" {
			continue
		}
		found := false
		for _, p := range pipeline {
			found = found || p.Name == d
		}
		if !found {
			return nil, fmt.Errorf("--dump-after %q: not a pass of this pipeline", d)
		}
	}
	if err := ir.Verify(g); err != nil {
		return nil, fmt.Errorf("input graph: %w", err)
	}
	st := &State{Graph: g, Options: opt}
	res := &Result{State: st}
	for i, p := range pipeline {
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
		if dumpAll || contains(opt.DumpAfter, p.Name) {
			path, err := dump(g, opt.DumpDir, fmt.Sprintf("%02d-%s%s", i+1, p.Name, ext), opt.DumpFormat)
			if err != nil {
				return res, fmt.Errorf("dump after %s: %w", p.Name, err)
			}
			res.Dumps = append(res.Dumps, path)
		}
	}
	return res, nil
}

func dump(g *ir.Graph, dir, name, format string) (string, error) {
	if dir == "" {
		dir = "."
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(dir, name)
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	switch format {
	case "dot":
		err = ir.WriteDOT(f, g)
	case "json":
		err = ir.WriteJSON(f, g)
	default:
		err = ir.Print(f, g)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return path, err
}
