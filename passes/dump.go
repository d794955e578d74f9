package passes

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"lagc/ir"
)

// A dump is the graph after a pass, headed by what the pass changed: node
// and weight counts, the ops whose counts changed, the pass's notes, the
// memory plans it made (every value's arena offset and size). A graph
// identical to the previous dump's is not repeated; the header says so.
// Text dumps carry the header as '#' comments (the file still parses with
// ir.Parse), DOT dumps as '//' comments; a JSON dump is one object with the
// header's fields and the graph under "graph".

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

// dumper writes the dumps of one pipeline run.
type dumper struct {
	all              bool
	names            []string
	dir, format, ext string
	prevBody         []byte // the graph of the previous dump, as written
	prevFile         string
}

func newDumper(opt Options, pipeline []*Pass) (*dumper, error) {
	ext, err := DumpExt(opt.DumpFormat)
	if err != nil {
		return nil, err
	}
	d := &dumper{dir: opt.DumpDir, format: opt.DumpFormat, ext: ext}
	if d.dir == "" {
		d.dir = "."
	}
	for _, name := range opt.DumpAfter {
		if name == "all" {
			d.all = true
			continue
		}
		if !slices.ContainsFunc(pipeline, func(p *Pass) bool { return p.Name == name }) {
			return nil, fmt.Errorf("--dump-after %q: not a pass of this pipeline", name)
		}
		d.names = append(d.names, name)
	}
	return d, nil
}

func (d *dumper) wants(p *Pass) bool { return d.all || slices.Contains(d.names, p.Name) }

// change is what one pass did, recorded around its run for its dump.
type change struct {
	index, total   int // 0-based position in the pipeline, pipeline length
	pass           *Pass
	nodes, weights [2]int            // before, after
	ops            [2]map[string]int // op counts before, after
	notes          int               // len(State.Notes) before the pass
	memory         []*MemoryPlan     // State.Memory before the pass
	passNotes      []string          // the notes the pass wrote
	plans          []*MemoryPlan     // the memory plans the pass made
	file, sameAs   string            // this dump's name; the previous dump's if the graph is the same
	body           []byte            // the graph, unless the same as the previous dump's
}

func (d *dumper) before(st *State, i, total int, p *Pass) *change {
	g := st.Graph
	return &change{index: i, total: total, pass: p,
		nodes: [2]int{len(g.Nodes)}, weights: [2]int{len(g.Weights)},
		ops: [2]map[string]int{g.OpCounts()}, notes: len(st.Notes), memory: st.Memory}
}

