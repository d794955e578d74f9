package gpu

import (
	"fmt"
	"io"
	"math"
	"os"
	"regexp"

	"lagc/cuda"
	"lagc/exec/routes"
	"lagc/lower"
)

// Options configure an Executor.
type Options struct {
	// Device to run on; nil opens device 0 (closed with the executor).
	Device *cuda.Device
	// Eager launches every decode kernel from the host; otherwise the
	// decode step is captured once as a CUDA graph and replayed.
	Eager bool
	// Profile times every launch with CUDA events (eager only); read the
	// result with WriteProfile.
	Profile bool
	// SkipDecodeLogits: single-token Forward calls copy only the argmax to
	// the host and return nil logits (for callers that need the token only).
	SkipDecodeLogits bool
	// NoWeightCache converts every weight at load instead of using the
	// on-disk weight cache (package wcache; also LAGC_WEIGHT_CACHE=off).
	NoWeightCache bool
	// CacheQuantised also caches weights kept block-quantised (also
	// LAGC_WEIGHT_CACHE=all). By default only weights converted through
	// float32 are cached: a quantised weight's repack is a byte shuffle
	// about as fast as checking and copying its entry, and caching it would
	// double the disk a quantised model takes.
	CacheQuantised bool
	// LoadLog receives weight loading's progress bar, its summary line and
	// weight cache warnings; nil: silent.
	LoadLog io.Writer
	// LoadMemory bounds the host bytes held by weights being prepared at
	// once (0: an eighth of physical memory, between 1 and 16 GiB).
	LoadMemory int64
}

// WeightSource provides checkpoint tensors as float32 by canonical name
// (ckpt.Checkpoint satisfies it). A nil source makes synthetic weights on
// the device (benchmarks).
type WeightSource interface {
	ReadF32(name string) ([]float32, error)
}

// Executor runs a lower.Plan on one GPU, for one sequence (slot 0) or, with
// batched steps, for each of the plan's sequence slots (batch.go):
// weights, KV caches, an activation arena at the plan's offsets, and the
// per-step scalars (tokens, positions) in device memory.
type Executor struct {
	plan   *lower.Plan
	o      Options
	dev    *cuda.Device
	ownDev bool
	k      *Kernels
	s      *cuda.Stream // nil on a dry run
	q      Queue        // where launches and copies go: s, or a Recorder
	act    cuda.DType
	// dryNext is the next address a dry run hands out (no device).
	dryNext cuda.DevicePtr

	// The plan's regions (lower.Base*).
	allocs      []cuda.DevicePtr
	weights     cuda.DevicePtr // plan.WeightBytes
	kvMem       cuda.DevicePtr // plan.KVSeqBytes() for each sequence slot
	kvSlot      int            // the slot whose caches BaseKV binds to
	arena       cuda.DevicePtr // max arena of both schedules, then the workspace and the routes
	arenaBytes  int64
	ws          cuda.DevicePtr // shared scratch of wsBytes
	wsBytes     int64
	routes      cuda.DevicePtr // moe_grouped's extended routes, routesBytes
	routesBytes int64
	tokens      cuda.DevicePtr // i32 [chunk]: the step's token ids
	pos         cuda.DevicePtr // i32 [chunk]: their positions
	seq         cuda.DevicePtr // i32 [chunk]: their sequence slots (batched decode)
	sync        cuda.DevicePtr // counters (lower.BaseSync) of syncBytes, zeroed at allocation
	syncBytes   int64
	out         cuda.DevicePtr // the decode step's readback (lower.BaseOut), pinned host memory where mapped; 0: the plan has none
	kept        cuda.DevicePtr // its kept rows of logits (lower.BaseKept), keptBytes
	keptBytes   int64
	rb          readback       // the readback's host side and decoding one step ahead (ahead.go)
	ropes       cuda.DevicePtr // plan.RopeBytes
	shadows     cuda.DevicePtr // plan.ShadowBytes: bf16 copies of quantised weights
	// shadowsDropped: why Compile planned without bf16 weight copies.
	shadowsDropped string

	decode, prefill *program
	ragged          *program   // the prefill program of the last short chunk
	tails           []*program // prefill programs with a last-row or no tail (prefillTailAt)
	graph           *cuda.GraphExec
	decodeSteps     int // decode steps run since the last Reset or capture

	batch batchState // sequence slots and batched decode (batch.go)
	solo  soloState  // a batched step's lone decode row (solo.go)

	V        int
	next     int  // positions fed so far (sequence slot 0)
	devState bool // device tokens[0], pos[0] hold (lastNext, next): a decode step advanced them
	lastNext int32
	broken   bool
	checking bool           // LocateNonFinite: check every step's outputs
	census   *routes.Census // CensusRoutes: count every router step's routes
	prof     *profiler
	// loadStats: how the weights were loaded.
	loadStats LoadStats
	// skip, skipped: EnvSkipKernels and the launches it has left out.
	skip    *regexp.Regexp
	skipped int
}

