package lower

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"lagc/ir"
	"lagc/passes"
	"lagc/prep"
)

// Options choose what a plan is compiled for.
type Options struct {
	DType      ir.DType // activations and matmul weights: ir.F32 or ir.BF16 (default)
	Chunk      int      // prefill tokens per step (default 2048)
	MaxContext int      // positions the KV caches hold (required)
	SMs        int      // multiprocessors of the target (default 132, an H200): split-KV attention, GEMV splits, tiles
	// PrefillFFMA keeps prefill attention on the FFMA kernel where the
	// tensor-core one would run (A/B timing, or a way around a suspected
	// kernel bug).
	PrefillFFMA bool
	// PrefillAttnTC keeps prefill attention on the mma.sync tensor-core
	// kernel where the wgmma one would run (Hopper, bf16, head_dim 128,
	// 16-byte operands; PrefillWG): A/B timing.
	PrefillAttnTC bool
	// PrefillAttnRows is attn_prefill_wg's rows a CTA (64 or 128;
	// AttentionPrefillArgs.WgRows; 0: PrefillWGRows): A/B timing.
	PrefillAttnRows int
	// PrefillAttnStages is the 128-row attn_prefill_wg's stages of K and V
	// (AttentionPrefillArgs.WgStages; 0: one): A/B timing.
	PrefillAttnStages int
	// DisableSplitGEMM runs a prefill matmul_split (q, k, v and the gate)
	// as one GEMM an output instead of one GEMM whose epilogue splits the
	// columns (splitGEMM), and a quantised one of a few rows (a batched
	// decode step) as one GEMV an output instead of qgemv_split
	// (splitGEMV): A/B timing.
	DisableSplitGEMM bool
	// DisableFloatSplitGEMV runs a float model's matmul_split of a few
	// rows (a batched decode step, a short prefill chunk) as one GEMV an
	// output instead of one GEMV over the whole weight sending each
	// output its columns (gemv_split: measured 4-6% faster a bf16 step at
	// buckets 2-8 on the H200, 2026-12-04): A/B timing
	// (LAGC_FLOAT_SPLIT_GEMV=0).
	DisableFloatSplitGEMV bool
	// PrefillBF16 keeps bf16 copies of the quantised weights of the
	// prefill's dense matmuls (Plan.Shadows; bf16 plans only): more device
	// memory, no dequantising copy a chunk.
	PrefillBF16 bool
	// CC is the target's compute capability, major*10+minor (default 90,
	// an H200): 90 and up gets the TMA + wgmma GEMMs (sm_90a).
	CC int
	// PrefillMMA keeps prefill GEMMs on the mma.sync kernels where the
	// wgmma ones would run (A/B timing).
	PrefillMMA bool
	// Seqs is the number of sequence slots (default 1), each with its own
	// KV caches, for batched decode steps (Plan.AtBatch).
	Seqs int
	// BatchGEMM runs batched decode steps of more than GEMVMaxRows rows on
	// the GEMMs (fewer weight reads) rather than on the GEMVs in runs of
	// GEMVMaxRows rows: faster at large batches, but a row's rounding then
	// depends on its batch's size.
	BatchGEMM bool
	// CublasLt: the plain bf16 prefill GEMMs of CublasLtMinRows rows or
	// more run on cuBLASLt (the executor has loaded it).
	CublasLt bool
	// QMoE forces the quantised decode routed-expert kernels' shape (zero:
	// lower's choice); every shape gives the same bits (A/B timing).
	QMoE QMoEForce
	// DisableFusions names launch-stream fusions not to run (FusionNames;
	// A/B timing, or a way around a suspected fusion bug).
	DisableFusions []string
	// EnableFusions names opt-in launch-stream fusions to run
	// (OptInFusionNames: correct, measured no faster; for A/B runs).
	EnableFusions []string
	// QGEMVGroups is the quantised GEMVs' warp-group target (QGEMVShape;
	// 0: QGEMVGroupsDefault; A/B timing).
	QGEMVGroups int
	// DecodeSplits forces the decode attention's blocks per kv head
	// (0: DecodeSplits' choice from the cache's capacity; A/B timing).
	DecodeSplits int
	// DecodeStages forces the decode attention's tiles in flight (0:
	// DecodeStages' choice; 1: none; 2 to MaxDecodeStages; A/B timing).
	DecodeStages int
	// DecodeMMA forces the decode attention's key loop on tensor cores
	// (DecodeMMA's force: 0 its choice, 1 off, 2 on; A/B timing).
	DecodeMMA int
}