// write completes ch with the state after the pass and writes the dump.
func (d *dumper) write(st *State, ch *change) (string, error) {
	g := st.Graph
	ch.nodes[1], ch.weights[1], ch.ops[1] = len(g.Nodes), len(g.Weights), g.OpCounts()
	ch.passNotes = st.Notes[ch.notes:]
	if !samePlans(ch.memory, st.Memory) {
		ch.plans = st.Memory
	}
	var body bytes.Buffer
	var err error
	switch d.format {
	case "dot":
		err = ir.WriteDOT(&body, g)
	case "json":
		err = ir.WriteJSON(&body, g)
	default:
		err = ir.Print(&body, g)
	}
	if err != nil {
		return "", err
	}
	ch.file = fmt.Sprintf("%02d-%s%s", ch.index+1, ch.pass.Name, d.ext)
	if d.prevBody != nil && bytes.Equal(body.Bytes(), d.prevBody) {
		ch.sameAs = d.prevFile
	} else {
		ch.body = body.Bytes()
	}
	d.prevBody, d.prevFile = body.Bytes(), ch.file
	var out bytes.Buffer
	if d.format == "json" {
		err = ch.writeJSON(&out)
	} else {
		prefix := "# "
		if d.format == "dot" {
			prefix = "// "
		}
		for _, l := range ch.header() {
			out.WriteString(strings.TrimRight(prefix+l, " ") + "\n")
		}
		out.Write(ch.body)
	}
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(d.dir, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(d.dir, ch.file)
	return path, os.WriteFile(path, out.Bytes(), 0o644)
}

// samePlans reports whether the pass left State.Memory as it was.
func samePlans(a, b []*MemoryPlan) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// opDiffs lists the ops whose node count changed, sorted.
func (ch *change) opDiffs() []string {
	var ops []string
	for op, n := range ch.ops[0] {
		if ch.ops[1][op] != n {
			ops = append(ops, op)
		}
	}
	for op := range ch.ops[1] {
		if _, ok := ch.ops[0][op]; !ok {
			ops = append(ops, op)
		}
	}
	sort.Strings(ops)
	return ops
}

// header is the dump's header, one line per entry, without comment marks.
func (ch *change) header() []string {
	lines := []string{
		fmt.Sprintf("after pass %d of %d, %s: %s", ch.index+1, ch.total, ch.pass.Name, ch.pass.Doc),
		fmt.Sprintf("nodes %d -> %d, weights %d -> %d", ch.nodes[0], ch.nodes[1], ch.weights[0], ch.weights[1]),
	}
	if ops := ch.opDiffs(); len(ops) == 0 {
		lines = append(lines, "node counts by op: unchanged")
	} else {
		lines = append(lines, "node counts by op (before -> after):")
		w := 0
		for _, op := range ops {
			w = max(w, len(op))
		}
		for _, op := range ops {
			lines = append(lines, fmt.Sprintf("  %-*s %6d -> %d", w, op, ch.ops[0][op], ch.ops[1][op]))
		}
	}
	if len(ch.passNotes) > 0 {
		lines = append(lines, "notes:")
		for _, n := range ch.passNotes {
			lines = append(lines, "  "+n)
		}
	}
	for _, p := range ch.plans {
		lines = append(lines, p.describe()...)
	}
	if ch.sameAs != "" {
		lines = append(lines, fmt.Sprintf("graph identical to %s's: not repeated", ch.sameAs))
	}
	return lines
}

// describe lists a memory plan: a summary line, then every value's buffer.
func (p *MemoryPlan) describe() []string {
	lines := []string{
		fmt.Sprintf("memory plan T=%d, float activations as %s: arena %d bytes (peak live %d, no reuse %d)", p.Tokens, p.DType, p.Arena, p.PeakLive, p.NoReuse),
		"  bytes in the arena; live from the first to the last node needing it, by index in topological order (-1: a step input)",
		fmt.Sprintf("  %12s %12s %13s  %s", "offset", "size", "live", "value"),
	}
	for _, b := range p.Buffers {
		view := ""
		switch {
		case b.InPlace:
			view = " (in place of %" + b.Owner + ")"
		case b.View:
			view = " (view of %" + b.Owner + ")"
		}
		lines = append(lines, fmt.Sprintf("  %12d %12d %6d..%-6d %%%s%s", b.Offset, b.Size, b.First, b.Last, b.Value, view))
	}
	return lines
}

type jsonDump struct {
	Pass    string            `json:"pass"`
	Index   int               `json:"index"`
	Of      int               `json:"of"`
	Doc     string            `json:"doc"`
	Nodes   [2]int            `json:"nodes"`
	Weights [2]int            `json:"weights"`
	Ops     map[string][2]int `json:"ops_changed"`
	Notes   []string          `json:"notes"`
	Memory  []jsonMemoryPlan  `json:"memory,omitempty"`
	SameAs  string            `json:"same_as,omitempty"`
	Graph   json.RawMessage   `json:"graph,omitempty"`
}

type jsonMemoryPlan struct {
	Tokens   int          `json:"tokens"`
	DType    string       `json:"dtype"`
	Arena    int64        `json:"arena"`
	PeakLive int64        `json:"peak_live"`
	NoReuse  int64        `json:"no_reuse"`
	Buffers  []jsonBuffer `json:"buffers"`
}

type jsonBuffer struct {
	Value   string `json:"value"`
	Offset  int64  `json:"offset"`
	Size    int64  `json:"size"`
	First   int    `json:"first"`
	Last    int    `json:"last"`
	View    bool   `json:"view,omitempty"`
	InPlace bool   `json:"in_place,omitempty"`
	Owner   string `json:"owner,omitempty"`
}

func (ch *change) writeJSON(w *bytes.Buffer) error {
	j := jsonDump{Pass: ch.pass.Name, Index: ch.index + 1, Of: ch.total, Doc: ch.pass.Doc,
		Nodes: ch.nodes, Weights: ch.weights, Ops: map[string][2]int{}, Notes: ch.passNotes,
		SameAs: ch.sameAs, Graph: ch.body}
	for _, op := range ch.opDiffs() {
		j.Ops[op] = [2]int{ch.ops[0][op], ch.ops[1][op]}
	}
	for _, p := range ch.plans {
		jp := jsonMemoryPlan{p.Tokens, p.DType.String(), p.Arena, p.PeakLive, p.NoReuse, make([]jsonBuffer, len(p.Buffers))}
		for i, b := range p.Buffers {
			jp.Buffers[i] = jsonBuffer(b)
		}
		j.Memory = append(j.Memory, jp)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", " ")
	return enc.Encode(j)
}
