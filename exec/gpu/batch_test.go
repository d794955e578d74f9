package gpu_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"lagc/ckpt"
	"lagc/config"
	"lagc/cuda/cudatest"
	"lagc/engine"
	"lagc/internal/fixture"
	"lagc/sched"
)

// batchSeq is a teacher-forced sequence: a prompt fed as one segment, then
// decode rows one token at a time.
type batchSeq struct {
	prompt, decode []int32
}

func batchSeqs(rng *rand.Rand, n, V int) []batchSeq {
	out := make([]batchSeq, n)
	for i := range out {
		out[i].prompt = make([]int32, 2+rng.IntN(40))
		out[i].decode = make([]int32, 20+rng.IntN(20))
		for j := range out[i].prompt {
			out[i].prompt[j] = int32(rng.IntN(V))
		}
		for j := range out[i].decode {
			out[i].decode[j] = int32(rng.IntN(V))
		}
	}
	return out
}

// aloneLogits runs each sequence by itself in slot 0 of b: every decode row
// a batch of one.
func aloneLogits(t *testing.T, b engine.Batcher, seqs []batchSeq) [][]float32 {
	t.Helper()
	out := make([][]float32, len(seqs))
	for i, s := range seqs {
		b.ResetSlot(0)
		lg, _, err := b.Step([]engine.Segment{{Slot: 0, Tokens: s.prompt}})
		if err != nil {
			t.Fatal(err)
		}
		out[i] = append(out[i], lg...)
		for _, tok := range s.decode {
			lg, _, err := b.Step([]engine.Segment{{Slot: 0, Tokens: []int32{tok}}})
			if err != nil {
				t.Fatal(err)
			}
			out[i] = append(out[i], lg...)
		}
	}
	return out
}

// batchedLogits runs the sequences together in a random schedule: each
// starts when a slot is free (and not before its start step), feeds its
// prompt beside the others' decode rows, sometimes sits a step out. It
// returns every sequence's rows and the most decode rows one step held.
func batchedLogits(t *testing.T, b engine.Batcher, seqs []batchSeq, V int, rng *rand.Rand) ([][]float32, int) {
	t.Helper()
	got := make([][]float32, len(seqs))
	fed := make([]int, len(seqs)) // 0: prompt pending; k: k-1 decode rows fed
	slotOf := map[int]int{}
	next, most := 0, 0
	for step := 0; ; step++ {
		for s := 0; s < b.Slots() && next < len(seqs) && next <= step; s++ {
			busy := false
			for _, sl := range slotOf {
				busy = busy || sl == s
			}
			if !busy {
				b.ResetSlot(s)
				slotOf[next] = s
				next++
			}
		}
		if len(slotOf) == 0 && next == len(seqs) {
			break
		}
		var segs []engine.Segment
		var order []int
		rows := 0
		for i := range seqs {
			sl, ok := slotOf[i]
			if !ok || rng.IntN(6) == 0 {
				continue
			}
			tokens := seqs[i].prompt
			if fed[i] > 0 {
				tokens = seqs[i].decode[fed[i]-1 : fed[i]]
				rows++
			}
			segs = append(segs, engine.Segment{Slot: sl, Tokens: tokens})
			order = append(order, i)
		}
		if len(segs) == 0 {
			continue
		}
		most = max(most, rows)
		rng.Shuffle(len(segs), func(a, c int) { segs[a], segs[c] = segs[c], segs[a]; order[a], order[c] = order[c], order[a] })
		logits, _, err := b.Step(segs)
		if err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		r := 0
		for k, i := range order {
			n := len(segs[k].Tokens)
			got[i] = append(got[i], logits[r*V:(r+n)*V]...)
			r += n
			fed[i]++
			if fed[i] > len(seqs[i].decode) {
				delete(slotOf, i)
			}
		}
	}
	return got, most
}

// aloneAndBatched runs 14 random sequences alone, then together in 12
// slots (steps of more than the GEMVs' 8 decode rows must occur), and
// returns them with both runs' logits.
func aloneAndBatched(t *testing.T, b engine.Batcher, V int) (seqs []batchSeq, alone, got [][]float32) {
	t.Helper()
	rng := rand.New(rand.NewPCG(5, 11))
	seqs = batchSeqs(rng, 14, V)
	alone = aloneLogits(t, b, seqs)
	got, most := batchedLogits(t, b, seqs, V, rng)
	if most <= 8 {
		t.Errorf("at most %d decode rows in a step: the test should pass the GEMVs' 8", most)
	}
	return seqs, alone, got
}