// DefaultChunk is the prefill step size when none is given.
const DefaultChunk = 2048

// LongChunk is the prefill step `lagc run` takes where the plan fits the
// device (exec/gpu Config.AutoChunk): measured on the H200 (q4_k_m, 48
// layers, docs/PERF.md), prompts of 4096 and 16384 tokens run 7-8% faster
// than in steps of DefaultChunk, a prompt of 2048 as fast, for 0.8 GiB more
// activations. 8192 was faster still at 16384 tokens but 3% slower at 4096.
const LongChunk = 4096

// Alignment of weights and KV caches in their allocations, bytes.
const Alignment = passes.Alignment

func (o *Options) fill() error {
	if o.DType == ir.Invalid {
		o.DType = ir.BF16
	}
	if o.DType != ir.F32 && o.DType != ir.BF16 {
		return fmt.Errorf("lower: dtype %s: the executor runs f32 or bf16", o.DType)
	}
	if o.Chunk == 0 {
		o.Chunk = DefaultChunk
	}
	if o.Chunk < 1 {
		return fmt.Errorf("lower: prefill chunk must be positive, got %d", o.Chunk)
	}
	if o.MaxContext < 1 {
		return fmt.Errorf("lower: context length must be positive, got %d", o.MaxContext)
	}
	if o.DecodeSplits < 0 || o.DecodeSplits > MaxSplits {
		return fmt.Errorf("lower: decode attention splits must be 0 (lower's choice) to %d, got %d", MaxSplits, o.DecodeSplits)
	}
	if o.DecodeStages < 0 || o.DecodeStages > MaxDecodeStages {
		return fmt.Errorf("lower: decode attention stages must be 0 (lower's choice) to %d, got %d", MaxDecodeStages, o.DecodeStages)
	}
	if o.DecodeMMA < 0 || o.DecodeMMA > 2 {
		return fmt.Errorf("lower: decode attention tensor-core choice must be 0 (lower's), 1 (off) or 2 (on), got %d", o.DecodeMMA)
	}
	if o.SMs <= 0 {
		o.SMs = defaultSMs
	}
	for _, f := range append(append([]string(nil), o.DisableFusions...), o.EnableFusions...) {
		if !slices.Contains(FusionNames(), f) {
			return fmt.Errorf("lower: no launch-stream fusion %q (there are %s)", f, strings.Join(FusionNames(), ", "))
		}
	}
	for _, f := range o.EnableFusions {
		if !slices.Contains(OptInFusionNames(), f) {
			return fmt.Errorf("lower: %s runs by default (the opt-in fusions are %s)", f, strings.Join(OptInFusionNames(), ", "))
		}
	}
	if o.CC <= 0 {
		o.CC = defaultCC
	}
	if o.Seqs == 0 {
		o.Seqs = 1
	}
	if o.Seqs < 1 || o.Seqs > MaxSeqs {
		return fmt.Errorf("lower: %d sequence slots (1 to %d)", o.Seqs, MaxSeqs)
	}
	return nil
}