// EnvPDL, set to 0, turns programmatic dependent launches
// (cuda.Stream.SetProgrammaticLaunch) off, for comparison.
const EnvPDL = "LAGC_PDL"

// EnvCublasLt, set to 0, keeps prefill GEMMs on lagc's own kernels where
// cuBLASLt is found (PlanOptions).
const EnvCublasLt = "LAGC_CUBLASLT"

// EnvPrefillBF16 says whether plans keep bf16 copies of the quantised
// weights of the prefill's dense matmuls, made at load
// (lower.Options.PrefillBF16): unset, where the device has room for them
// (Compile); 1, always (an error where they do not fit); 0, never.
const EnvPrefillBF16 = "LAGC_PREFILL_BF16"

// New allocates the plan's regions, uploads its weights (from ws, or
// synthetic ones when ws is nil) and rope tables, and binds both
// schedules: their kernels are compiled here, those of a shorter prefill
// chunk when it first runs.
func New(plan *lower.Plan, ws WeightSource, o Options) (_ *Executor, err error) {
	if plan == nil || plan.Decode == nil || plan.Prefill == nil {
		return nil, fmt.Errorf("gpu.New: incomplete plan")
	}
	act, err := dtypeOf(plan.DType)
	if err != nil {
		return nil, fmt.Errorf("gpu.New: %w", err)
	}
	if o.Profile {
		o.Eager = true
	}
	e := &Executor{plan: plan, o: o, act: act}
	if e.skip, err = skipKernels(); err != nil {
		return nil, fmt.Errorf("gpu.New: %w", err)
	}
	defer func() {
		if err != nil {
			e.Close()
		}
	}()
	if o.Device == nil {
		if e.dev, err = cuda.Open(0); err != nil {
			return nil, err
		}
		e.ownDev = true
	} else {
		e.dev = o.Device
	}
	e.k = NewKernels(e.dev)
	if plan.CublasLt {
		if e.k.Lt, err = e.dev.NewLt(); err != nil {
			return nil, fmt.Errorf("gpu.New: the plan runs prefill GEMMs on cuBLASLt (%s=0 plans without it): %w", EnvCublasLt, err)
		}
	}
	if e.s, err = e.dev.NewStream(); err != nil {
		return nil, err
	}
	// Programmatic launches overlap each kernel's start-up with the tail
	// of the one before (eager and captured); the profile times kernels
	// one by one, so it keeps plain launches.
	e.s.SetProgrammaticLaunch(!o.Profile && os.Getenv(EnvPDL) != "0")
	e.q = e.s
	if err := e.start(ws); err != nil {
		return nil, err
	}
	if err := e.initReadback(); err != nil {
		return nil, err
	}
	return e, nil
}