func firstBitDiff(a, b []float32) (int, bool) {
	if len(a) != len(b) {
		return -1, true
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return i, true
		}
	}
	return 0, false
}

// TestBatchStepGPU: on every fixture, f32 and bf16, sequences decoding
// together in batches of 1 to 12 rows (buckets up to 16, beyond the GEMVs'
// 8 rows, with padding) give every row the same bits as the sequence
// decoding alone (its lone rows on the decode schedule, solo.go), as does
// the batched program of one row; and a sequence through the batcher alone
// (its prompt as prefill chunks bound to its slot, its rows on the decode
// schedule) agrees with the single-sequence API (Forward) within rounding.
func TestBatchStepGPU(t *testing.T) {
	for _, dir := range fixtureDirs(t) {
		for _, dt := range []string{"f32", "bf16"} {
			t.Run(filepath.Base(dir)+"/"+dt, func(t *testing.T) {
				m, ex := openGPU(t, dir, engine.Options{DType: dt, MaxContext: 256, Chunk: 64, Slots: 12})
				b, err := m.Batch()
				if err != nil {
					t.Fatal(err)
				}
				if b.Slots() != 12 {
					t.Fatalf("%d slots, want 12", b.Slots())
				}
				V := m.Config.VocabSize
				seqs, alone, got := aloneAndBatched(t, b, V)
				for i := range seqs {
					if k, diff := firstBitDiff(got[i], alone[i]); diff {
						t.Errorf("sequence %d: batched row %d differs from alone (value %d: %g vs %g)", i, k/V, k, at(got[i], k), at(alone[i], k))
					}
				}
				if len(ex.BatchGraphs()) == 0 {
					t.Error("no batch bucket replayed a graph")
				}
				// Alone, every decode row ran on the decode schedule
				// (solo.go); the batched program of one row gives the same
				// bits.
				if ex.SoloSteps() == 0 || !ex.Captured() {
					t.Errorf("%d lone decode rows on the decode schedule (captured %v)", ex.SoloSteps(), ex.Captured())
				}
				ex.SetSoloDecode(false)
				one := aloneLogits(t, b, seqs[:2])
				ex.SetSoloDecode(true)
				for i := range one {
					if k, diff := firstBitDiff(one[i], alone[i]); diff {
						t.Errorf("sequence %d: the batched program of one row differs from the decode schedule at row %d (value %d: %g vs %g)", i, k/V, k, at(one[i], k), at(alone[i], k))
					}
				}
				// The single-sequence API on sequence 0.
				ex.Reset()
				s := seqs[0]
				want, _, err := ex.Forward(s.prompt)
				if err != nil {
					t.Fatal(err)
				}
				want = slices.Clone(want)
				for _, tok := range s.decode {
					lg, _, err := ex.Forward([]int32{tok})
					if err != nil {
						t.Fatal(err)
					}
					want = append(want, lg...)
				}
				tol := 1e-4
				if dt == "bf16" {
					tol = 3e-2
				}
				if len(alone[0]) != len(want) {
					t.Fatalf("%d logits alone, %d from the decode schedule", len(alone[0]), len(want))
				}
				if e := fixture.RelL2(alone[0], want); e > tol {
					t.Errorf("the batcher alone vs Forward: relative L2 %.3g (tolerance %g)", e, tol)
				} else {
					t.Logf("the batcher alone vs Forward: relative L2 %.3g; graphs for buckets %v", e, ex.BatchGraphs())
				}
			})
		}
	}
}

func at(v []float32, k int) float32 {
	if k < 0 || k >= len(v) {
		return float32(math.NaN())
	}
	return v[k]
}

