// Package lower turns an optimised ir.Graph into a kernel schedule: for each
// of two shape classes, decode (T=1) and prefill (T=chunk), one entry per
// node with its launches, complete (kernel instantiation, grid, block,
// shared memory and every argument, pointers as region+offset), the arena
// offsets of its operands from the memory plan (passes.PlanMemory), and the
// weights to upload, with the load-time transforms (concat, reshape) that
// fusion passes ask for.
//
// Every choice of kernel, tile and geometry is made here, by pure functions
// (the kernel functions of kernels_*.go, called by one lowering rule per op
// in rules*.go). A Plan is plain data: it serialises to JSON and prints as
// text, and the CUDA executor (exec/gpu) binds its regions to memory and
// launches exactly its launches, in order; a prefill chunk shorter than the
// planned one gets its launches from Plan.At.
package lower

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"lagc/prep"
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
	SMs        int    `json:"sms"` // multiprocessors of the target GPU
	CC         int    `json:"cc"`  // its compute capability, major*10+minor
	// PrefillMMA keeps prefill GEMMs on the mma.sync kernels.
	PrefillMMA bool `json:"prefill_mma,omitempty"`
	// PrefillFFMA keeps prefill attention on the FFMA kernel.
	PrefillFFMA bool `json:"prefill_ffma,omitempty"`
	// PrefillAttnTC keeps prefill attention on the mma.sync kernel where
	// the wgmma one would run.
	PrefillAttnTC bool `json:"prefill_attn_tc,omitempty"`
	// PrefillAttnRows is attn_prefill_wg's rows a CTA (0: the default).
	PrefillAttnRows int `json:"prefill_attn_rows,omitempty"`
	// PrefillAttnStages is its stages of K and V at 128 rows (0: one).
	PrefillAttnStages int `json:"prefill_attn_stages,omitempty"`
	// DisableSplitGEMM runs a prefill matmul_split as one GEMM (or GEMV) an output.
	DisableSplitGEMM bool `json:"disable_split_gemm,omitempty"`
	// DisableFloatSplitGEMV runs a float matmul_split of a few rows as
	// one GEMV an output instead of one gemv_split.
	DisableFloatSplitGEMV bool `json:"disable_float_split_gemv,omitempty"`
	// Shadows are bf16 copies of the block-quantised weights the prefill's
	// dense matmuls read (Options.PrefillBF16), made once at load in one
	// allocation of ShadowBytes (BaseShadow): those matmuls then run the
	// bf16 GEMM over them instead of dequantising into the workspace every
	// chunk. Decode keeps the quantised GEMVs.
	Shadows     []Shadow `json:"shadows,omitempty"`
	ShadowBytes int64    `json:"shadow_bytes,omitempty"`
	// Seqs is the number of sequence slots: the executor allocates the KV
	// caches Seqs times, KVSeqBytes apart (0 in older plans: one).
	Seqs int `json:"seqs,omitempty"`
	// BatchGEMM: batched decode steps above GEMVMaxRows rows run the GEMMs
	// (Options.BatchGEMM).
	BatchGEMM bool `json:"batch_gemm,omitempty"`
	// CublasLt: prefill GEMMs may be cuBLASLt launches (Options.CublasLt).
	CublasLt bool `json:"cublaslt,omitempty"`
	// QMoE: the decode routed-expert kernels' forced shape (Options.QMoE).
	QMoE QMoEForce `json:"qmoe,omitzero"`
	// DisableFusions: launch-stream fusions not run (Options.DisableFusions).
	DisableFusions []string `json:"disable_fusions,omitempty"`
	// EnableFusions: opt-in fusions run (Options.EnableFusions).
	EnableFusions []string `json:"enable_fusions,omitempty"`
	// QGEMVGroups: the quantised GEMVs' warp-group target (Options.QGEMVGroups).
	QGEMVGroups int `json:"qgemv_groups,omitempty"`
	// DecodeSplits: the decode attention's forced split count (Options.DecodeSplits).
	DecodeSplits int `json:"decode_splits,omitempty"`
	// DecodeStages: its forced tiles in flight (Options.DecodeStages).
	DecodeStages int `json:"decode_stages,omitempty"`
	// DecodeMMA: its forced tensor-core choice (Options.DecodeMMA).
	DecodeMMA int `json:"decode_mma,omitempty"`
	// Weights are placed in one device allocation of WeightBytes.
	Weights     []Weight `json:"weights"`
	WeightBytes int64    `json:"weight_bytes"`
	// KV caches, one per attention node, in one allocation of KVBytes
	// (per sequence slot).
	KV      []KV  `json:"kv"`
	KVBytes int64 `json:"kv_bytes"`
	// Rotary tables, one per distinct rope, in one allocation of RopeBytes.
	Ropes     []Rope    `json:"ropes"`
	RopeBytes int64     `json:"rope_bytes"`
	Decode    *Schedule `json:"decode"`
	Prefill   *Schedule `json:"prefill"`
}

