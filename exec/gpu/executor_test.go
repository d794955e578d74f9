package gpu_test

// End-to-end tests of the CUDA executor on the transformers fixtures
// (testdata/fixtures): the whole pipeline, YAML -> passes -> lower ->
// exec/gpu, through engine.Open. They need a GPU (skipped without one, failed
// with LAGC_REQUIRE_GPU=1).

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/pprof/profile"

	"lagc/ckpt"
	"lagc/config"
	"lagc/cuda/cudatest"
	"lagc/engine"
	"lagc/exec/gpu"
	"lagc/internal/fixture"
	"lagc/ir"
	"lagc/lower"
	"lagc/models"
	"lagc/passes"
)

// nearTie is the top-2 logit gap under which bf16 may pick the other token.
const nearTie = 0.05

func fixtureDirs(t testing.TB) []string { return fixture.Dirs(t) }

func readGolden(t testing.TB, dir string) *fixture.Golden { return fixture.Read(t, dir) }

func openGPU(t *testing.T, dir string, o engine.Options) (*engine.Model, *gpu.Executor) {
	t.Helper()
	cudatest.Device(t) // skip (or fail) without a GPU
	o.Device = "cuda"
	m, err := engine.Open(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	ex, ok := m.Backend.(*gpu.Executor)
	if !ok {
		t.Fatalf("backend is %T", m.Backend)
	}
	return m, ex
}

func maxAbsDiff(a, b []float32) float64 {
	d := 0.0
	for i := range a {
		d = math.Max(d, math.Abs(float64(a[i])-float64(b[i])))
	}
	return d
}

// TestFixturesF32: the f32 mode matches transformers within 1e-3 at every
// prompt position and gives the identical greedy continuation, whole-prompt
// prefill, chunks crossing the window, and token by token.
func TestFixturesF32(t *testing.T) {
	for _, dir := range fixtureDirs(t) {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			g := readGolden(t, dir)
			for _, chunk := range []int{0, 3, 1} {
				m, ex := openGPU(t, dir, engine.Options{DType: "f32", Chunk: chunk})
				res, err := m.Generate(context.Background(), g.PromptIDs, engine.GenOptions{MaxTokens: len(g.Greedy), Logits: true})
				if err != nil {
					t.Fatal(err)
				}
				worst := 0.0
				for p := range g.PromptLogits {
					worst = math.Max(worst, maxAbsDiff(res.PromptRows[p], g.PromptLogits[p]))
				}
				if worst > 1e-3 {
					t.Errorf("chunk %d: prompt logits differ from transformers by up to %.3g (> 1e-3)", chunk, worst)
				}
				if !slices.Equal(res.PromptNext, g.Argmax) {
					t.Errorf("chunk %d: prompt argmax\n got %v\nwant %v", chunk, res.PromptNext, g.Argmax)
				}
				if !slices.Equal(res.Generated, g.Greedy) {
					t.Errorf("chunk %d: greedy\n got %v\nwant %v", chunk, res.Generated, g.Greedy)
				}
				if !ex.Captured() {
					t.Errorf("chunk %d: decode never replayed a captured graph", chunk)
				}
				t.Logf("chunk %d: max |logit diff| %.2g", chunk, worst)
			}
		})
	}
}

// hfBF16 is what transformers 5.17 itself does in bf16 on these fixtures
// (on the H200, eager attention; testdata/hf_bf16_check.py): the largest
// distance of its prompt logits to its own f32 goldens, and the first greedy
// step where it leaves them. Expert routing flips make bf16 leave the f32
// path early even where the top-2 logit gap is far above 0.05, so the
// fixtures' f32 gaps alone cannot tell a bf16 near-tie from a bug.
var hfBF16 = map[string]struct {
	maxDiff  float64
	firstDiv int
}{
	"tiny_fused_native_names":   {1.887, 2},
	"tiny_sharded_perelem_tied": {1.887, 2},
	"tiny_yarn_perhead":         {7.551, 7},
}