// Lower compiles g (after the passes; every weight bound to its checkpoint
// dtype) into a Plan for decode (T=1) and prefill (T=o.Chunk).
func Lower(g *ir.Graph, o Options) (*Plan, error) {
	if err := o.fill(); err != nil {
		return nil, err
	}
	if err := ir.Verify(g); err != nil {
		return nil, fmt.Errorf("lower: %w", err)
	}
	order, err := g.Order()
	if err != nil {
		return nil, fmt.Errorf("lower: %w", err)
	}
	l := &lowerer{g: g, o: o, order: order, p: &Plan{Model: g.Name, DType: o.DType.String(), MaxContext: o.MaxContext,
		SMs: o.SMs, PrefillFFMA: o.PrefillFFMA, PrefillAttnTC: o.PrefillAttnTC, PrefillAttnRows: o.PrefillAttnRows, PrefillAttnStages: o.PrefillAttnStages, DisableSplitGEMM: o.DisableSplitGEMM, DisableFloatSplitGEMV: o.DisableFloatSplitGEMV, CC: o.CC, PrefillMMA: o.PrefillMMA, Seqs: o.Seqs, BatchGEMM: o.BatchGEMM, CublasLt: o.CublasLt,
		QMoE: o.QMoE, DisableFusions: o.DisableFusions, EnableFusions: o.EnableFusions, QGEMVGroups: o.QGEMVGroups, DecodeSplits: o.DecodeSplits, DecodeStages: o.DecodeStages, DecodeMMA: o.DecodeMMA}, widx: map[*ir.Value]int{}, kvidx: map[*ir.Node]int{}}
	if err := l.weights(); err != nil {
		return nil, err
	}
	if err := l.caches(); err != nil {
		return nil, err
	}
	if err := l.ropes(); err != nil {
		return nil, err
	}
	for _, c := range []struct {
		class  string
		tokens int
	}{{Decode, 1}, {Prefill, o.Chunk}} {
		s, err := l.schedule(c.class, c.tokens)
		if err != nil {
			return nil, fmt.Errorf("lower: %s schedule (T=%d): %w", c.class, c.tokens, err)
		}
		if c.class == Decode {
			l.p.Decode = s
		} else {
			l.p.Prefill = s
		}
	}
	return l.p, nil
}

// shadowOps are the dense matmuls whose quantised weight (input 1) a
// shadow can stand in for.
var shadowOps = []string{"matmul", "matmul_swiglu", "matmul_add", "matmul_split"}

// shadows gives each block-quantised weight the dense matmuls of the
// prefill schedule s read (not the experts' stacks) a bf16 copy of all its
// rows, before s's launches are recorded.
func (p *Plan) shadows(s *Schedule) {
	seen := map[int]bool{}
	for _, st := range s.Steps {
		if !slices.Contains(shadowOps, st.Op) || len(st.In) < 2 || st.In[1].Kind != "weight" {
			continue
		}
		i := st.In[1].Weight
		if i < 0 || i >= len(p.Weights) || seen[i] {
			continue
		}
		w := p.Weights[i]
		if !IsQuantLayout(w.Layout) || GateUpSplit(w.Layout) || len(w.Shape) != 2 || w.Offset < 0 {
			continue
		}
		seen[i] = true
		b := int64(w.Shape[0]) * int64(w.Shape[1]) * 2
		p.Shadows = append(p.Shadows, Shadow{Weight: i, Offset: p.ShadowBytes, Bytes: b})
		p.ShadowBytes += align(b)
	}
}

// ShadowInit is the launches that fill the plan's shadows once the weights
// are on the device: each quantised weight dequantised whole into its
// bf16 copy.
func (p *Plan) ShadowInit() ([]Launch, error) {
	var ls []Launch
	for _, s := range p.Shadows {
		if s.Weight < 0 || s.Weight >= len(p.Weights) {
			return nil, fmt.Errorf("shadow of weight #%d: outside the plan", s.Weight)
		}
		w := p.Weights[s.Weight]
		t, ok := QuantType(w.DType)
		if !ok || len(w.Shape) != 2 || s.Bytes != int64(w.Shape[0])*int64(w.Shape[1])*2 || s.Offset < 0 || s.Offset+s.Bytes > p.ShadowBytes {
			return nil, fmt.Errorf("shadow of weight %s (%s %v): %d bytes at %d of %d", w.Name, w.DType, w.Shape, s.Bytes, s.Offset, p.ShadowBytes)
		}
		l, err := QDequant(t, Ptr{BaseWeights, w.Offset}, w.Shape[0], w.Shape[1], 0, w.Shape[0], Ptr{BaseShadow, s.Offset}, "bf16")
		if err != nil {
			return nil, fmt.Errorf("shadow of weight %s: %w", w.Name, err)
		}
		ls = append(ls, l)
	}
	return ls, nil
}

type lowerer struct {
	g     *ir.Graph
	o     Options
	order []*ir.Node
	p     *Plan
	widx  map[*ir.Value]int
	kvidx map[*ir.Node]int
}

func (l *lowerer) act() string { return l.o.DType.String() }