// TestBatchGEMMGPU: with LAGC_BATCH_GEMM=1 buckets above 8 rows run the
// GEMMs: rows stay within rounding of the sequence alone (not bit for bit).
func TestBatchGEMMGPU(t *testing.T) {
	dir := fixtureDirs(t)[0]
	for _, dt := range []string{"f32", "bf16"} {
		t.Run(dt, func(t *testing.T) {
			t.Setenv("LAGC_BATCH_GEMM", "1")
			m, ex := openGPU(t, dir, engine.Options{DType: dt, MaxContext: 256, Chunk: 64, Slots: 12})
			if !ex.Plan().BatchGEMM {
				t.Fatal("LAGC_BATCH_GEMM=1 did not reach the plan")
			}
			b, _ := m.Batch()
			seqs, alone, got := aloneAndBatched(t, b, m.Config.VocabSize)
			// bf16 rounds every activation: the tiny fixtures' random
			// weights amplify a 1-ulp difference (transformers' own bf16
			// is up to 7.5 from its f32 logits here, TestFixturesBF16).
			tol := 1e-4
			if dt == "bf16" {
				tol = 0.15
			}
			worst, exact := 0.0, 0
			for i := range seqs {
				if len(got[i]) != len(alone[i]) {
					t.Fatalf("sequence %d: %d logits batched, %d alone", i, len(got[i]), len(alone[i]))
				}
				e := fixture.RelL2(got[i], alone[i])
				worst = max(worst, e)
				if _, diff := firstBitDiff(got[i], alone[i]); !diff {
					exact++
				}
			}
			if worst > tol {
				t.Errorf("batched rows vs alone: worst relative L2 %.3g (tolerance %g)", worst, tol)
			}
			t.Logf("worst relative L2 %.3g; %d of %d sequences bit for bit", worst, exact, len(seqs))
		})
	}
}

// TestBatchSchedGPU: the server's scheduler on the GPU: greedy requests
// served together (up to 12 at once, prompts beside decode rows) generate
// exactly the tokens each generates served alone, and served alone their
// decode steps through StepArgmax (no logits) give the tokens StepLast's
// give.
func TestBatchSchedGPU(t *testing.T) {
	dir := filepath.Join(fixture.Root(t), "models", "tiny")
	for _, dt := range []string{"bf16", "f32"} {
		t.Run(dt, func(t *testing.T) {
			m, _ := openGPU(t, dir, engine.Options{DType: dt, MaxContext: 256, Slots: 12})
			b, err := m.Batch()
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(21, 3))
			var prompts [][]int32
			for range 16 {
				p := make([]int32, 1+rng.IntN(60))
				for k := range p {
					p[k] = int32(100 + rng.IntN(3000))
				}
				prompts = append(prompts, p)
			}
			// Each alone through StepLast only (the logits copied every
			// step), the reference for the greedy decode steps the
			// scheduler runs through StepArgmax below.
			if _, ok := b.(engine.ArgmaxBatcher); !ok {
				t.Fatal("the GPU batcher is not an engine.ArgmaxBatcher")
			}
			viaLast := make([][]int32, len(prompts))
			sl, err := sched.New(lastRowsOnly{b, b.(engine.LastRowBatcher)}, sched.Config{Vocab: m.Config.VocabSize, Budget: 512})
			if err != nil {
				t.Fatal(err)
			}
			for i, p := range prompts {
				st, err := sl.Submit(context.Background(), sched.Request{Prompt: p, MaxTokens: 40})
				if err != nil {
					t.Fatal(err)
				}
				viaLast[i] = drain(t, st)
			}
			sl.Close()
			var mu sync.Mutex
			most := 0
			s, err := sched.New(b, sched.Config{Vocab: m.Config.VocabSize, Budget: 512, OnStep: func(st sched.StepStats) {
				mu.Lock()
				most = max(most, st.DecodeRows)
				mu.Unlock()
			}})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			run := func(p []int32) *sched.Stream {
				st, err := s.Submit(context.Background(), sched.Request{Prompt: p, MaxTokens: 40})
				if err != nil {
					t.Fatal(err)
				}
				return st
			}
			alone := make([][]int32, len(prompts))
			for i, p := range prompts {
				alone[i] = drain(t, run(p))
				if !slices.Equal(alone[i], viaLast[i]) {
					t.Errorf("request %d alone (prompt %d tokens):\n decode steps on StepArgmax %v\n on StepLast             %v", i, len(p), alone[i], viaLast[i])
				}
			}
			mu.Lock()
			most = 0
			mu.Unlock()
			streams := make([]*sched.Stream, len(prompts))
			for i, p := range prompts {
				streams[i] = run(p)
			}
			for i, st := range streams {
				if got := drain(t, st); !slices.Equal(got, alone[i]) {
					t.Errorf("request %d (prompt %d tokens):\n together %v\n alone    %v", i, len(prompts[i]), got, alone[i])
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if most <= 8 {
				t.Errorf("at most %d sequences decoded in one step; expected more than 8", most)
			}
			t.Logf("%d requests, up to %d decode rows per step", len(prompts), most)
		})
	}
}

// lastRowsOnly is a Batcher with StepLast and without StepArgmax.
type lastRowsOnly struct {
	engine.Batcher
	last engine.LastRowBatcher
}

func (b lastRowsOnly) StepLast(segs []engine.Segment) ([]float32, []int32, error) {
	return b.last.StepLast(segs)
}

func drain(t *testing.T, st *sched.Stream) []int32 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var ids []int32
	for {
		toks, reason, err := st.Next(ctx)
		ids = append(ids, toks...)
		if err != nil {
			t.Fatal(err)
		}
		if reason != "" {
			if reason != sched.FinishLength {
				t.Fatalf("finished with %q after %d tokens", reason, len(ids))
			}
			return ids
		}
		if ctx.Err() != nil {
			t.Fatal("a stream did not finish in two minutes")
		}
	}
}