// TestFixturesBF16: bf16 is a rounding of the f32 reference, checked
// three ways. The first prompt rows, before errors compound, are within
// bf16 rounding (relative L2 under 3%). The prompt logits stay within
// twice transformers' own bf16 distance: these tiny random-weight models
// amplify a one-ulp difference a thousandfold over 37 positions, so two bf16
// implementations rounding at different points (fused kernels skip
// intermediate roundings) land at distances of the same order, not in the
// same order. The greedy continuation is identical up to where
// transformers' bf16 leaves it, the first reference near-tie (gap < 0.05),
// or the first step whose reference gap is below this run's error on the
// last prompt row (bf16 noise can flip it), whichever comes first.
func TestFixturesBF16(t *testing.T) {
	for _, dir := range fixtureDirs(t) {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			g := readGolden(t, dir)
			hf, ok := hfBF16[filepath.Base(dir)]
			if !ok {
				t.Fatalf("no transformers bf16 figures for this fixture")
			}
			m, _ := openGPU(t, dir, engine.Options{DType: "bf16"})
			res, err := m.Generate(context.Background(), g.PromptIDs, engine.GenOptions{MaxTokens: len(g.Greedy), Logits: true})
			if err != nil {
				t.Fatal(err)
			}
			worst := 0.0
			for p := range g.PromptLogits {
				worst = math.Max(worst, maxAbsDiff(res.PromptRows[p], g.PromptLogits[p]))
				if e := fixture.RelL2(res.PromptRows[p], g.PromptLogits[p]); p < 4 && e > 0.03 {
					t.Errorf("prompt row %d: relative L2 %.3g from the f32 reference, beyond bf16 rounding", p, e)
				}
			}
			if worst > 2*hf.maxDiff {
				t.Errorf("prompt logits differ from the f32 reference by up to %.3g, over twice transformers bf16's %.3g", worst, hf.maxDiff)
			}
			last := len(g.PromptLogits) - 1
			noise := maxAbsDiff(res.PromptRows[last], g.PromptLogits[last])
			tie, noisy := len(g.Greedy), len(g.Greedy)
			for i, gap := range g.GreedyGaps {
				if gap < nearTie && tie == len(g.Greedy) {
					tie = i
				}
				if gap < noise && noisy == len(g.Greedy) {
					noisy = i
				}
			}
			upto := min(tie, hf.firstDiv, noisy)
			if !slices.Equal(res.Generated[:upto], g.Greedy[:upto]) {
				t.Errorf("greedy (compared up to step %d)\n got %v\nwant %v", upto, res.Generated, g.Greedy)
			}
			first := len(g.Greedy)
			for i := range g.Greedy {
				if res.Generated[i] != g.Greedy[i] {
					first = i
					break
				}
			}
			mism := 0
			for p, id := range res.PromptNext {
				if id != g.Argmax[p] {
					mism++
				}
			}
			t.Logf("bf16: max |logit diff| %.3g (transformers bf16 %.3g), %.3g on the last prompt row; greedy leaves the reference at step %d (transformers bf16 at %d, first reference near-tie %d, first gap below the noise %d); %d prompt argmax changes",
				worst, hf.maxDiff, noise, first, hf.firstDiv, tie, noisy, mism)
		})
	}
}

// decodeRun feeds prompt (prefill, or one token at a time) and then greedy
// decodes n tokens through the backend, returning the tokens, each decode
// step's logits and their top-2 gaps.
func decodeRun(t *testing.T, b engine.Backend, prompt []int32, tokenByToken bool, n int) ([]int32, [][]float32, []float64) {
	t.Helper()
	b.Reset()
	var next []int32
	var err error
	if tokenByToken {
		for _, id := range prompt {
			if _, next, err = b.Forward([]int32{id}); err != nil {
				t.Fatal(err)
			}
		}
	} else if _, next, err = b.Forward(prompt); err != nil {
		t.Fatal(err)
	}
	tok := next[len(next)-1]
	var out []int32
	var rows [][]float32
	var gaps []float64
	for i := 0; i < n; i++ {
		out = append(out, tok)
		logits, nx, err := b.Forward([]int32{tok})
		if err != nil {
			t.Fatal(err)
		}
		rows = append(rows, logits)
		gaps = append(gaps, gap(logits))
		tok = nx[0]
	}
	return out, rows, gaps
}