// Shadow is the bf16 copy of every row of quantised weight Weight (an
// index in Plan.Weights), [rows, K] at Offset of the shadow allocation.
type Shadow struct {
	Weight int   `json:"weight"`
	Offset int64 `json:"offset"`
	Bytes  int64 `json:"bytes"`
}

// shadow is the bf16 copy of the quantised weight at w, if the plan has one.
func (p *Plan) shadow(w Ptr) (Shadow, bool) {
	if w.Base != BaseWeights {
		return Shadow{}, false
	}
	for _, s := range p.Shadows {
		if s.Weight >= 0 && s.Weight < len(p.Weights) && p.Weights[s.Weight].Offset == w.Offset {
			return s, true
		}
	}
	return Shadow{}, false
}

// shadowRows is where the prefill GEMM a reads rows row0.. of its
// quantised weight from the plan's bf16 copy of it: bf16 activations,
// more rows than the GEMVs take, and a shadow of the weight.
func (p *Plan) shadowRows(a MatMulArgs, row0 int) (Ptr, bool) {
	if p == nil || a.T <= QGEMVMaxRows || dequantDType(a.XType) != "bf16" {
		return Ptr{}, false
	}
	s, ok := p.shadow(a.W)
	if !ok {
		return Ptr{}, false
	}
	return Ptr{BaseShadow, s.Offset + int64(row0)*int64(a.K)*2}, true
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

// Device layouts (see Weight.Layout). LayoutQuant is a block-quantised
// matrix in the device layout of qlayout.go (its rows as the graph has
// them); LayoutGateUpSplitQuant is both: the split rows, then quantised.
const (
	LayoutGateUpSplit      = "gate_up_split"
	LayoutQuant            = "quant"
	LayoutGateUpSplitQuant = "gate_up_split+quant"
)

// quantLayout is layout with the weight kept block-quantised.
func quantLayout(layout string) string {
	if layout == LayoutGateUpSplit {
		return LayoutGateUpSplitQuant
	}
	return LayoutQuant
}

// IsQuantLayout reports whether a weight of this layout is stored
// block-quantised in the device layout.
func IsQuantLayout(layout string) bool {
	return layout == LayoutQuant || layout == LayoutGateUpSplitQuant
}

// GateUpSplit reports whether a weight of this layout stores a fused
// gate_up stack as all gate rows, then all up rows.
func GateUpSplit(layout string) bool {
	return layout == LayoutGateUpSplit || layout == LayoutGateUpSplitQuant
}

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

// Rope is one rotary embedding's table on the device: the inverse
// frequencies prep.NewRopeTable computes for Params (f32 [RotaryDim/2]) at
// Offset in the rope allocation.
type Rope struct {
	Params     prep.RopeParams `json:"params"`
	RotaryDim  int             `json:"rotary_dim"`
	AttnFactor float32         `json:"attn_factor"`
	Offset     int64           `json:"offset"`
	Bytes      int64           `json:"bytes"`
}

// Schedule is the kernel sequence of one shape class.
type Schedule struct {
	Class  string `json:"class"`  // decode or prefill
	Tokens int    `json:"tokens"` // T the arena is planned for (prefill runs 1..Tokens)
	// Arena holds every activation at its offset. Workspace is the scratch
	// the steps share (split-KV attention partials, the MoE schedule and
	// grouped buffers), Routes moe_grouped's routes with its shared
	// experts, Sync the counters of BaseSync (the split decode
	// attention's, the fused router's); each is the most any step needs at
	// any T up to Tokens.
	Arena     int64    `json:"arena_bytes"`
	Workspace int64    `json:"workspace_bytes"`
	Routes    int64    `json:"routes_bytes"`
	Sync      int64    `json:"sync_bytes,omitempty"`
	Values    []Buffer `json:"values"`
	Steps     []Step   `json:"steps"`
	// Finish runs after the steps: decode's step_next (the argmax becomes
	// the next token, the position advances).
	Finish []Launch `json:"finish,omitempty"`
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
	// Launches in order, at the schedule's Tokens (Plan.At gives them at
	// fewer).
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

// cc is the target's compute capability (plans written before it was
// recorded target an H200).
func (p *Plan) cc() int {
	if p.CC > 0 {
		return p.CC
	}
	return defaultCC
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
// schedules with its operands and, under it, its launches as an executor
// makes them (instantiation, grid, block, shared memory, arguments).
func (p *Plan) Print(w io.Writer) error {
	var up int
	for _, wt := range p.Weights {
		if wt.Offset >= 0 {
			up++
		}
	}
	fmt.Fprintf(w, "plan %s: dtype %s, context %d, %d SMs, compute capability %d.%d\n", p.Model, p.DType, p.MaxContext, p.SMs, p.CC/10, p.CC%10)
	fmt.Fprintf(w, "weights: %d tensors uploaded (%d derived), %s\n", up, p.derived(), FormatBytes(p.WeightBytes))
	if note := p.ConversionNote(); note != "" {
		fmt.Fprintf(w, "  %s\n", note)
	}
	if p.SeqSlots() > 1 {
		fmt.Fprintf(w, "kv caches: %d layers, %s per sequence, %d sequence slots (%s), batch buckets %v\n", len(p.KV),
			FormatBytes(p.KVBytes), p.SeqSlots(), FormatBytes(int64(p.SeqSlots())*p.KVSeqBytes()), BatchBuckets(p.SeqSlots(), p.Prefill.Tokens))
	} else {
		fmt.Fprintf(w, "kv caches: %d layers, %s\n", len(p.KV), FormatBytes(p.KVBytes))
	}
	fmt.Fprintf(w, "rope tables: %d, %s\n", len(p.Ropes), FormatBytes(p.RopeBytes))
	if len(p.Shadows) > 0 {
		fmt.Fprintf(w, "bf16 copies of quantised weights for prefill: %d, %s\n", len(p.Shadows), FormatBytes(p.ShadowBytes))
	}
	if note := p.DequantNote(); note != "" {
		fmt.Fprintf(w, "%s\n", note)
	}
	for _, s := range []*Schedule{p.Decode, p.Prefill} {
		launches := make([][]Launch, len(s.Steps))
		for i, st := range s.Steps {
			launches[i] = st.Launches
		}
		if err := p.PrintSchedule(w, s, s.Tokens, launches); err != nil {
			return err
		}
	}
	return nil
}

// PrintSchedule writes schedule s at t tokens with the launches of its
// steps (Plan.At(s, t)).
func (p *Plan) PrintSchedule(w io.Writer, s *Schedule, t int, launches [][]Launch) error {
	return p.printSteps(w, fmt.Sprintf("%s T=%d", s.Class, t), s, launches, true)
}

// PrintBatch writes a batched decode step of b rows with its launches
// (Plan.AtBatch(b)): the prefill schedule's steps.
func (p *Plan) PrintBatch(w io.Writer, b int, launches [][]Launch) error {
	return p.printSteps(w, fmt.Sprintf("batched decode of %d sequences (on the prefill schedule)", b), p.Prefill, launches, false)
}

func (p *Plan) printSteps(w io.Writer, title string, s *Schedule, launches [][]Launch, finish bool) error {
	if len(launches) != len(s.Steps) {
		return fmt.Errorf("lower: %d launch lists for %d steps", len(launches), len(s.Steps))
	}
	n := 0
	if finish {
		n = len(s.Finish)
	}
	for _, ls := range launches {
		n += len(ls)
	}
	fmt.Fprintf(w, "\n%s: %d steps, %d launches, arena %s, workspace %s, routes %s, sync %s\n", title, len(s.Steps),
		n, FormatBytes(s.Arena), FormatBytes(s.Workspace), FormatBytes(s.Routes), FormatBytes(s.Sync))
	for i, st := range s.Steps {
		var ins, outs []string
		for _, o := range st.In {
			ins = append(ins, operandText(o))
		}
		for _, o := range st.Out {
			outs = append(outs, operandText(o))
		}
		note := ""
		switch {
		case len(launches[i]) > 0:
		case st.Op == "norm_rope" && i > 0 && s.Steps[i-1].Op == "norm_rope" && len(launches[i-1]) > 0:
			note = "  (launched by the step before)"
		case st.Op == "norm_rope" && normRoPEByGEMM(s.Steps, launches, i):
			note = "  (done by the GEMM's launch)" // fusePrefillGEMMNormRoPE
		case st.Op == "norm_rope":
			note = "  (done by the attention's launch)" // fuseNormRoPEAttention, fusePrefillNormRoPEAttention
		default: // a step a fusion folded into an earlier launch: norms, a tail's add, the router's outputs
			for j := i - 1; j >= 0; j-- {
				if k := len(launches[j]); k > 0 {
					note = "  (launched by " + launches[j][k-1].Kernel + " before)"
					break
				}
			}
		}
		fmt.Fprintf(w, "  %s = %s(%s)%s\n", strings.Join(outs, ", "), st.Op, strings.Join(ins, ", "), note)
		for _, l := range launches[i] {
			fmt.Fprintf(w, "    %s\n", l)
		}
	}
	if finish && len(s.Finish) > 0 {
		fmt.Fprintf(w, "  finish\n")
		for _, l := range s.Finish {
			fmt.Fprintf(w, "    %s\n", l)
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

// normRoPEByGEMM says whether norm_rope step i, without launches of its
// own, was fused into the split GEMM of the matmul_split step before it
// (gemm_wgmma_nr).
func normRoPEByGEMM(steps []Step, launches [][]Launch, i int) bool {
	for j := i - 1; j >= 0; j-- {
		if steps[j].Op == "norm_rope" {
			continue
		}
		k := len(launches[j])
		return steps[j].Op == "matmul_split" && k > 0 && launches[j][k-1].Kernel == "gemm_wgmma_nr"
	}
	return false
}
