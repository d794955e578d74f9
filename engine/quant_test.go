package engine

import (
	"os"
	"path/filepath"
	"testing"

	"lagc/ckpt"
	"lagc/exec/cpu"
	"lagc/internal/fixture"
	"lagc/models"
	"lagc/passes"
	"lagc/quant"
)

// f32Source hides a checkpoint's stored bytes: the executor then reads
// every weight as float32 (ckpt.ReadF32 dequantises), the reference a
// quantised run is held to.
type f32Source struct{ ck ckpt.Checkpoint }

func (s f32Source) ReadF32(name string) ([]float32, error) { return s.ck.ReadF32(name) }

// writeQuantised converts the checkpoint at dir into a GGUF quantised by
// recipe and returns its path.
func writeQuantised(t *testing.T, dir, recipe string) string {
	t.Helper()
	ck, err := ckpt.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	r, err := ckpt.ParseRecipe(recipe)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), recipe+".gguf")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := ckpt.WriteGGUF(f, ck, ckpt.WriteOptions{Recipe: r}); err != nil {
		f.Close()
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// cpuExecutor builds ck's graph with the default passes less disable and
// prepares it on the CPU over src, keeping 16-bit matrices as stored.
func cpuExecutor(t *testing.T, ck ckpt.Checkpoint, src cpu.WeightSource, disable []string) *cpu.Executor {
	t.Helper()
	g, err := BuildGraph(ck.Config(), "")
	if err != nil {
		t.Fatal(err)
	}
	if err := BindCheckpoint(g, ck); err != nil {
		t.Fatal(err)
	}
	if _, err := passes.Run(g, passes.Options{Disable: disable}); err != nil {
		t.Fatal(err)
	}
	ex, err := cpu.NewExecutorWith(g, src, 64, cpu.Options{F32Budget: -1})
	if err != nil {
		t.Fatal(err)
	}
	return ex
}

// quantRecipes are the recipes lagc can write: every type the quant
// package quantises to, and the mixed ones.
func quantRecipes() []string {
	var out []string
	for _, name := range ckpt.RecipeNames() {
		if r, err := ckpt.ParseRecipe(name); err == nil && r.Base.Quantized() {
			out = append(out, name)
		}
	}
	return out
}

// compareStored runs ck on its stored blocks and through the f32 executor
// on the same weights dequantised (ckpt.ReadF32), fused and unfused: the
// executor converts a block of rows at a time and then computes exactly as
// on f32, so the logits of a prefill and of each greedy decode step must be
// bitwise equal (stricter than the 1e-3 a quantised reference is usually
// held to; the greedy tokens are then equal too).
func compareStored(t *testing.T, ck ckpt.Checkpoint, prompt []int32) {
	for _, pipeline := range []struct {
		name    string
		disable []string
	}{{"fused", nil}, {"unfused", passes.FusionPasses}} {
		t.Run(pipeline.name, func(t *testing.T) {
			q := cpuExecutor(t, ck, ck, pipeline.disable)
			ref := cpuExecutor(t, ck, f32Source{ck}, pipeline.disable)
			types := q.WeightTypes()
			blocks := 0
			for ty, n := range types {
				if ty.Quantized() {
					blocks += n
				}
			}
			if blocks == 0 {
				t.Fatalf("no matrix kept quantised: %v", types)
			}
			if rt := ref.WeightTypes(); len(rt) != 1 || rt[quant.F32] == 0 {
				t.Fatalf("the reference keeps %v, want f32 only", rt)
			}
			requireSameRuns(t, q, ref, prompt, 6)
			t.Logf("stored types %v", types)
		})
	}
}

// TestQuantisedFixtures: every llama-quantize file under testdata/quant
// (each block type, and the Q4_K_M recipe) on its blocks.
func TestQuantisedFixtures(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(fixture.Root(t), "testdata", "quant", "*.gguf"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no quantised fixtures under testdata/quant: %v", err)
	}
	for _, path := range files {
		t.Run(filepath.Base(path), func(t *testing.T) {
			ck, err := ckpt.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer ck.Close()
			compareStored(t, ck, []int32{1, 5, 9, 13, 17, 21, 25, 29})
		})
	}
}

// TestQuantisedRecipes: the transformers fixtures converted by lagc with
// every recipe it writes (all of them on the first fixture; Q8_0 and
// Q4_K_M on each, for their graph variants).
func TestQuantisedRecipes(t *testing.T) {
	recipes := quantRecipes()
	if len(recipes) == 0 {
		t.Fatal("lagc writes no quantised recipe")
	}
	for i, dir := range fixtureDirs(t) {
		g := readGolden(t, dir)
		for _, recipe := range recipes {
			if i > 0 && recipe != "q8_0" && recipe != "q4_k_m" {
				continue
			}
			t.Run(filepath.Base(dir)+"/"+recipe, func(t *testing.T) {
				ck, err := ckpt.Open(writeQuantised(t, dir, recipe))
				if err != nil {
					t.Fatal(err)
				}
				defer ck.Close()
				compareStored(t, ck, g.PromptIDs)
			})
		}
	}
}

func requireSameBits(t *testing.T, step int, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("step %d: %d logits, want %d", step, len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("step %d: logit %d is %g on the quantised blocks, %g on the dequantised weights (max diff %.3g)",
				step, i, got[i], want[i], maxAbsDiff(got, want))
		}
	}
}

// TestStoredBF16EqualsExpanded runs the bundled model (bf16) with its
// matrices kept as stored bf16 and expanded to f32 at load: the same
// logits, bit for bit.
func TestStoredBF16EqualsExpanded(t *testing.T) {
	ck, _, err := models.OpenBundled()
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	kept := cpuExecutor(t, ck, ck, nil)
	if n := kept.WeightTypes()[quant.BF16]; n == 0 {
		t.Fatalf("no matrix kept in bf16: %v", kept.WeightTypes())
	}
	expanded := cpuExecutor(t, ck, f32Source{ck}, nil)
	requireSameRuns(t, kept, expanded, []int32{2, 100, 200, 300, 400, 500, 7}, 4)
}

// requireSameRuns feeds prompt to a and b, then steps-1 greedy tokens of a,
// and requires bitwise equal logits at every step.
func requireSameRuns(t *testing.T, a, b *cpu.Executor, prompt []int32, steps int) {
	t.Helper()
	tokens := prompt
	for step := 0; step < steps; step++ {
		ra, err := a.Forward(tokens)
		if err != nil {
			t.Fatal(err)
		}
		rb, err := b.Forward(tokens)
		if err != nil {
			t.Fatal(err)
		}
		requireSameBits(t, step, ra.Logits, rb.Logits)
		tokens = []int32{ra.Next[len(ra.Next)-1]}
	}
}