func gap(row []float32) float64 {
	a, b := math.Inf(-1), math.Inf(-1)
	for _, x := range row {
		v := float64(x)
		if v > a {
			a, b = v, a
		} else if v > b {
			b = v
		}
	}
	return a - b
}

// TestGraphReplayBitwise: replaying the captured decode graph gives bitwise
// the logits of launching the same kernels eagerly.
func TestGraphReplayBitwise(t *testing.T) {
	dir := fixtureDirs(t)[len(fixtureDirs(t))-1]
	g := readGolden(t, dir)
	for _, dt := range []string{"f32", "bf16"} {
		t.Run(dt, func(t *testing.T) {
			_, eager := openGPU(t, dir, engine.Options{DType: dt, Eager: true})
			_, graph := openGPU(t, dir, engine.Options{DType: dt})
			ta, la, _ := decodeRun(t, eager, g.PromptIDs, false, 40)
			tb, lb, _ := decodeRun(t, graph, g.PromptIDs, false, 40)
			if eager.Captured() || !graph.Captured() {
				t.Fatalf("captured: eager %v, graph %v", eager.Captured(), graph.Captured())
			}
			if !slices.Equal(ta, tb) {
				t.Fatalf("tokens differ:\neager %v\ngraph %v", ta, tb)
			}
			for i := range la {
				for j := range la[i] {
					if math.Float32bits(la[i][j]) != math.Float32bits(lb[i][j]) {
						t.Fatalf("step %d logit %d: eager %v, graph %v", i, j, la[i][j], lb[i][j])
					}
				}
			}
		})
	}
}

// TestForwardArgmax: the greedy step (engine.GreedyStepper) gives the
// tokens Forward gives, says the picked logit is finite, and StepLogits
// returns Forward's row bit for bit; engine.Generate's greedy decoding on
// the GPU goes through it.
func TestForwardArgmax(t *testing.T) {
	dir := fixtureDirs(t)[len(fixtureDirs(t))-1]
	g := readGolden(t, dir)
	for _, dt := range []string{"f32", "bf16"} {
		t.Run(dt, func(t *testing.T) {
			m, ex := openGPU(t, dir, engine.Options{DType: dt})
			if _, ok := m.Backend.(engine.GreedyStepper); !ok {
				t.Fatal("the GPU backend is not an engine.GreedyStepper")
			}
			want, rows, _ := decodeRun(t, ex, g.PromptIDs, false, 24)
			ex.Reset()
			_, next, err := ex.Forward(g.PromptIDs)
			if err != nil {
				t.Fatal(err)
			}
			tok := next[len(next)-1]
			for i := range want {
				if tok != want[i] {
					t.Fatalf("step %d: token %d, Forward's path %d", i, tok, want[i])
				}
				nx, finite, err := ex.ForwardArgmax(tok)
				if err != nil || !finite {
					t.Fatalf("step %d: finite %v, %v", i, finite, err)
				}
				row, err := ex.StepLogits()
				if err != nil {
					t.Fatal(err)
				}
				for j := range row {
					if math.Float32bits(row[j]) != math.Float32bits(rows[i][j]) {
						t.Fatalf("step %d logit %d: %v, Forward's %v", i, j, row[j], rows[i][j])
					}
				}
				tok = nx
			}
			if _, _, err := ex.ForwardArgmax(int32(m.Config.VocabSize)); err == nil {
				t.Fatal("a token outside the vocabulary was accepted")
			}
		})
	}
}

