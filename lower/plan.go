// Package lower turns an optimised ir.Graph into a kernel schedule: for each
// of two shape classes, decode (T=1) and prefill (T=chunk), one entry per
// node with the kernels it launches (template, dtype signature, launch
// geometry), the arena offsets of its operands from the memory plan
// (passes.PlanMemory), and the weights to upload, with the load-time
// transforms (concat, reshape) that fusion passes ask for.
//
// A Plan is plain data: it serialises to JSON and prints as text, and the
// CUDA executor (exec/gpu) runs it without looking at the graph again.
package lower

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// Shape classes.
const (
	Decode  = "decode"
	Prefill = "prefill"
)

// T marks the token axis in a Shape: the dimension that is the step's
// number of tokens (a prefill schedule runs any T up to its Tokens).
const T = -1

// Plan is a compiled model: weights, KV caches and the two schedules.
type Plan struct {
	Model      string `json:"model"`
	DType      string `json:"dtype"` // storage of activations and matmul weights: f32 or bf16
	MaxContext int    `json:"max_context"`
	// Weights are placed in one device allocation of WeightBytes.
	Weights     []Weight `json:"weights"`
	WeightBytes int64    `json:"weight_bytes"`
	// KV caches, one per attention node, in one allocation of KVBytes.
	KV      []KV      `json:"kv"`
	KVBytes int64     `json:"kv_bytes"`
	Decode  *Schedule `json:"decode"`
	Prefill *Schedule `json:"prefill"`
}

// Weight is one tensor on the device.
type Weight struct {
	Name  string `json:"name"`
	Shape []int  `json:"shape"`
	DType string `json:"dtype"` // stored on the device
	// Source is the dtype the graph binds (the checkpoint's); the executor
	// converts on the host when it differs from DType.
	Source string `json:"source_dtype"`
	// Offset in the weight allocation; -1 when no kernel reads the tensor
	// (it only feeds a derived weight) and it is not uploaded.
	Offset int64   `json:"offset"`
	Bytes  int64   `json:"bytes"`
	From   *Derive `json:"from,omitempty"`
	// Layout, when not "", is a device layout other than row-major:
	// LayoutGateUpSplit stores a fused [E,2I,H] expert stack (gate rows,
	// then up rows, per expert) as all gate rows [E,I,H], then all up rows.
	Layout string `json:"layout,omitempty"`
}

// LayoutGateUpSplit: see Weight.Layout.
const LayoutGateUpSplit = "gate_up_split"

// Derive is a load-time transform: Op (concat or reshape) of the weights
// at indices Srcs of Plan.Weights; Axis for concat.
type Derive struct {
	Op   string `json:"op"`
	Axis int    `json:"axis,omitempty"`
	Srcs []int  `json:"srcs"`
}

// KV is one layer's cache: K then V, each [Slots, NKV, HeadDim], at Offset
// in the KV allocation. Slots is the context for a full layer and Window
// for a sliding one (a ring: position p in slot p % Window).
type KV struct {
	Layer   int    `json:"layer"`
	NKV     int    `json:"nkv"`
	HeadDim int    `json:"head_dim"`
	Window  int    `json:"window"`
	Slots   int    `json:"slots"`
	DType   string `json:"dtype"`
	Offset  int64  `json:"offset"`
	Bytes   int64  `json:"bytes"` // K and V together
}

// Half returns the bytes of K (V follows at Offset+Half()).
func (k KV) Half() int64 { return k.Bytes / 2 }

// Schedule is the kernel sequence of one shape class.
type Schedule struct {
	Class  string `json:"class"`  // decode or prefill
	Tokens int    `json:"tokens"` // T the arena is planned for (prefill runs 1..Tokens)
	// Arena holds every activation at its offset; Workspace bytes of
	// scratch (split-KV attention partials) follow it.
	Arena     int64    `json:"arena_bytes"`
	Workspace int64    `json:"workspace_bytes"`
	Values    []Buffer `json:"values"`
	Steps     []Step   `json:"steps"`
}

// Buffer is one activation or input's place in the arena.
type Buffer struct {
	Name   string `json:"name"`
	Offset int64  `json:"offset"`
	Bytes  int64  `json:"bytes"` // at Tokens
	DType  string `json:"dtype"`
	Shape  []int  `json:"shape"` // T (-1) for the token axis
}

// Step is one graph node and the kernels that compute it.
type Step struct {
	Node  int            `json:"node"`
	Op    string         `json:"op"`
	Name  string         `json:"name"`  // the node's first output
	Layer int            `json:"layer"` // -1 outside the layer blocks
	In    []Operand      `json:"in"`
	Out   []Operand      `json:"out"`
	Attrs map[string]any `json:"attrs,omitempty"` // scalar attributes of the node
	KV    int            `json:"kv"`              // index in Plan.KV; -1 if none
	// Launches in order; geometry for the schedule's Tokens.
	Launches []Launch `json:"launches"`
}

// Operand is a value a step reads or writes.
type Operand struct {
	Value  string `json:"value"`
	Kind   string `json:"kind"` // activation, input or weight
	DType  string `json:"dtype"`
	Shape  []int  `json:"shape"`  // T (-1) for the token axis
	Offset int64  `json:"offset"` // in the arena, or in the weight allocation
	Weight int    `json:"weight"` // index in Plan.Weights; -1 for activations
}