// TestStepLastGPU: StepLast (engine.LastRowBatcher, the server's step)
// returns each segment's last row of Step's logits bit for bit and Step's
// argmax of every row, over steps mixing decode rows with prompt chunks,
// some longer than the prefill chunk of 16 (several chunks, the last of
// one token) and some continuing a slot that has decoded. The schedule
// runs three times from empty slots: Step to compile and capture every
// bucket, then Step and StepLast, both replaying the same graphs.
func TestStepLastGPU(t *testing.T) {
	dir := fixtureDirs(t)[0]
	for _, dt := range []string{"f32", "bf16"} {
		t.Run(dt, func(t *testing.T) {
			const slots, ctx = 4, 256
			m, _ := openGPU(t, dir, engine.Options{DType: dt, MaxContext: ctx, Chunk: 16, Slots: slots})
			b, err := m.Batch()
			if err != nil {
				t.Fatal(err)
			}
			lb, ok := b.(engine.LastRowBatcher)
			if !ok {
				t.Fatal("the GPU batcher is not an engine.LastRowBatcher")
			}
			V := m.Config.VocabSize
			rng := rand.New(rand.NewPCG(13, 17))
			tokens := func(n int) []int32 { return randTokens(rng, n, V) }
			// Slot 3 starts with a decode row: a one-token prompt.
			steps := [][]engine.Segment{{{Slot: 0, Tokens: tokens(40)}, {Slot: 1, Tokens: tokens(5)}, {Slot: 2, Tokens: tokens(33)}, {Slot: 3, Tokens: tokens(1)}}}
			held := []int{40, 5, 33, 1}
			for range 12 {
				var segs []engine.Segment
				for s := range slots {
					n := 1
					switch rng.IntN(5) {
					case 0:
						continue // sits the step out
					case 1:
						n = 2 + rng.IntN(24)
					}
					if held[s]+n > ctx {
						continue
					}
					held[s] += n
					segs = append(segs, engine.Segment{Slot: s, Tokens: tokens(n)})
				}
				rng.Shuffle(len(segs), func(a, c int) { segs[a], segs[c] = segs[c], segs[a] })
				if len(segs) > 0 {
					steps = append(steps, segs)
				}
			}
			// run feeds the schedule from empty slots; it returns every
			// step's logits (all rows with Step) and argmax.
			run := func(last bool) (logits [][]float32, next [][]int32) {
				for s := range slots {
					b.ResetSlot(s)
				}
				for i, segs := range steps {
					step := b.Step
					if last {
						step = lb.StepLast
					}
					lg, nx, err := step(segs)
					if err != nil {
						t.Fatalf("step %d (last rows %v): %v", i, last, err)
					}
					logits, next = append(logits, lg), append(next, nx)
				}
				return logits, next
			}
			run(false)
			all, want := run(false)
			last, next := run(true)
			tol := 1e-4 // relative L2: the tail's one-row kernels against the chunk's
			if dt == "bf16" {
				tol = 3e-2
			}
			for i, segs := range steps {
				if len(next[i]) != len(want[i]) || len(last[i]) != len(segs)*V {
					t.Fatalf("step %d: %d argmax and %d logits for %d rows in %d segments of vocab %d", i, len(next[i]), len(last[i]), len(want[i]), len(segs), V)
				}
				row := 0
				for k, sg := range segs {
					row += len(sg.Tokens)
					got, ref := last[i][k*V:(k+1)*V], all[i][(row-1)*V:row*V]
					what := fmt.Sprintf("step %d, segment %d (slot %d, %d tokens)", i, k, sg.Slot, len(sg.Tokens))
					if len(sg.Tokens) == 1 {
						// A decode row: the same batched decode step as Step's.
						if j, diff := firstBitDiff(got, ref); diff || next[i][row-1] != want[i][row-1] {
							t.Errorf("%s: logit %d is %g, Step's %g; argmax %d, Step's %d", what, j, at(got, j), at(ref, j), next[i][row-1], want[i][row-1])
						}
						continue
					}
					// A prompt segment's last row comes from its one-row tail
					// (lower.AtTail): Step's within rounding, and its argmax
					// where Step's top two logits are further apart than that.
					if e := fixture.RelL2(got, ref); !(e <= tol) {
						t.Errorf("%s: last row %.3g from Step's in relative L2 (> %g)", what, e, tol)
					}
					if d := maxAbsDiff(got, ref); next[i][row-1] != want[i][row-1] && top2Gap(ref) > 4*d {
						t.Errorf("%s: argmax %d, Step's %d (top-2 gap %.3g, logits within %.3g)", what, next[i][row-1], want[i][row-1], top2Gap(ref), d)
					}
				}
			}
		})
	}
}