// TestDecodeQueued: n greedy steps queued back to back (DecodeQueued) end
// on the token n DecodeNext calls end on, from the prompt's argmax, from a
// token the device already holds and from one it does not (a new
// sequence), eager and graph-replayed, and the sequence goes on from there
// as it would have; StepLogits then gives the last queued step's row as
// Forward computes it; bad counts and a full context are refused.
func TestDecodeQueued(t *testing.T) {
	dir := fixtureDirs(t)[len(fixtureDirs(t))-1]
	g := readGolden(t, dir)
	for _, eager := range []bool{true, false} {
		t.Run(fmt.Sprintf("eager=%v", eager), func(t *testing.T) {
			_, ex := openGPU(t, dir, engine.Options{DType: "bf16", Eager: eager})
			want, rows, _ := decodeRun(t, ex, g.PromptIDs, false, 24)
			ex.Reset()
			if _, _, err := ex.Forward(g.PromptIDs); err != nil {
				t.Fatal(err)
			}
			got, err := ex.DecodeQueued(want[0], 10)
			if err != nil || got != want[10] {
				t.Fatalf("10 queued steps from the prompt: %d, %v; DecodeNext's path %d", got, err, want[10])
			}
			if got, err = ex.DecodeNext(want[10]); err != nil || got != want[11] {
				t.Fatalf("a step after them: %d, %v; want %d", got, err, want[11])
			}
			if got, err = ex.DecodeQueued(want[11], 1); err != nil || got != want[12] {
				t.Fatalf("one queued step: %d, %v; want %d", got, err, want[12])
			}
			row, err := ex.StepLogits()
			if err != nil {
				t.Fatal(err)
			}
			for j := range row {
				if math.Float32bits(row[j]) != math.Float32bits(rows[11][j]) {
					t.Fatalf("the queued step's logit %d: %v, Forward's %v", j, row[j], rows[11][j])
				}
			}
			// A token the device does not hold: the steps of another
			// sequence from the prompt.
			ex.Reset()
			if _, _, err := ex.Forward(g.PromptIDs); err != nil {
				t.Fatal(err)
			}
			if _, err := ex.DecodeNext(want[0]); err != nil {
				t.Fatal(err)
			}
			if got, err = ex.DecodeQueued(want[1], 5); err != nil || got != want[6] {
				t.Fatalf("5 queued steps from a token fed by the host: %d, %v; want %d", got, err, want[6])
			}
			if _, err := ex.DecodeQueued(want[6], 0); err == nil {
				t.Fatal("0 queued steps were accepted")
			}
			if _, err := ex.DecodeQueued(want[6], ex.Plan().MaxContext); err == nil {
				t.Fatal("steps past the context length were accepted")
			}
		})
	}
}