// Launch is one kernel launch.
type Launch struct {
	Kernel string   `json:"kernel"` // template name in cuda/kernels
	File   string   `json:"file"`
	DTypes []string `json:"dtypes"` // template dtype arguments
	Grid   [3]int   `json:"grid"`
	Block  [3]int   `json:"block"`
	Shmem  int      `json:"shmem"`
}

// Dims returns the shape with the token axis bound to t.
func (o Operand) Dims(t int) []int { return bindT(o.Shape, t) }

// Elems returns the number of elements at t tokens.
func (o Operand) Elems(t int) int {
	n := 1
	for _, d := range o.Dims(t) {
		n *= d
	}
	return n
}

// Last returns the innermost dimension (never the token axis in Laguna).
func (o Operand) Last(t int) int {
	d := o.Dims(t)
	if len(d) == 0 {
		return 1
	}
	return d[len(d)-1]
}

func bindT(s []int, t int) []int {
	out := make([]int, len(s))
	for i, d := range s {
		if d == T {
			d = t
		}
		out[i] = d
	}
	return out
}

// Int returns an integer attribute (JSON round trips turn ints into floats).
func (s *Step) Int(name string) int {
	switch v := s.Attrs[name].(type) {
	case int:
		return v
	case int64:
		return int(v)
	case float64:
		return int(v)
	}
	return 0
}

// Float returns a float attribute.
func (s *Step) Float(name string) float64 {
	switch v := s.Attrs[name].(type) {
	case float64:
		return v
	case int:
		return float64(v)
	case int64:
		return float64(v)
	}
	return 0
}

// String returns a string attribute.
func (s *Step) String(name string) string {
	v, _ := s.Attrs[name].(string)
	return v
}

// Value returns the buffer of the named value.
func (s *Schedule) Value(name string) (Buffer, bool) {
	for _, b := range s.Values {
		if b.Name == name {
			return b, true
		}
	}
	return Buffer{}, false
}

// Schedule returns the schedule of a shape class.
func (p *Plan) Schedule(class string) *Schedule {
	if class == Decode {
		return p.Decode
	}
	return p.Prefill
}

// WriteJSON writes the plan as indented JSON.
func (p *Plan) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", " ")
	return enc.Encode(p)
}

// ReadJSON reads a plan written by WriteJSON.
func ReadJSON(r io.Reader) (*Plan, error) {
	var p Plan
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("reading plan: %w", err)
	}
	if p.Decode == nil || p.Prefill == nil {
		return nil, fmt.Errorf("reading plan: missing decode or prefill schedule")
	}
	return &p, nil
}

// Print writes a readable summary: sizes, then every step of both
// schedules with its kernels and operand offsets.
func (p *Plan) Print(w io.Writer) error {
	var up int
	for _, wt := range p.Weights {
		if wt.Offset >= 0 {
			up++
		}
	}
	fmt.Fprintf(w, "plan %s: dtype %s, context %d\n", p.Model, p.DType, p.MaxContext)
	fmt.Fprintf(w, "weights: %d tensors uploaded (%d derived), %s\n", up, p.derived(), FormatBytes(p.WeightBytes))
	fmt.Fprintf(w, "kv caches: %d layers, %s\n", len(p.KV), FormatBytes(p.KVBytes))
	for _, s := range []*Schedule{p.Decode, p.Prefill} {
		launches := 0
		for _, st := range s.Steps {
			launches += len(st.Launches)
		}
		fmt.Fprintf(w, "\n%s T=%d: %d steps, %d launches, arena %s, workspace %s\n", s.Class, s.Tokens, len(s.Steps),
			launches, FormatBytes(s.Arena), FormatBytes(s.Workspace))
		tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
		for _, st := range s.Steps {
			var ks []string
			for _, l := range st.Launches {
				ks = append(ks, fmt.Sprintf("%s<%s> grid%v block%d shmem%d", l.Kernel, strings.Join(l.DTypes, ","),
					trimDim(l.Grid), l.Block[0], l.Shmem))
			}
			var ins, outs []string
			for _, o := range st.In {
				ins = append(ins, operandText(o))
			}
			for _, o := range st.Out {
				outs = append(outs, operandText(o))
			}
			fmt.Fprintf(tw, "  %s\t= %s(%s)\t%s\n", strings.Join(outs, ", "), st.Op, strings.Join(ins, ", "), strings.Join(ks, "; "))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

func (p *Plan) derived() int {
	n := 0
	for _, w := range p.Weights {
		if w.From != nil {
			n++
		}
	}
	return n
}

func operandText(o Operand) string {
	var dims []string
	for _, d := range o.Shape {
		if d == T {
			dims = append(dims, "T")
		} else {
			dims = append(dims, fmt.Sprint(d))
		}
	}
	at := fmt.Sprintf("+%d", o.Offset)
	if o.Kind == "weight" {
		at = fmt.Sprintf("w+%d", o.Offset)
	}
	return fmt.Sprintf("%s:%s[%s]@%s", o.Value, o.DType, strings.Join(dims, ","), at)
}

func trimDim(d [3]int) []int {
	switch {
	case d[2] > 1:
		return d[:]
	case d[1] > 1:
		return d[:2]
	}
	return d[:1]
}

// FormatBytes writes a byte count for people: B, KiB, MiB or GiB.
func FormatBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.2f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