// start allocates and fills the executor's memory and binds both
// schedules.
func (e *Executor) start(ws WeightSource) (err error) {
	plan, o := e.plan, e.o
	if err := e.allocate(); err != nil {
		return err
	}
	if ws == nil {
		err = e.syntheticWeights(1)
	} else {
		err = e.uploadWeights(ws)
	}
	if err != nil {
		return err
	}
	if err := e.uploadRopes(); err != nil {
		return err
	}
	if err := e.fillShadows(); err != nil {
		return err
	}
	if e.decode, err = e.bindPlanned(plan.Decode); err != nil {
		return fmt.Errorf("gpu: decode schedule: %w", err)
	}
	if e.prefill, err = e.bindPlanned(plan.Prefill); err != nil {
		return fmt.Errorf("gpu: prefill schedule: %w", err)
	}
	e.V = e.decode.logits.Shape[len(e.decode.logits.Shape)-1]
	if o.Profile {
		e.prof = newProfiler(e.dev)
	}
	return nil
}

// DryRun returns an executor of plan on no device, and the Recorder its
// launches and copies go to: nothing is compiled, allocated or computed
// (weights are synthetic, results zero), but every launch is made as on
// a GPU, eagerly. It shows what a plan runs, launch by launch.
func DryRun(plan *lower.Plan) (*Executor, *Recorder, error) {
	if plan == nil || plan.Decode == nil || plan.Prefill == nil {
		return nil, nil, fmt.Errorf("gpu.DryRun: incomplete plan")
	}
	act, err := dtypeOf(plan.DType)
	if err != nil {
		return nil, nil, fmt.Errorf("gpu.DryRun: %w", err)
	}
	rec := &Recorder{}
	e := &Executor{plan: plan, o: Options{Eager: true}, act: act, k: &Kernels{fake: true}, q: rec, dryNext: dryBase}
	if err := e.start(nil); err != nil {
		return nil, nil, err
	}
	rec.Reset()
	return e, rec, nil
}

// dryBase is the first address of a dry run's memory: far from 0, so no
// offset is mistaken for a null pointer, and aligned like device memory.
const dryBase = cuda.DevicePtr(1 << 40)

func (e *Executor) alloc(n int64) (cuda.DevicePtr, error) {
	if n <= 0 {
		return 0, nil
	}
	if e.dev == nil {
		p := e.dryNext
		e.dryNext = e.dryNext.Add(align(n) + 1<<20)
		return p, nil
	}
	p, err := e.dev.Alloc(n)
	if err != nil {
		return 0, err
	}
	e.allocs = append(e.allocs, p)
	return p, nil
}