// TestDecodeAheadGPU: greedy steps decoded one step ahead (the default)
// give the tokens of steps decoded one at a time (SetDecodeAhead(false)),
// eager and graph-replayed; a step queued ahead and then not fed (the
// caller feeds another token, a prompt chunk, or rewinds) leaves the
// sequence as if it had never run: what follows equals the one-at-a-time
// executor's bit for bit; Rewind refuses once the dropped step has wrapped
// a sliding ring and allows it before.
// (TestForwardArgmax checks StepLogits after each step decoded ahead.)
func TestDecodeAheadGPU(t *testing.T) {
	dir := fixtureDirs(t)[len(fixtureDirs(t))-1]
	g := readGolden(t, dir)
	prompt := g.PromptIDs[:2]
	for _, eager := range []bool{true, false} {
		t.Run(fmt.Sprintf("eager=%v", eager), func(t *testing.T) {
			_, ex := openGPU(t, dir, engine.Options{DType: "bf16", Eager: eager})
			ahead := ex.SetDecodeAhead
			// start feeds the prompt and n greedy steps (ForwardArgmax),
			// returning the last argmax.
			start := func(n int) int32 {
				t.Helper()
				ex.Reset()
				_, next, err := ex.Forward(prompt)
				if err != nil {
					t.Fatal(err)
				}
				tok := next[len(next)-1]
				for i := 0; i < n; i++ {
					if tok, _, err = ex.ForwardArgmax(tok); err != nil {
						t.Fatal(err)
					}
				}
				return tok
			}
			greedy := func(tok int32, n int) []int32 {
				t.Helper()
				var out []int32
				for i := 0; i < n; i++ {
					var err error
					if tok, err = ex.DecodeNext(tok); err != nil {
						t.Fatal(err)
					}
					out = append(out, tok)
				}
				return out
			}
			forward := func(toks ...int32) []float32 {
				t.Helper()
				lg, _, err := ex.Forward(toks)
				if err != nil {
					t.Fatal(err)
				}
				return lg
			}
			same := func(what string, a, b []float32) {
				t.Helper()
				for j := range a {
					if math.Float32bits(a[j]) != math.Float32bits(b[j]) {
						t.Fatalf("%s: logit %d: %v decoding ahead, %v one step at a time", what, j, a[j], b[j])
					}
				}
			}
			lb, _ := ex.Plan().Decode.Value("logits")
			V := int32(lb.Shape[len(lb.Shape)-1])
			other := func(tok int32) int32 { return (tok + 1) % V }

			ahead(false)
			if ex.DecodesAhead() {
				t.Fatal("switched off, and greedy steps still run ahead")
			}
			wantToks := greedy(start(0), 30)
			ahead(true)
			if !ex.DecodesAhead() {
				t.Fatal("greedy steps do not run ahead: no pinned host memory mapped for the device?")
			}
			if got := greedy(start(0), 30); !slices.Equal(got, wantToks) {
				t.Fatalf("tokens decoding ahead:\n%v\none step at a time:\n%v", got, wantToks)
			}
			// W: the sliding rings' positions.
			W := 0
			for _, kv := range ex.Plan().KV {
				if kv.Window > 0 && (W == 0 || kv.Slots < W) {
					W = kv.Slots
				}
			}
			if W < 5 {
				t.Fatalf("the fixture's sliding rings hold %d positions; the test needs 5 or more", W)
			}
			// Dropped, then another token, then a prompt chunk: at Pos() 5
			// (a slot no position had used where W > 5), and at W + 3 (the
			// slot position 3 held, outside every later query's window).
			for _, c := range []struct {
				steps int
				chunk bool
			}{{3, false}, {3, true}, {W + 1, false}, {W + 1, true}} {
				chunk := c.chunk
				var rows [2][]float32
				var toks [2][]int32
				for i, on := range []bool{false, true} {
					ahead(on)
					tok := start(c.steps)
					feed := []int32{other(tok)}
					if chunk {
						feed = append(feed, tok, other(other(tok)))
					}
					lg := forward(feed...)
					rows[i] = lg[len(lg)-int(V):]
					toks[i] = greedy(other(tok), 4)
				}
				same(fmt.Sprintf("after a step dropped at %d (chunk %v)", len(prompt)+c.steps, chunk), rows[1], rows[0])
				if !slices.Equal(toks[0], toks[1]) {
					t.Fatalf("tokens after a step dropped at %d (chunk %v): %v ahead, %v one at a time", len(prompt)+c.steps, chunk, toks[1], toks[0])
				}
			}
			// Rewind after a dropped step: at Pos() 3 it wrote position 3
			// (the ring of W holds it); at Pos() W position W (slot 0, which
			// position 0 held).
			var rows [2][]float32
			for i, on := range []bool{false, true} {
				ahead(on)
				start(1) // Pos() 3, a step queued at 3 when on
				if err := ex.Rewind(1); err != nil {
					t.Fatalf("ahead %v: rewind from 3: %v", on, err)
				}
				rows[i] = forward(prompt[1])
			}
			same("after a rewind", rows[1], rows[0])
			ahead(false)
			start(W - len(prompt))
			if err := ex.Rewind(1); err != nil {
				t.Fatalf("one step at a time: rewind from %d: %v", W, err)
			}
			ahead(true)
			start(W - len(prompt))
			if err := ex.Rewind(1); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("has wrapped at %d", W+1)) {
				t.Fatalf("rewind from %d after a step decoded ahead: %v; want the ring wrapped at %d", W, err, W+1)
			}
		})
	}
}