// weightDType is the dtype a kernel needs for weight input i of op: f32
// where its rule says so (norm weights and the router's correction bias:
// tiny, read in f32), else the plan's dtype.
func (l *lowerer) weightDType(op string, i int) ir.DType {
	if rules[op].f32Input(i) {
		return ir.F32
	}
	return l.o.DType
}

// weights assigns every weight a device dtype and an offset.
func (l *lowerer) weights() error {
	need := map[*ir.Value]ir.DType{}
	layout := map[*ir.Value]string{}
	var why = map[*ir.Value]string{}
	for _, n := range l.order {
		for i, v := range n.Inputs {
			if v.Kind != ir.Weight {
				continue
			}
			dt := l.weightDType(n.Op, i)
			lay := ""
			if r := rules[n.Op]; r.layout != nil {
				lay = r.layout(n, i)
			}
			// Block-quantised weights stay so where the kernels read them.
			r := rules[n.Op]
			if _, ok := QuantType(v.Type.DType.String()); ok && slices.Contains(r.quantInputs, i) && (r.quantKeep == nil || r.quantKeep(n)) {
				dt = v.Type.DType
				lay = quantLayout(lay)
			}
			if old, ok := need[v]; ok && (old != dt || layout[v] != lay) {
				return fmt.Errorf("lower: weight %s is read as %s%s by %s and as %s%s by %s", v.Name, old, layout[v], why[v], dt, lay, n)
			}
			need[v], layout[v], why[v] = dt, lay, n.String()
		}
	}
	// Sources of used derived weights are read on the host only.
	for i, w := range l.g.Weights {
		l.widx[w] = i
	}
	var off int64
	for _, w := range l.g.Weights {
		shape, err := w.Type.Shape.Eval(nil)
		if err != nil {
			return fmt.Errorf("lower: weight %s: %w", w.Name, err)
		}
		if !w.Type.DType.IsFloat() {
			return fmt.Errorf("lower: weight %s has dtype %s; kernels read float weights", w.Name, w.Type.DType)
		}
		wt := Weight{Name: w.Name, Shape: shape, Source: w.Type.DType.String(), Offset: -1, Layout: layout[w]}
		n, _ := w.Type.Shape.ConstElems()
		if dt, used := need[w]; used {
			wt.DType = dt.String()
			wt.Bytes = dt.Bytes(n)
			if IsQuantLayout(wt.Layout) {
				t, _ := QuantType(wt.DType)
				K := shape[len(shape)-1]
				if wt.Bytes, err = QuantDeviceBytes(t, int(n)/K, K); err != nil {
					return fmt.Errorf("lower: weight %s: %w", w.Name, err)
				}
			}
			wt.Offset = off
			off += align(wt.Bytes)
		} else {
			wt.DType = l.act()
			wt.Bytes = l.o.DType.Bytes(n)
		}
		if w.From != nil {
			d := &Derive{Op: w.From.Op}
			if w.From.Op != "concat" && w.From.Op != "reshape" {
				return fmt.Errorf("lower: weight %s: transform %q is not supported (concat, reshape)", w.Name, w.From.Op)
			}
			if w.From.Op == "concat" {
				ax, _ := w.From.Attrs["axis"].(int)
				if ax < 0 {
					ax += len(shape)
				}
				d.Axis = ax
			}
			for _, s := range w.From.Srcs {
				i, ok := l.widx[s]
				if !ok {
					return fmt.Errorf("lower: weight %s derives from %s, which is not a graph weight", w.Name, s.Name)
				}
				d.Srcs = append(d.Srcs, i)
			}
			wt.From = d
		}
		l.p.Weights = append(l.p.Weights, wt)
	}
	l.p.WeightBytes = off
	return nil
}

