// Package engine loads a Laguna checkpoint into an executable model (YAML ->
// ir.Graph -> passes -> backend) and runs generation on any backend: the
// pure-Go CPU reference (exec/cpu) or the GPU (exec/gpu).
package engine

import (
	"fmt"
	"io"
	"os"

	"lagc/ckpt"
	"lagc/config"
	"lagc/exec/cpu"
	"lagc/exec/gpu"
	"lagc/exec/routes"
	"lagc/ir"
	"lagc/models"
	"lagc/passes"
	"lagc/progress"
)

// Backend runs the forward steps of one sequence on some device.
type Backend interface {
	// Forward feeds tokens at positions Pos(), Pos()+1, ... and returns the
	// logits [T*V] of every token and their argmax [T].
	Forward(tokens []int32) (logits []float32, next []int32, err error)
	Pos() int    // tokens fed so far
	MaxPos() int // context length
	Reset()      // start a new sequence
	Close() error
}

// Options say how to build a model.
type Options struct {
	Device     string    // "cpu" (default) or "cuda"
	YAMLPath   string    // model description; "" uses the embedded laguna.yaml
	Passes     []string  // pass pipeline (nil: passes.DefaultPipeline)
	Disable    []string  // passes to skip
	MaxContext int       // KV cache length; 0: the model's max_position_embeddings
	Progress   io.Writer // where weight loading reports progress; nil: silent
	Slots      int       // sequence slots for batched steps (Model.Batch); 0: 1
	// CPU only: bytes of float32 copies the executor may make of f16/bf16
	// matrices (cpu.Options.F32Budget: 0 default, negative none).
	F32Budget int64
	// GPU only.
	DType string // activations and weights: "bf16" (default) or "f32"
	Chunk int    // prefill tokens per step (0: 2048, or with AutoChunk the executor's choice)
	// AutoChunk with Chunk 0: steps of lower.LongChunk where that plan fits
	// the device, else 2048 (gpu.Config.AutoChunk); PrefillChunk says which.
	AutoChunk bool
	Eager     bool // launch every decode kernel instead of replaying a CUDA graph
	Profile   bool // time every kernel (eager); the backend writes it as pprof
	// NoWeightCache converts every weight at load instead of using the
	// on-disk weight cache (gpu.Options.NoWeightCache).
	NoWeightCache bool
	// CacheQuantised caches quantised weights' repacked blocks too
	// (gpu.Options.CacheQuantised).
	CacheQuantised bool
	// BatchGEMM: batched decode steps of more than 8 sequences run the
	// GEMMs, faster, but a row's rounding then depends on its batch
	// (gpu.Config.BatchGEMM).
	BatchGEMM bool
}

// Model is a loaded checkpoint ready to run.
type Model struct {
	Config     *config.Config
	Graph      *ir.Graph
	Checkpoint ckpt.Checkpoint
	Passes     *passes.Result
	Backend    Backend
	Device     string

	seq []int32 // the tokens in the backend's KV caches (Sequence)
}

// Open loads the checkpoint at path (HF directory or GGUF file), builds and
// optimises its graph and prepares it on the requested device.
func Open(path string, o Options) (*Model, error) {
	ck, err := ckpt.Open(path)
	if err != nil {
		return nil, err
	}
	return OpenCheckpoint(ck, o)
}

// OpenCheckpoint is Open for a checkpoint already opened (ckpt.OpenFS for
// one in memory). The model owns ck from then on: Close closes it, and so
// does a failure here.
func OpenCheckpoint(ck ckpt.Checkpoint, o Options) (*Model, error) {
	m, err := build(ck, o)
	if err != nil {
		ck.Close()
		return nil, err
	}
	return m, nil
}