// allocate makes the plan's regions: weights, KV caches, arena with
// workspace and routes, tokens and positions, rope tables.
func (e *Executor) allocate() error {
	p := e.plan
	var err error
	if e.weights, err = e.alloc(p.WeightBytes); err != nil {
		if note := p.ConversionNote(); note != "" {
			return fmt.Errorf("weights (%d bytes; %s): %w", p.WeightBytes, note, err)
		}
		return fmt.Errorf("weights (%d bytes): %w", p.WeightBytes, err)
	}
	seqs := int64(p.SeqSlots())
	if p.KVBytes < 0 || p.KVSeqBytes() > math.MaxInt64/4/seqs {
		return fmt.Errorf("the plan asks for %d sequence slots of %d KV bytes", seqs, p.KVBytes)
	}
	if e.kvMem, err = e.alloc(seqs * p.KVSeqBytes()); err != nil {
		if seqs > 1 {
			return fmt.Errorf("KV caches (%d sequence slots of %s): %w", seqs, lower.FormatBytes(p.KVSeqBytes()), err)
		}
		return fmt.Errorf("KV caches (%d bytes): %w", p.KVBytes, err)
	}
	for _, c := range p.KV {
		need := int64(c.Slots) * int64(c.NKV) * int64(c.HeadDim) * int64(e.act.Size())
		if need > c.Half() || c.Offset < 0 || c.Offset+c.Bytes > p.KVBytes {
			return fmt.Errorf("KV cache of layer %d: plan gives %d bytes at %d, the kernels need %d", c.Layer, c.Half(), c.Offset, need)
		}
	}
	const maxBytes = math.MaxInt64 / 4
	for _, n := range []int64{p.Decode.Arena, p.Prefill.Arena, p.Decode.Workspace, p.Prefill.Workspace, p.Decode.Routes, p.Prefill.Routes,
		p.Decode.Sync, p.Prefill.Sync, p.RopeBytes} {
		if n < 0 || n > maxBytes {
			return fmt.Errorf("the plan asks for a region of %d bytes", n)
		}
	}
	e.arenaBytes = align(max(p.Decode.Arena, p.Prefill.Arena))
	e.wsBytes = align(max(p.Decode.Workspace, p.Prefill.Workspace))
	e.routesBytes = align(max(p.Decode.Routes, p.Prefill.Routes))
	total := e.arenaBytes + e.wsBytes + e.routesBytes
	if e.arena, err = e.alloc(total); err != nil {
		return fmt.Errorf("activation arena and workspace (%d bytes): %w", total, err)
	}
	e.ws = e.arena.Add(e.arenaBytes)
	e.routes = e.ws.Add(e.wsBytes)
	if e.ropes, err = e.alloc(p.RopeBytes); err != nil {
		return fmt.Errorf("rope tables (%d bytes): %w", p.RopeBytes, err)
	}
	if p.ShadowBytes < 0 || p.ShadowBytes > maxBytes {
		return fmt.Errorf("the plan asks for %d bytes of bf16 weight copies", p.ShadowBytes)
	}
	if e.shadows, err = e.alloc(p.ShadowBytes); err != nil {
		return fmt.Errorf("bf16 copies of quantised weights for prefill (%s; %s=0 goes without them): %w", lower.FormatBytes(p.ShadowBytes), EnvPrefillBF16, err)
	}
	// Tokens, positions, sequence slots and the counters, all zeroed: the
	// kernels that use the counters leave them zero.
	n := int64(max(p.Prefill.Tokens, 1))
	e.syncBytes = align(max(p.Decode.Sync, p.Prefill.Sync))
	// Then the decode step's kept rows of logits (lower.BaseKept), where
	// it writes them.
	var keptBytes int64
	if b, ok := p.Decode.Value("logits"); ok && len(b.Shape) > 0 && planWritesOut(p.Decode) {
		keptBytes = align(lower.KeptBytes(b.Shape[len(b.Shape)-1]))
	}
	ioBytes := 3*align(4*n) + e.syncBytes + keptBytes
	io, err := e.alloc(ioBytes)
	if err != nil {
		return err
	}
	e.tokens, e.pos, e.seq = io, io.Add(align(4*n)), io.Add(2*align(4*n))
	if e.syncBytes > 0 {
		e.sync = io.Add(3 * align(4*n))
	}
	if keptBytes > 0 {
		e.kept, e.keptBytes = io.Add(3*align(4*n)+e.syncBytes), keptBytes
		if err := e.allocOut(); err != nil {
			return err
		}
	}
	e.batch.init(p)
	e.solo.init()
	return e.q.Memset32(io, 0, ioBytes/4)
}

func align(n int64) int64 { return (n + lower.Alignment - 1) / lower.Alignment * lower.Alignment }

// Plan returns the plan the executor runs.
func (e *Executor) Plan() *lower.Plan { return e.plan }

// Kernels returns the launchers the executor uses.
func (e *Executor) Kernels() *Kernels { return e.k }

// Stream is the executor's stream.
func (e *Executor) Stream() *cuda.Stream { return e.s }

// Pos returns the positions fed so far.
func (e *Executor) Pos() int { return e.next }

// MaxPos returns the context length of the KV caches.
func (e *Executor) MaxPos() int { return e.plan.MaxContext }