// top2Gap is the difference of the two largest values of v.
func top2Gap(v []float32) float64 {
	a, b := math.Inf(-1), math.Inf(-1)
	for _, x := range v {
		switch f := float64(x); {
		case f > a:
			a, b = f, a
		case f > b:
			b = f
		}
	}
	return a - b
}

// randTokens is n token ids drawn from rng below V.
func randTokens(rng *rand.Rand, n, V int) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(rng.IntN(V))
	}
	return out
}

// TestBatchStepS21GPU is TestBatchStepGPU at Laguna-S-2.1's shapes, which
// no fixture reaches: the first two layers (the dense one, K 12288 in its
// down; a 72-head MoE one, K 9216 in o_proj) with synthetic q4_k_m,
// iq4_xs (4-bit attention too) and bf16 weights, bf16 activations. Rows
// decoded together in buckets of 1 to 16 must be the bits of each
// sequence alone: with K that long the GEMVs split it, and a split that
// followed the row count (quantised, 5-8 rows) or an output's own rows
// (bf16 k, v and gate) before 2026-12-04 added a row's sums in another
// order; and head_dim 128 takes qk_norm_rope's fast path in a batched
// step, whose roundings differed from the decode attention's until
// 2026-12-04 (rope.cu's rope_pair).
func TestBatchStepS21GPU(t *testing.T) {
	cudatest.Device(t)
	full, err := config.Preset("laguna-s-2.1")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := full.FirstLayers(2)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Heads(1)*cfg.HeadDim != 9216 || cfg.IntermediateSize != 12288 {
		t.Fatalf("layer 1 has %d q heads of %d, the dense MLP %d: not the shapes this test is for", cfg.Heads(1), cfg.HeadDim, cfg.IntermediateSize)
	}
	for _, recipe := range []string{"q4_k_m", "iq4_xs", "bf16"} {
		t.Run(recipe, func(t *testing.T) { batchStepSynthetic(t, cfg, recipe) })
	}
}

// syntheticCheckpoint is cfg's random weights (seed) in recipe's types,
// as lagc convert --synthetic writes them, and the recipe.
func syntheticCheckpoint(t *testing.T, cfg *config.Config, name, recipe string, seed uint64) (ckpt.Checkpoint, *ckpt.Recipe) {
	t.Helper()
	r, err := ckpt.ParseRecipe(recipe)
	if err != nil {
		t.Fatal(err)
	}
	tensors, _, err := engine.SyntheticTensors(cfg, r)
	if err != nil {
		t.Fatal(err)
	}
	ck, err := ckpt.Synthetic(cfg, name, tensors, seed)
	if err != nil {
		t.Fatal(err)
	}
	return ck, r
}

// batchStepSynthetic is TestBatchStepS21GPU's check on cfg's synthetic
// weights of recipe.
func batchStepSynthetic(t *testing.T, cfg *config.Config, recipe string) {
	ck, _ := syntheticCheckpoint(t, cfg, "synthetic:laguna-s-2.1", recipe, 7)
	m, err := engine.OpenCheckpoint(ck, engine.Options{Device: "cuda", DType: "bf16", MaxContext: 256, Chunk: 64, Slots: 12})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	b, err := m.Batch()
	if err != nil {
		t.Fatal(err)
	}
	V := cfg.VocabSize
	seqs, alone, got := aloneAndBatched(t, b, V)
	for i := range seqs {
		if k, diff := firstBitDiff(got[i], alone[i]); diff {
			t.Errorf("sequence %d: batched row %d differs from alone (value %d: %g vs %g)", i, k/V, k, at(got[i], k), at(alone[i], k))
		}
	}
}