func build(ck ckpt.Checkpoint, o Options) (*Model, error) {
	if o.Slots < 0 {
		return nil, fmt.Errorf("sequence slots must not be negative, got %d", o.Slots)
	}
	cfg := ck.Config()
	g, err := BuildGraph(cfg, o.YAMLPath)
	if err != nil {
		return nil, err
	}
	if err := BindCheckpoint(g, ck); err != nil {
		return nil, err
	}
	if err := CheckInterface(g, cfg.VocabSize); err != nil {
		if o.YAMLPath != "" {
			return nil, fmt.Errorf("%s: %w", o.YAMLPath, err)
		}
		return nil, err
	}
	res, err := passes.Run(g, passes.Options{Passes: o.Passes, Disable: o.Disable})
	if err != nil {
		return nil, err
	}
	maxPos := o.MaxContext
	if maxPos <= 0 {
		maxPos = cfg.MaxPositionEmbeddings
	}
	m := &Model{Config: cfg, Graph: g, Checkpoint: ck, Passes: res}
	switch o.Device {
	case "", "cpu":
		src := withProgress(ck, g, o.Progress)
		ex, err := cpu.NewExecutorWith(g, src, maxPos, cpu.Options{Slots: max(o.Slots, 1), F32Budget: o.F32Budget})
		if ps, ok := src.(*progressSource); ok && err == nil {
			ps.bar.Done()
		}
		if err != nil {
			return nil, fmt.Errorf("preparing the CPU executor: %w", err)
		}
		m.Backend, m.Device = cpuBackend{ex}, "cpu"
	case "cuda":
		dt := ir.BF16
		if o.DType != "" {
			if dt, err = ir.ParseDType(o.DType); err != nil || (dt != ir.BF16 && dt != ir.F32) {
				return nil, fmt.Errorf("--dtype %q: the GPU runs bf16 or f32", o.DType)
			}
		}
		// The executor reports loading itself: weights come from its
		// weight cache or are converted, several at once.
		ex, err := gpu.Compile(g, ck, gpu.Config{DType: dt, Chunk: o.Chunk, AutoChunk: o.AutoChunk, MaxContext: maxPos, Seqs: max(o.Slots, 1), BatchGEMM: o.BatchGEMM,
			Options: gpu.Options{Eager: o.Eager, Profile: o.Profile, NoWeightCache: o.NoWeightCache, CacheQuantised: o.CacheQuantised, LoadLog: o.Progress}})
		if err != nil {
			return nil, fmt.Errorf("preparing the CUDA executor: %w", err)
		}
		m.Backend, m.Device = ex, "cuda"
	default:
		return nil, fmt.Errorf("device %q: expected cpu or cuda", o.Device)
	}
	return m, nil
}

// PrefillChunk is the backend's prefill step in tokens (the GPU plan's),
// or 0 where the backend has none (the CPU takes any length).
func (m *Model) PrefillChunk() int {
	if c, ok := m.Backend.(interface{ PrefillChunk() int }); ok {
		return c.PrefillChunk()
	}
	return 0
}

// Close releases the backend and the checkpoint.
func (m *Model) Close() error {
	var err error
	if m.Backend != nil {
		err = m.Backend.Close()
	}
	if e := m.Checkpoint.Close(); err == nil {
		err = e
	}
	return err
}

// BuildGraph builds the Laguna graph for cfg from the YAML at yamlPath, or
// from the embedded laguna.yaml when yamlPath is "".
func BuildGraph(cfg *config.Config, yamlPath string) (*ir.Graph, error) {
	file, src := "laguna.yaml (embedded)", models.LagunaYAML
	if yamlPath != "" {
		b, err := os.ReadFile(yamlPath)
		if err != nil {
			return nil, fmt.Errorf("reading model file: %w", err)
		}
		file, src = yamlPath, b
	}
	return models.Build(file, src, cfg, models.BuildOptions{WeightDType: ir.F32})
}

// SyntheticTensors are the tensors of cfg's graph in the types recipe r
// gives them, with their sizes and total bytes: what ckpt.Synthetic makes
// random values for (lagc convert --synthetic, tests at a preset's shapes).
func SyntheticTensors(cfg *config.Config, r *ckpt.Recipe) ([]ckpt.TensorInfo, int64, error) {
	g, err := BuildGraph(cfg, "")
	if err != nil {
		return nil, 0, err
	}
	want, err := ExpectedTensors(g)
	if err != nil {
		return nil, 0, err
	}
	var tensors []ckpt.TensorInfo
	var total int64
	for _, e := range want {
		t := ckpt.TensorInfo{Name: e.Name, Shape: e.Shape}
		t.DType = r.TypeFor(t)
		if t.Size, err = t.DType.Bytes(t.Elements()); err != nil {
			return nil, 0, fmt.Errorf("%s: %w", t.Name, err)
		}
		total += t.Size
		tensors = append(tensors, t)
	}
	return tensors, total, nil
}

// ExpectedTensors lists the checkpoint tensors g reads: its weights that
// are not derived from others, with their shapes and, as the reason, their
// declaration in the model file.
func ExpectedTensors(g *ir.Graph) ([]ckpt.Expected, error) {
	var out []ckpt.Expected
	for _, v := range g.Weights {
		if v.From != nil {
			continue
		}
		shape, err := v.Type.Shape.Eval(nil)
		if err != nil {
			return nil, fmt.Errorf("weight %s: %w", v.Name, err)
		}
		why := v.Doc
		if why == "" {
			why = "read by the model graph"
		}
		out = append(out, ckpt.Expected{Name: v.Name, Shape: shape, Why: why})
	}
	return out, nil
}