// Reset starts a new sequence. The caches need no clearing: attention reads
// only positions up to the current one, which every step writes first.
func (e *Executor) Reset() {
	e.settle()
	e.rb.aheadHigh = 0
	e.next = 0
	e.devState = false
	e.broken = false
}

// Close releases the graph, memory and stream (and the device if New
// opened it).
func (e *Executor) Close() error {
	var first error
	keep := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	if e.graph != nil {
		keep(e.graph.Close())
		e.graph = nil
	}
	keep(e.batch.close())
	keep(e.solo.close())
	e.settle()
	if e.prof != nil {
		e.prof.close()
	}
	if e.s != nil {
		keep(e.s.Synchronize())
	}
	e.closeReadback()
	for _, p := range e.allocs {
		if e.dev != nil {
			keep(e.dev.Free(p))
		}
	}
	e.allocs = nil
	if e.s != nil {
		keep(e.s.Close())
		e.s = nil
	}
	if e.k != nil && e.k.Lt != nil {
		keep(e.k.Lt.Close())
		e.k.Lt = nil
	}
	if e.ownDev && e.dev != nil {
		keep(e.dev.Close())
		e.dev = nil
	}
	return first
}

// Forward feeds tokens at positions Pos(), Pos()+1, ... and returns the
// logits [T*V] of every token and their argmax [T]. One token runs the
// decode schedule (a graph replay unless Options.Eager); more run the
// prefill schedule in chunks of the plan's prefill size.
func (e *Executor) Forward(tokens []int32) ([]float32, []int32, error) {
	return e.forward(tokens, logitsAll, false)
}

// ForwardLast is Forward copying only the last token's row of logits [V]
// to the host, with every token's argmax (engine.LastRowForwarder): a
// prompt's chunk of 2048 tokens has 822 MB of f32 logits at Laguna's
// vocabulary, of which generation reads the last row.
func (e *Executor) ForwardLast(tokens []int32) ([]float32, []int32, error) {
	return e.forward(tokens, logitsLast, false)
}

// ForwardTail is ForwardLast computing, after the last layer's attention,
// only what the last token needs (engine.TailForwarder): each chunk but the
// last skips the rest of the step, the last runs it (the last layer's
// MLP, the final norm, the LM head, the argmax) on its last row alone
// (lower.AtTail). It returns the last row's logits [V] and its argmax.
// Those run at one row on the decode kernels, so they match Forward's last
// row within rounding, not bit for bit.
func (e *Executor) ForwardTail(tokens []int32) ([]float32, int32, error) {
	logits, next, err := e.forward(tokens, logitsLast, true)
	if err != nil {
		return nil, 0, err
	}
	if len(next) == 0 {
		return nil, 0, fmt.Errorf("gpu: forward: no argmax")
	}
	return logits, next[len(next)-1], nil
}

// logitRows says which rows of a step's logits are copied to the host.
type logitRows int

const (
	logitsNone logitRows = iota
	logitsLast
	logitsAll
)

// ofChunk is which rows of a prompt chunk's logits rows asks for: the last
// row's only in the prompt's last chunk.
func (rows logitRows) ofChunk(last bool) logitRows {
	if rows == logitsLast && !last {
		return logitsNone
	}
	return rows
}

// rowsIf is every row when all is set, else none.
func rowsIf(all bool) logitRows {
	if all {
		return logitsAll
	}
	return logitsNone
}

func (e *Executor) forward(tokens []int32, rows logitRows, lastOnly bool) ([]float32, []int32, error) {
	T := len(tokens)
	if T == 0 {
		return nil, nil, fmt.Errorf("gpu: forward: no tokens")
	}
	e.settle()
	if err := e.canFeed(tokens); err != nil {
		return nil, nil, err
	}
	if T == 1 {
		next, logits, err := e.decodeStep(tokens[0], !e.o.SkipDecodeLogits)
		if err != nil {
			e.broken = true
			return nil, nil, err
		}
		return logits, []int32{next}, nil
	}
	logits, next, err := e.prefillTokens(tokens, rows, lastOnly)
	if err != nil {
		e.broken = true
		return nil, nil, err
	}
	return logits, next, nil
}

