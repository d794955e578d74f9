// Package exec loads a Laguna checkpoint into an executable model (YAML ->
// ir.Graph -> passes -> backend) and runs generation on any backend: the
// pure-Go CPU reference (exec/cpu) or the GPU (exec/cuda).
package exec

import (
	"fmt"
	"os"

	"lagc/ckpt"
	"lagc/exec/cpu"
	"lagc/ir"
	"lagc/models"
	"lagc/passes"
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
	Device     string   // "cpu" (default); "cuda" once the GPU executor is wired
	YAMLPath   string   // model description; "" uses the embedded laguna.yaml
	Passes     []string // pass pipeline (nil: passes.DefaultPipeline)
	Disable    []string // passes to skip
	MaxContext int      // KV cache length; 0: the model's max_position_embeddings
}

// Model is a loaded checkpoint ready to run.
type Model struct {
	Config     *models.Config
	Graph      *ir.Graph
	Checkpoint ckpt.Checkpoint
	Passes     *passes.Result
	Backend    Backend
	Device     string
}

// Open loads the checkpoint at path (HF directory or GGUF file), builds and
// optimises its graph and prepares it on the requested device.
func Open(path string, o Options) (*Model, error) {
	ck, err := ckpt.Open(path)
	if err != nil {
		return nil, err
	}
	m, err := build(ck, o)
	if err != nil {
		ck.Close()
		return nil, err
	}
	return m, nil
}

func build(ck ckpt.Checkpoint, o Options) (*Model, error) {
	cfg := ck.Config()
	g, err := BuildGraph(cfg, o.YAMLPath)
	if err != nil {
		return nil, err
	}
	if err := BindCheckpoint(g, ck); err != nil {
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
		ex, err := cpu.NewExecutor(g, ck, maxPos)
		if err != nil {
			return nil, fmt.Errorf("preparing the CPU executor: %w", err)
		}
		m.Backend, m.Device = cpuBackend{ex}, "cpu"
	default:
		return nil, fmt.Errorf("device %q is not available: the GPU executor is not wired into `lagc run` yet; use --device cpu", o.Device)
	}
	return m, nil
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
func BuildGraph(cfg *models.Config, yamlPath string) (*ir.Graph, error) {
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

// BindCheckpoint checks every graph weight against the checkpoint (present,
// same shape) and gives it the checkpoint's stored dtype.
func BindCheckpoint(g *ir.Graph, ck ckpt.Checkpoint) error {
	for _, v := range g.Weights {
		if v.From != nil {
			continue
		}
		ti, ok := ck.Tensor(v.Name)
		if !ok {
			return fmt.Errorf("%s: checkpoint has no tensor %s that the graph reads", ck.Path(), v.Name)
		}
		if want := ir.Consts(ti.Shape...); !want.Equal(v.Type.Shape) {
			return fmt.Errorf("%s: tensor %s is %v, the graph expects %s", ck.Path(), v.Name, ti.Shape, v.Type.Shape)
		}
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