// BindCheckpoint checks that the checkpoint holds exactly the tensors the
// graph reads, with the graph's shapes (ckpt.CheckTensors: every problem
// named with its reason), and gives each weight the checkpoint's stored
// dtype.
func BindCheckpoint(g *ir.Graph, ck ckpt.Checkpoint) error {
	want, err := ExpectedTensors(g)
	if err != nil {
		return err
	}
	if err := ckpt.CheckTensors(ck, want); err != nil {
		return fmt.Errorf("%s: %w", ck.Path(), err)
	}
	for _, v := range g.Weights {
		if v.From != nil {
			continue
		}
		ti, _ := ck.Tensor(v.Name)
		dt, err := ir.ParseDType(ti.DType.String())
		if err != nil {
			return fmt.Errorf("%s: tensor %s: lagc has no dtype %s yet", ck.Path(), v.Name, ti.DType)
		}
		v.Type.DType = dt
	}
	if err := ir.Verify(g); err != nil {
		return fmt.Errorf("graph with checkpoint dtypes: %w", err)
	}
	return nil
}

// CheckCheckpoint checks ck against Laguna's model description (the
// embedded laguna.yaml built for ck's configuration), for tools that read
// a checkpoint without running it (convert).
func CheckCheckpoint(ck ckpt.Checkpoint) error {
	g, err := BuildGraph(ck.Config(), "")
	if err != nil {
		return err
	}
	return BindCheckpoint(g, ck)
}

// CheckInterface checks what the backends and Generate rely on: the graph's
// inputs are tokens and pos, i32 [T]; it outputs logits, float [T, vocab],
// and next, i32 [T]. A model file (--yaml) may build any graph.
func CheckInterface(g *ir.Graph, vocab int) error {
	perToken := func(v *ir.Value, width int) bool {
		for _, t := range []int{1, 3} {
			n, err := v.Type.Shape.Elems(g.Env(t))
			if err != nil || n != int64(t*width) {
				return false
			}
		}
		return true
	}
	for _, in := range g.Inputs {
		if in.Name != "tokens" && in.Name != "pos" {
			return fmt.Errorf("model graph input %s: the executors feed only tokens and pos", in.Name)
		}
		if in.Type.DType != ir.I32 || !perToken(in, 1) {
			return fmt.Errorf("model graph input %s is %s: expected i32[T]", in.Name, in.Type)
		}
	}
	var logits, next *ir.Value
	for _, o := range g.Outputs {
		switch o.Name {
		case "logits":
			logits = o
		case "next":
			next = o
		}
	}
	switch {
	case logits == nil || next == nil:
		return fmt.Errorf("model graph outputs %v: expected logits and next", outputNames(g))
	case !logits.Type.DType.IsFloat() || len(logits.Type.Shape) != 2 || !perToken(logits, vocab):
		return fmt.Errorf("model graph output logits is %s: expected a float [T,%d] (vocab_size %d)", logits.Type, vocab, vocab)
	case next.Type.DType != ir.I32 || !perToken(next, 1):
		return fmt.Errorf("model graph output next is %s: expected i32[T]", next.Type)
	}
	return nil
}

func outputNames(g *ir.Graph) []string {
	var out []string
	for _, o := range g.Outputs {
		out = append(out, o.Name)
	}
	return out
}

// cpuBackend adapts the CPU executor to Backend.
type cpuBackend struct{ ex *cpu.Executor }

func (b cpuBackend) Forward(tokens []int32) ([]float32, []int32, error) {
	r, err := b.ex.Forward(tokens)
	if err != nil {
		return nil, nil, err
	}
	return r.Logits, r.Next, nil
}
func (b cpuBackend) Pos() int     { return b.ex.Pos() }
func (b cpuBackend) MaxPos() int  { return b.ex.MaxPos() }
func (b cpuBackend) Reset()       { b.ex.Reset() }
func (b cpuBackend) Close() error { return nil }

// CensusRoutes is the executor's (lagc bench --device cpu reports it).
func (b cpuBackend) CensusRoutes(tokens []int32) ([]routes.Layer, error) {
	return b.ex.CensusRoutes(tokens)
}

// progressSource reports weight loading (in stored bytes) on a bar.
type progressSource struct {
	ck  ckpt.Checkpoint
	bar *progress.Bar
}

// withProgress wraps ck so that reading g's weights advances a progress bar
// on w; with w nil it returns ck itself.
func withProgress(ck ckpt.Checkpoint, g *ir.Graph, w io.Writer) cpu.WeightSource {
	if w == nil {
		return ck
	}
	var total int64
	for _, v := range g.Weights {
		if ti, ok := ck.Tensor(v.Name); ok && v.From == nil {
			total += ti.Size
		}
	}
	return &progressSource{ck: ck, bar: progress.New(w, "loading weights", total, "B")}
}

func (p *progressSource) ReadF32(name string) ([]float32, error) {
	d, err := p.ck.ReadF32(name)
	if ti, ok := p.ck.Tensor(name); ok && err == nil {
		p.bar.Add(ti.Size)
	}
	return d, err
}

// Raw gives a tensor's stored bytes (the blocks of quantised weights the
// executors keep quantised), advancing the bar by them.
func (p *progressSource) Raw(name string) ([]byte, error) {
	b, err := p.ck.Raw(name)
	if ti, ok := p.ck.Tensor(name); ok && err == nil {
		p.bar.Add(ti.Size)
	}
	return b, err
}