// TestForwardLast: ForwardLast returns Forward's argmax of every token and
// its last row of logits, bit for bit, with the prompt in one chunk and in
// chunks of 5 (the last row then in a later chunk than most), and is an
// engine.LastRowForwarder.
func TestForwardLast(t *testing.T) {
	dir := fixtureDirs(t)[len(fixtureDirs(t))-1]
	g := readGolden(t, dir)
	for _, chunk := range []int{0, 5} {
		t.Run(fmt.Sprintf("chunk=%d", chunk), func(t *testing.T) {
			m, ex := openGPU(t, dir, engine.Options{DType: "bf16", Chunk: chunk})
			if _, ok := m.Backend.(engine.LastRowForwarder); !ok {
				t.Fatal("the GPU backend is not an engine.LastRowForwarder")
			}
			V := m.Config.VocabSize
			all, want, err := ex.Forward(g.PromptIDs)
			if err != nil {
				t.Fatal(err)
			}
			ex.Reset()
			last, next, err := ex.ForwardLast(g.PromptIDs)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(next, want) || len(last) != V {
				t.Fatalf("argmax %v and %d logits; Forward's %v and a row of %d", next, len(last), want, V)
			}
			for j, v := range all[len(all)-V:] {
				if math.Float32bits(last[j]) != math.Float32bits(v) {
					t.Fatalf("logit %d: %v, Forward's %v", j, last[j], v)
				}
			}
		})
	}
}

// TestPrefillThenDecode: decode-only (every token one step) for 100
// positions, then prefill those 100 tokens in chunks of 1, 7, 64 and 2048
// and decode 256 more (crossing the sliding window dozens of times, far
// past max_position_embeddings): the same tokens, exactly in f32, and in
// bf16 up to the first near-tie of either run (the prefill's rows round
// otherwise than the decode-only ones: on the H200 the logits differ by
// 0.04 to 0.08 here, so a near-tie in the prefilled run can flip a token
// as one in the decode-only run can).
func TestPrefillThenDecode(t *testing.T) {
	dir := fixtureDirs(t)[len(fixtureDirs(t))-1]
	g := readGolden(t, dir)
	const prefix, cont = 100, 256
	for _, dt := range []string{"f32", "bf16"} {
		t.Run(dt, func(t *testing.T) {
			_, ref := openGPU(t, dir, engine.Options{DType: dt, MaxContext: 512})
			out, refRows, gaps := decodeRun(t, ref, g.PromptIDs, true, prefix+cont)
			seq := append(append([]int32(nil), g.PromptIDs...), out...)
			P := len(g.PromptIDs) + prefix
			want := seq[P : P+cont]
			// gaps[i] is the top-2 gap of the step that chose out[i+1].
			upto := cont
			if dt == "bf16" {
				for i := 0; i < cont; i++ {
					if gaps[prefix+i-1] < nearTie {
						upto = i
						break
					}
				}
			}
			for _, chunk := range []int{1, 7, 64, 2048} {
				_, b := openGPU(t, dir, engine.Options{DType: dt, MaxContext: 512, Chunk: chunk})
				got, rows, gotGaps := decodeRun(t, b, seq[:P], false, cont)
				n := upto
				for i := 1; dt == "bf16" && i < n; i++ {
					if gotGaps[i-1] < nearTie {
						n = i
					}
				}
				if !slices.Equal(got[:n], want[:n]) {
					// Where: the logits that chose the first other token, in
					// both runs (each step's logits choose the next token).
					i := 0
					for got[i] == want[i] {
						i++
					}
					where := "the prefill's last row chose it"
					if i > 0 {
						where = fmt.Sprintf("logits max |diff| %.4g there (%.4g at the first decode step), top-2 gap %.4g decode-only, %.4g here",
							maxAbsDiff(rows[i-1], refRows[prefix+i-1]), maxAbsDiff(rows[0], refRows[prefix]), gaps[prefix+i-1], gotGaps[i-1])
					}
					t.Errorf("chunk %d: continuation differs from decode-only at token %d (compared %d tokens; %s)\n got %v\nwant %v", chunk, i, n, where, got, want)
				}
				t.Logf("%s, chunk %d: compared %d continuation tokens after a %d-token prefill", dt, chunk, n, P)
			}
		})
	}
}