// caches makes one KV cache per attention node (ir.IsAttention).
func (l *lowerer) caches() error {
	seen := map[int]bool{}
	var off int64
	for _, n := range l.order {
		if !ir.IsAttention(n) {
			continue
		}
		ks := n.Inputs[1].Type.Shape
		if len(ks) != 3 || !ks[1].IsConst() || !ks[2].IsConst() {
			return fmt.Errorf("lower: %s: keys must be [T,nkv,d] with constant nkv, d; got %s", n, ks)
		}
		layer, window := n.AttrInt("layer"), n.AttrInt("window")
		if seen[layer] {
			return fmt.Errorf("lower: two attention nodes use KV cache %d", layer)
		}
		seen[layer] = true
		slots := l.o.MaxContext
		if window > 0 {
			slots = window
		}
		kv := KV{Layer: layer, NKV: ks[1].N, HeadDim: ks[2].N, Window: window, Slots: slots, DType: l.act(), Offset: off}
		half := align(l.o.DType.Bytes(int64(slots) * int64(kv.NKV) * int64(kv.HeadDim)))
		kv.Bytes = 2 * half
		off += kv.Bytes
		l.kvidx[n] = len(l.p.KV)
		l.p.KV = append(l.p.KV, kv)
	}
	l.p.KVBytes = off
	return nil
}

// valueDType is the storage of an activation: i32 stays; the graph's
// outputs (logits) and what a rule reads or writes in f32 (the router's
// logits and weights) are f32; the rest is stored in the plan's dtype.
func (l *lowerer) valueDType(v *ir.Value, uses map[*ir.Value][]*ir.Node) ir.DType {
	if !v.Type.DType.IsFloat() {
		return v.Type.DType
	}
	for _, o := range l.g.Outputs {
		if o == v {
			return ir.F32
		}
	}
	if v.Def != nil && rules[v.Def.Op].f32Outputs {
		return ir.F32
	}
	for _, n := range uses[v] {
		for i, in := range n.Inputs {
			if in == v && rules[n.Op].f32Input(i) {
				return ir.F32
			}
		}
	}
	return l.o.DType
}

func (l *lowerer) schedule(class string, tokens int) (*Schedule, error) {
	// Offsets come from the f32 plan, so values kept in f32 fit whatever
	// the activation dtype (a bf16 plan wastes up to half the arena).
	mp, err := passes.PlanMemory(l.g, tokens, ir.F32)
	if err != nil {
		return nil, err
	}
	uses := l.g.Uses()
	s := &Schedule{Class: class, Tokens: tokens, Arena: mp.Arena}
	dts := map[*ir.Value]ir.DType{}
	// A view is stored like the value it reshapes.
	var dtOf func(v *ir.Value) ir.DType
	dtOf = func(v *ir.Value) ir.DType {
		if dt, ok := dts[v]; ok {
			return dt
		}
		dt := l.valueDType(v, uses)
		if v.Def != nil && v.Def.Op == "reshape" && v.Def.Inputs[0].Kind != ir.Weight {
			dt = dtOf(v.Def.Inputs[0])
		}
		dts[v] = dt
		return dt
	}
	reloc, arena, err := l.splitRows(class, tokens, mp.Arena, dtOf)
	if err != nil {
		return nil, err
	}
	s.Arena = arena
	// offset is a value's place: its storage owner's relocated row, or the
	// memory plan's.
	offset := func(v *ir.Value) (int64, bool) {
		if o, ok := mp.Owner(v.Name); ok {
			if off, ok := reloc[l.g.Value(o)]; ok {
				return off, true
			}
		}
		return mp.Offset(v.Name)
	}
	operand := func(v *ir.Value) (Operand, error) {
		o := Operand{Value: v.Name, Kind: v.Kind.String(), Shape: symShape(v.Type.Shape), Weight: -1}
		if v.Kind == ir.Weight {
			i := l.widx[v]
			w := l.p.Weights[i]
			o.DType, o.Offset, o.Weight = w.DType, w.Offset, i
			return o, nil
		}
		off, ok := offset(v)
		if !ok {
			return o, fmt.Errorf("value %s has no place in the memory plan", v.Name)
		}
		o.DType, o.Offset = dtOf(v).String(), off
		return o, nil
	}
	for _, v := range l.g.Values() {
		if v.Kind == ir.Weight {
			continue
		}
		off, ok := offset(v)
		if !ok {
			continue // dead value (no node computes it in order)
		}
		dt := dtOf(v)
		n, err := v.Type.Shape.Elems(l.g.Env(tokens))
		if err != nil {
			return nil, err
		}
		s.Values = append(s.Values, Buffer{Name: v.Name, Offset: off, Bytes: dt.Bytes(n), DType: dt.String(), Shape: symShape(v.Type.Shape)})
	}
	sort.Slice(s.Values, func(i, j int) bool {
		return s.Values[i].Offset < s.Values[j].Offset ||
			(s.Values[i].Offset == s.Values[j].Offset && s.Values[i].Name < s.Values[j].Name)
	})

	for _, n := range l.order {
		if n.Op == "reshape" && n.Inputs[0].Kind != ir.Weight {
			continue // a view: no kernel
		}
		st := Step{Node: n.ID, Op: n.Op, Name: n.Outputs[0].Name, Layer: layerOf(n), KV: -1, Attrs: scalarAttrs(n)}
		for _, v := range n.Inputs {
			o, err := operand(v)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", n, err)
			}
			st.In = append(st.In, o)
		}
		for _, v := range n.Outputs {
			o, err := operand(v)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", n, err)
			}
			st.Out = append(st.Out, o)
		}
		if i, ok := l.kvidx[n]; ok {
			st.KV = i
		}
		s.Steps = append(s.Steps, st)
	}
	if class == Prefill && l.o.PrefillBF16 && l.o.DType == ir.BF16 {
		l.p.shadows(s)
	}
	launches := make([][]Launch, len(s.Steps))
	for i := range s.Steps {
		st := &s.Steps[i]
		if launches[i], err = l.p.stepLaunches(s, st, tokens, false); err != nil {
			return nil, fmt.Errorf("%s (%s): %w", st.Name, st.Op, err)
		}
	}
	fuseLaunches(s.Steps, launches, l.p.fusionsOff())
	if s.Workspace, s.Routes, s.Sync, err = l.p.scratch(s); err != nil {
		return nil, err
	}
	if class == Decode {
		// After the workspace is sized: the shared GEMVs' sums go past it.
		s.Workspace += l.p.lateFusions(launches, s.Workspace)
	}
	for i := range s.Steps {
		s.Steps[i].Launches = launches[i]
	}
	if class == Decode {
		next, ok := s.Value("next")
		if !ok || next.DType != "i32" {
			return nil, fmt.Errorf("the graph has no output next (i32) for the decode step to feed back")
		}
		// With the logits in f32 the step's readback goes to BaseOut.
		var lg, out Ptr
		V := 0
		if b, ok := s.Value("logits"); ok && b.DType == "f32" && len(b.Shape) > 0 {
			lg, out, V = Ptr{BaseArena, b.Offset}, Ptr{BaseOut, 0}, b.Shape[len(b.Shape)-1]
		}
		s.Finish = []Launch{StepNext(Ptr{BaseArena, next.Offset}, Ptr{BaseTokens, 0}, Ptr{BasePos, 0}, lg, V, out)}
	}
	return s, nil
}

