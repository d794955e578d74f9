package gpu

import (
	"fmt"
	"math"
	"testing"

	"lagc/config"
	"lagc/exec/cpu"
	"lagc/ir"
	"lagc/lower"
	"lagc/models"
	"lagc/passes"
)

// copiesSrc uses the ops Laguna's graph does not: split and concat of
// activations, and a reshape of a weight (a copy, where a reshape of an
// activation is a view).
const copiesSrc = `graph copies
sym T
input %tokens: i32[T]
input %pos: i32[T]
weight @emb: f32[16,8]
weight @w: f32[8,8]
weight @w3: f32[2,4,8]
weight @head: f32[16,8]
%e: f32[T,8] = embedding(%tokens, @emb)
%y: f32[T,8] = matmul(%e, @w)
%a: f32[T,3], %b: f32[T,5] = split(%y) {axis=1, sizes=[3,5]}
%c: f32[T,8] = concat(%b, %a) {axis=1}
%r: f32[8,8] = reshape(@w3) {shape=[8,8]}
%z: f32[T,8] = matmul(%c, %r)
%logits: f32[T,16] = matmul(%z, @head)
%next: i32[T] = argmax(%logits)
output %logits, %next
`

// opSample is a graph for the op tests: between them the samples use
// every op of the op table.
type opSample struct {
	name  string
	graph func(t testing.TB) *ir.Graph
}

func tinyPresetGraph(pipeline []string) func(t testing.TB) *ir.Graph {
	return func(t testing.TB) *ir.Graph {
		t.Helper()
		cfg, err := config.Preset("synthetic-tiny")
		if err != nil {
			t.Fatal(err)
		}
		g, err := models.Build("laguna.yaml", models.LagunaYAML, cfg, models.BuildOptions{WeightDType: ir.F32})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := passes.Run(g, passes.Options{Passes: pipeline}); err != nil {
			t.Fatal(err)
		}
		return g
	}
}

var opSamples = []opSample{
	{"tiny-unfused", tinyPresetGraph([]string{"shapes", "cse", "dce", "memplan"})},
	{"tiny-fused", tinyPresetGraph(nil)},
	{"copies", func(t testing.TB) *ir.Graph {
		t.Helper()
		g, err := ir.Parse(copiesSrc)
		if err != nil {
			t.Fatal(err)
		}
		return g
	}},
}

// hashWeights are weights made from a hash of their name and index, small
// enough to keep activations in range through a few layers; norm weights
// are near 1.
type hashWeights map[string][]int

func (h hashWeights) ReadF32(name string) ([]float32, error) {
	shape, ok := h[name]
	if !ok {
		return nil, fmt.Errorf("no weight %s", name)
	}
	n, k := 1, shape[len(shape)-1]
	for _, d := range shape {
		n *= d
	}
	seed := uint32(2166136261)
	for _, c := range []byte(name) {
		seed = (seed ^ uint32(c)) * 16777619
	}
	scale := float32(1 / math.Sqrt(float64(k)))
	out := make([]float32, n)
	for i := range out {
		x := seed ^ uint32(i)*0x9e3779b9
		x ^= x >> 16
		x *= 0x85ebca6b
		x ^= x >> 13
		u := float32(x>>8)/float32(1<<24)*2 - 1
		out[i] = scale * u
		if len(shape) == 1 {
			out[i] = 1 + 0.1*u
		}
	}
	return out, nil
}

func weightsOf(g *ir.Graph) hashWeights {
	h := hashWeights{}
	for _, w := range g.Weights {
		if w.From != nil {
			continue
		}
		s, err := w.Type.Shape.Eval(nil)
		if err == nil {
			h[w.Name] = s
		}
	}
	return h
}

// TestOpsGPU runs every op sample on the GPU and the CPU executor, in f32,
// and compares the logits of a prefill (a full chunk, then a shorter one)
// and of decode steps.
func TestOpsGPU(t *testing.T) {
	k, _ := gpu(t)
	const chunk, ctx = 6, 32
	toks := []int32{1, 5, 3, 7, 2, 9, 4, 11, 6}
	for _, s := range opSamples {
		t.Run(s.name, func(t *testing.T) {
			g := s.graph(t)
			ws := weightsOf(g)
			ref, err := cpu.NewExecutor(g, ws, ctx)
			if err != nil {
				t.Fatal(err)
			}
			ex, err := Compile(g, ws, Config{DType: ir.F32, Chunk: chunk, MaxContext: ctx, Options: Options{Device: k.Dev}})
			if err != nil {
				t.Fatal(err)
			}
			defer ex.Close()
			for _, in := range [][]int32{toks, {toks[0]}, {toks[1]}} {
				want, err := ref.Forward(in)
				if err != nil {
					t.Fatal(err)
				}
				got, _, err := ex.Forward(in)
				if err != nil {
					t.Fatal(err)
				}
				checkClose(t, fmt.Sprintf("%d tokens", len(in)), got, want.Logits, 1e-4)
			}
		})
	}
}

// TestOpSamplesLower: what TestOpsGPU runs, checked without a GPU: the
// CPU executor runs each sample, and each lowers in both dtypes and runs
// dry.
func TestOpSamplesLower(t *testing.T) {
	for _, s := range opSamples {
		g := s.graph(t)
		ref, err := cpu.NewExecutor(g, weightsOf(g), 32)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ref.Forward([]int32{1, 2, 3}); err != nil {
			t.Fatalf("%s on the CPU: %v", s.name, err)
		}
		for _, dt := range []ir.DType{ir.F32, ir.BF16} {
			p, err := lower.Lower(s.graph(t), lower.Options{DType: dt, Chunk: 6, MaxContext: 32})
			if err != nil {
				t.Fatalf("%s %s: %v", s.name, dt, err)
			}
			if _, _, err := DryRun(p); err != nil {
				t.Fatalf("%s %s: %v", s.name, dt, err)
			}
		}
	}
}