// TestProfile: a profiled run attributes GPU time to every decode node,
// with node/op/layer labels and the class -> layer -> op -> node stack.
func TestProfile(t *testing.T) {
	dir := fixtureDirs(t)[0]
	g := readGolden(t, dir)
	m, ex := openGPU(t, dir, engine.Options{DType: "bf16", Profile: true})
	if _, err := m.Generate(context.Background(), g.PromptIDs, engine.GenOptions{MaxTokens: 8}); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := ex.WriteProfile(&buf); err != nil {
		t.Fatal(err)
	}
	p, err := profile.Parse(&buf)
	if err != nil {
		t.Fatal(err)
	}
	nodes := map[string]bool{}
	var total int64
	for _, s := range p.Sample {
		if len(s.Label["node"]) != 1 || len(s.Label["op"]) != 1 || len(s.NumLabel["layer"]) != 1 || len(s.Location) != 4 {
			t.Fatalf("sample %+v lacks labels or stack", s)
		}
		if s.Label["class"][0] == "decode" {
			nodes[s.Label["node"][0]] = true
		}
		if s.Location[0].Line[0].Function.Name != s.Label["node"][0] {
			t.Errorf("leaf frame %s, node %s", s.Location[0].Line[0].Function.Name, s.Label["node"][0])
		}
		total += s.Value[1]
	}
	for _, st := range ex.Plan().Decode.Steps {
		if len(st.Launches) == 0 {
			continue // a norm_rope whose heads the step before launched, a norm fused into the add before
		}
		if !nodes[st.Name] {
			t.Errorf("decode node %s has no samples", st.Name)
		}
	}
	if total <= 0 {
		t.Fatalf("total GPU time %d", total)
	}
	t.Logf("%d samples, %.3f ms of GPU time", len(p.Sample), float64(total)/1e6)
}