// ropes makes one rotary table per distinct rope (of rope and norm_rope
// nodes), in node order.
func (l *lowerer) ropes() error {
	var off int64
	for _, n := range l.order {
		if n.Op != "rope" && n.Op != "norm_rope" {
			continue
		}
		p := ropeParams(scalarAttrs(n))
		if _, ok := l.p.ropeIndex(p); ok {
			continue
		}
		tab, err := prep.NewRopeTable(p)
		if err != nil {
			return fmt.Errorf("lower: %s: %w", n, err)
		}
		r := Rope{Params: p, RotaryDim: tab.RotaryDim, AttnFactor: tab.AttnFactor, Offset: off, Bytes: int64(4 * len(tab.InvFreq))}
		off += align(r.Bytes)
		l.p.Ropes = append(l.p.Ropes, r)
	}
	l.p.RopeBytes = off
	return nil
}

// ropeParams reads a rope step's attributes.
func ropeParams(a map[string]any) prep.RopeParams {
	st := Step{Attrs: a}
	return prep.RopeParams{
		RotaryDim: st.Int("rotary_dim"), Theta: st.Float("theta"), Type: st.String("rope_type"),
		Factor: st.Float("factor"), OriginalContext: st.Int("original_context"),
		BetaFast: st.Float("beta_fast"), BetaSlow: st.Float("beta_slow"), AttentionFactor: st.Float("attention_factor"),
	}
}

func (p *Plan) ropeIndex(q prep.RopeParams) (int, bool) {
	for i, r := range p.Ropes {
		if r.Params == q {
			return i, true
		}
	}
	return 0, false
}