// canFeed says why tokens cannot be fed next: an earlier failure, the
// context length, a token outside the vocabulary.
func (e *Executor) canFeed(tokens []int32) error {
	if e.broken {
		return fmt.Errorf("gpu: forward: an earlier step failed; Reset to start a new sequence")
	}
	if e.next+len(tokens) > e.plan.MaxContext {
		return fmt.Errorf("gpu: forward: %d tokens at position %d exceed the context length %d", len(tokens), e.next, e.plan.MaxContext)
	}
	for i, id := range tokens {
		if id < 0 || int(id) >= e.V {
			return fmt.Errorf("gpu: forward: token %d at index %d is outside the vocabulary [0, %d)", id, i, e.V)
		}
	}
	return nil
}

// setScalars writes the step's tokens and positions (from e.next) to the
// device.
func (e *Executor) setScalars(tokens []int32) error { return e.upload(tokens, e.next) }

// readOut copies the step's argmax of T tokens, and the rows of logits
// asked for, to the host.
func (e *Executor) readOut(p *program, T int, rows logitRows) ([]float32, []int32, error) {
	// A program whose tail ran on the last row has that row's argmax
	// alone, one whose tail did not run none (lower.AtTail).
	at := 0
	switch p.tail {
	case lower.TailNone:
		if rows != logitsNone {
			return nil, nil, fmt.Errorf("gpu: logits of a chunk whose tail did not run")
		}
		return nil, nil, nil
	case lower.TailLast:
		if rows == logitsAll {
			return nil, nil, fmt.Errorf("gpu: every row's logits of a chunk whose tail ran on its last row")
		}
		at = T - 1
	}
	next := make([]int32, T-at)
	if err := cuda.Download(e.q, next, e.arena.Add(p.next.Offset+4*int64(at))); err != nil {
		return nil, nil, fmt.Errorf("reading the argmax: %w", err)
	}
	first := 0
	switch rows {
	case logitsNone:
		return nil, next, nil
	case logitsLast:
		first = T - 1
	}
	out := make([]float32, (T-first)*e.V)
	if err := cuda.Download(e.q, out, e.arena.Add(p.logits.Offset+4*int64(first)*int64(e.V))); err != nil {
		return nil, nil, fmt.Errorf("reading the logits: %w", err)
	}
	return out, next, nil
}

// Rewind keeps the first n positions fed, so that the next Forward
// continues from position n (a prompt prefix shared with the previous
// sequence). Full layers' caches are linear and always allow it; a sliding
// layer's ring allows it until it has wrapped, after which positions before
// n are already overwritten: then Rewind fails and changes nothing.
func (e *Executor) Rewind(n int) error {
	if n < 0 || n > e.next {
		return fmt.Errorf("gpu: rewind to %d: the sequence holds %d positions", n, e.next)
	}
	if n == e.next {
		return nil
	}
	if e.broken {
		return fmt.Errorf("gpu: rewind: an earlier step failed; Reset to start a new sequence")
	}
	e.settle()
	// A step decoded ahead and dropped wrote one position further.
	high := max(e.next, e.rb.aheadHigh)
	for _, kv := range e.plan.KV {
		if kv.Window > 0 && high > kv.Slots {
			return fmt.Errorf("gpu: rewind to %d: the sliding-window ring of %d positions has wrapped at %d", n, kv.Slots, high)
		}
	}
	e.next, e.devState = n, false
	e.rb.aheadHigh = 0
	return nil
}

// hooked says whether a profile, a check or a census watches each step
// alone: the program then runs eagerly, with no graph or early
// readback.
func (e *Executor) hooked() bool { return e.prof != nil || e.checking || e.census != nil }