// TestSyntheticWeights: weights made on the device run, and the same
// sequence gives the same tokens twice.
func TestSyntheticWeights(t *testing.T) {
	cudatest.Device(t)
	cfg := config.Tiny()
	gr := bf16Graph(t, cfg, nil)
	ex, err := gpu.Compile(gr, nil, gpu.Config{MaxContext: 64, Chunk: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer ex.Close()
	prompt := make([]int32, 20)
	for i := range prompt {
		prompt[i] = int32(i * 3 % cfg.VocabSize)
	}
	a, la, _ := decodeRun(t, ex, prompt, false, 10)
	b, lb, _ := decodeRun(t, ex, prompt, false, 10)
	if !slices.Equal(a, b) {
		t.Fatalf("synthetic runs differ: %v vs %v", a, b)
	}
	for i := range la {
		for j, x := range la[i] {
			if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) || x != lb[i][j] {
				t.Fatalf("step %d logit %d: %v vs %v", i, j, x, lb[i][j])
			}
		}
	}
}

// TestForwardTailGPU: with the tail on the last row only (ForwardTail,
// GenOptions.LastOnly), f32 gives the last prompt row within 1e-3 of
// transformers and of Forward's, the same last argmax, and the identical
// greedy continuation, in one chunk and in chunks of 3 and 5 (earlier
// chunks then run no tail at all).
func TestForwardTailGPU(t *testing.T) {
	for _, dir := range fixtureDirs(t) {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			g := readGolden(t, dir)
			want := g.PromptLogits[len(g.PromptLogits)-1]
			for _, chunk := range []int{0, 3, 5} {
				m, ex := openGPU(t, dir, engine.Options{DType: "f32", Chunk: chunk})
				if _, ok := m.Backend.(engine.TailForwarder); !ok {
					t.Fatal("the GPU backend is not an engine.TailForwarder")
				}
				all, next, err := ex.Forward(g.PromptIDs)
				if err != nil {
					t.Fatal(err)
				}
				V := len(want)
				ex.Reset()
				last, n, err := ex.ForwardTail(g.PromptIDs)
				if err != nil {
					t.Fatal(err)
				}
				if d := maxAbsDiff(last, all[len(all)-V:]); d > 1e-3 || n != next[len(next)-1] {
					t.Errorf("chunk %d: last row %.3g from Forward's, argmax %d against %d", chunk, d, n, next[len(next)-1])
				}
				if d := maxAbsDiff(last, want); d > 1e-3 {
					t.Errorf("chunk %d: last row %.3g from transformers' (> 1e-3)", chunk, d)
				}
				res, err := m.Generate(context.Background(), g.PromptIDs, engine.GenOptions{MaxTokens: len(g.Greedy), Chunk: chunk, LastOnly: true})
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(res.Generated, g.Greedy) || res.PromptNext[len(res.PromptNext)-1] != g.Argmax[len(g.Argmax)-1] {
					t.Errorf("chunk %d: greedy %v (last prompt argmax %d); want %v (%d)", chunk, res.Generated,
						res.PromptNext[len(res.PromptNext)-1], g.Greedy, g.Argmax[len(g.Argmax)-1])
				}
			}
		})
	}
}

// TestAutoChunkGPU: with AutoChunk and no chunk given, Compile plans
// prefill steps of lower.LongChunk (the tiny model fits any GPU), and a
// prompt longer than a step runs; a chunk given is kept.
func TestAutoChunkGPU(t *testing.T) {
	cudatest.Device(t)
	cfg := config.Tiny()
	gr := bf16Graph(t, cfg, nil)
	var log strings.Builder
	ex, err := gpu.Compile(gr, nil, gpu.Config{MaxContext: lower.LongChunk + 64, AutoChunk: true, Options: gpu.Options{LoadLog: &log}})
	if err != nil {
		t.Fatal(err)
	}
	defer ex.Close()
	if got := ex.PrefillChunk(); got != lower.LongChunk || strings.Contains(log.String(), "steps of") {
		t.Errorf("AutoChunk: steps of %d (note %q), want %d", got, log.String(), lower.LongChunk)
	}
	prompt := make([]int32, lower.LongChunk+5)
	for i := range prompt {
		prompt[i] = int32(i * 7 % cfg.VocabSize)
	}
	toks, _, _ := decodeRun(t, ex, prompt, false, 2)
	if len(toks) != 2 {
		t.Errorf("%d tokens after a %d-token prompt, want 2", len(toks), len(prompt))
	}
	ex16, err := gpu.Compile(gr, nil, gpu.Config{MaxContext: 64, Chunk: 16, AutoChunk: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ex16.Close()
	if got := ex16.PrefillChunk(); got != 16 {
		t.Errorf("AutoChunk with Chunk 16: steps of %d", got)
	}
}

// bf16Graph is cfg's Laguna graph with bf16 weights (with recipe r's types
// where r is not nil) after the default passes.
func bf16Graph(t *testing.T, cfg *config.Config, r *ckpt.Recipe) *ir.Graph {
	t.Helper()
	gr, err := models.Build("laguna.yaml", models.LagunaYAML, cfg, models.BuildOptions{WeightDType: ir.BF16})
	if err != nil {
		t.Fatal(err)
	}
	if r != nil {
		if err := models.SetRecipeTypes(gr, r); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := passes.Run(gr, passes.Options{}); err != nil {
		t.Fatal(err)
	}
	return gr
}