// ropeFor is the table of a rope step.
func (p *Plan) ropeFor(st *Step) (RoPETable, error) {
	i, ok := p.ropeIndex(ropeParams(st.Attrs))
	if !ok {
		return RoPETable{}, fmt.Errorf("no rope table for %s", st.Name)
	}
	r := p.Ropes[i]
	return RoPETable{InvFreq: Ptr{BaseRope, r.Offset}, RotaryDim: r.RotaryDim, AttnFactor: r.AttnFactor}, nil
}

// splitRows places the outputs of every matmul_split of the decode
// schedule back to back in a region of their own after the memory plan's
// arena, in the order of the weight's row blocks, so that at T=1 they are
// one row [1, sum(sizes)] that a single GEMV over the concatenated weight
// writes (the executor checks the layout and launches one GEMV instead of
// one per block). A region is never shared, so no lifetime can clash. A
// norm_rope that reads such an output, its only reader, writes its result
// over it. It returns the new offsets by value and the arena's new size.
func (l *lowerer) splitRows(class string, tokens int, arena int64, dtOf func(*ir.Value) ir.DType) (map[*ir.Value]int64, int64, error) {
	reloc := map[*ir.Value]int64{}
	if class != Decode || tokens != 1 {
		return reloc, arena, nil
	}
	for _, n := range l.order {
		if n.Op != "matmul_split" || len(n.Outputs) < 2 {
			continue
		}
		dt := dtOf(n.Outputs[0])
		same := true
		for _, v := range n.Outputs {
			same = same && dtOf(v) == dt
		}
		if !same {
			continue
		}
		off := align(arena)
		for _, v := range n.Outputs {
			elems, err := v.Type.Shape.Elems(l.g.Env(tokens))
			if err != nil {
				return nil, 0, fmt.Errorf("%s: %w", n, err)
			}
			reloc[v] = off
			off += dt.Bytes(elems)
		}
		arena = align(off)
	}
	// A norm_rope whose input is a relocated output, read by nothing else,
	// runs in place: q and k then stay back to back for one launch.
	for _, n := range l.order {
		if n.Op != "norm_rope" {
			continue
		}
		if owner := l.soleView(n.Inputs[0]); owner != nil && dtOf(owner) == dtOf(n.Outputs[0]) {
			if off, ok := reloc[owner]; ok {
				reloc[n.Outputs[0]] = off
			}
		}
	}
	return reloc, arena, nil
}

// soleView returns the value v's storage belongs to (v itself, or what
// the views v reshapes were made from) if v and every view on the way are
// read once; else nil.
func (l *lowerer) soleView(v *ir.Value) *ir.Value {
	for {
		if l.g.NumUses(v) != 1 {
			return nil
		}
		if v.Def == nil || v.Def.Op != "reshape" || v.Def.Inputs[0].Kind == ir.Weight {
			return v
		}
		v = v.Def.Inputs[0]
	}
}

// layerOf returns the layer a node belongs to: the attention's `layer`
// attribute, else the N of a "blk.N." output name; -1 outside the layers.
func layerOf(n *ir.Node) int {
	if ir.IsAttention(n) {
		return n.AttrInt("layer")
	}
	name := n.Outputs[0].Name
	if rest, ok := strings.CutPrefix(name, "blk."); ok {
		if i := strings.IndexByte(rest, '.'); i > 0 {
			if l, err := strconv.Atoi(rest[:i]); err == nil {
				return l
			}
		}
	}
	return -1
}

// scalarAttrs copies the node's scalar attributes, with op defaults filled.
func scalarAttrs(n *ir.Node) map[string]any {
	out := map[string]any{}
	def, ok := n.Def()
	if !ok {
		return nil
	}
	for _, a := range def.Attrs {
		switch a.Kind {
		case ir.AttrKindInt:
			out[a.Name] = n.AttrInt(a.Name)
		case ir.AttrKindFloat:
			out[a.Name] = n.AttrFloat(a.Name)
		case ir.AttrKindString:
			out[a.Name] = n.AttrString(a.Name)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

func symShape(s ir.Shape) []int {
	out := make([]int, len(s))
	for i, d := range s {
		if d.IsConst() {
			out[i] = d.N
		} else {
			out[i] = T
		}
	}
	return out
}

func align(n int64) int64 { return (n + Alignment - 1) / Alignment * Alignment }
