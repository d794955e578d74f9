package sched

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"lagc/engine"
	"lagc/exec/cpu"
	"lagc/internal/fixture"
)

// openTiny opens the bundled model on the CPU with the given slots and
// context.
func openTiny(t *testing.T, slots, ctx int) *engine.Model {
	t.Helper()
	m, err := engine.Open(filepath.Join(fixture.Root(t), "models", "tiny"), engine.Options{Slots: slots, MaxContext: ctx})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func newSched(t *testing.T, m *engine.Model, cfg Config) *Scheduler {
	t.Helper()
	b, err := m.Batch()
	if err != nil {
		t.Fatal(err)
	}
	cfg.Vocab = m.Config.VocabSize
	s, err := New(b, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// collect reads a stream to its end.
func collect(t *testing.T, st *Stream) ([]int32, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var ids []int32
	for {
		toks, reason, err := st.Next(ctx)
		ids = append(ids, toks...)
		if reason != "" || ctx.Err() != nil {
			if ctx.Err() != nil {
				t.Fatal("stream did not finish within a minute")
			}
			return ids, reason, err
		}
	}
}

type job struct {
	prompt []int32
	max    int
	seed   uint64 // 0: greedy
}

func (j job) sampler(t *testing.T) engine.Sampler {
	if j.seed == 0 {
		return nil
	}
	s, err := cpu.NewSampler(cpu.SamplerConfig{Temperature: 0.9, TopK: 40, TopP: 0.95, MinP: 0.02, Seed: j.seed})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// jobs returns prompts of 1 to 170 tokens (the tiny model's window is 64),
// some sharing a prefix, some repeated, some sampled with a seed.
func jobs(n int) []job {
	rng := rand.New(rand.NewPCG(3, 4))
	shared := make([]int32, 70)
	for i := range shared {
		shared[i] = int32(100 + rng.IntN(3000))
	}
	var js []job
	for i := range n {
		p := make([]int32, 1+rng.IntN(100))
		for k := range p {
			p[k] = int32(100 + rng.IntN(3000))
		}
		if i%3 == 1 {
			p = append(slices.Clone(shared[:10+rng.IntN(60)]), p...)
		}
		j := job{prompt: p, max: 5 + rng.IntN(40)}
		if i%4 == 3 {
			j.seed = uint64(i)
		}
		js = append(js, j)
		if i%5 == 4 {
			js = append(js, js[len(js)-2]) // the same request again
		}
	}
	return js
}

// TestBatchedEqualsAlone: requests served together (more than the slots,
// prefill chunks beside decode rows, prefixes reused) produce exactly the
// tokens each produces alone with engine.Generate, greedy or sampled with a
// seed.
func TestBatchedEqualsAlone(t *testing.T) {
	m := openTiny(t, 4, 256)
	js := jobs(10)
	want := make([][]int32, len(js))
	for i, j := range js {
		res, err := m.Generate(context.Background(), j.prompt, engine.GenOptions{MaxTokens: j.max, Sampler: j.sampler(t)})
		if err != nil {
			t.Fatal(err)
		}
		want[i] = res.Generated
	}
	var mu sync.Mutex
	var batchRows []int
	s := newSched(t, m, Config{Budget: 24, OnStep: func(st StepStats) {
		mu.Lock()
		batchRows = append(batchRows, st.Sequences)
		mu.Unlock()
	}})
	streams := make([]*Stream, len(js))
	for i, j := range js {
		st, err := s.Submit(context.Background(), Request{Prompt: j.prompt, MaxTokens: j.max, Sampler: j.sampler(t)})
		if err != nil {
			t.Fatal(err)
		}
		streams[i] = st
	}
	cached := 0
	for i, st := range streams {
		got, reason, err := collect(t, st)
		if err != nil || reason != FinishLength {
			t.Fatalf("request %d: finish %q, %v", i, reason, err)
		}
		if !slices.Equal(got, want[i]) {
			t.Errorf("request %d (prompt %d tokens, seed %d):\n batched %v\n alone   %v", i, len(js[i].prompt), js[i].seed, got, want[i])
		}
		cached += st.CachedTokens()
	}
	mu.Lock()
	defer mu.Unlock()
	if slices.Max(batchRows) < 4 {
		t.Errorf("at most %d sequences ran in one step; expected all 4 slots busy at times", slices.Max(batchRows))
	}
	t.Logf("%d steps, %d prompt tokens reused", len(batchRows), cached)
	if w, r := s.Load(); w != 0 || r != 0 {
		t.Errorf("after all finished: %d waiting, %d running", w, r)
	}
}

// TestPrefixReuse: a prompt continuing what a free slot holds (the next
// turn of a chat), or repeating a prompt that has not outgrown the sliding
// window, continues from the slot's KV and gets exactly what it gets alone;
// where the window has moved on, the prompt is computed afresh.
func TestPrefixReuse(t *testing.T) {
	m := openTiny(t, 2, 512)
	ref := openTiny(t, 1, 512) // Generate uses slot 0: not the scheduler's model
	W := m.Config.SlidingWindow
	alone := func(prompt []int32, n int) []int32 {
		res, err := ref.Generate(context.Background(), prompt, engine.GenOptions{MaxTokens: n})
		if err != nil {
			t.Fatal(err)
		}
		return res.Generated
	}
	long := make([]int32, 2*W)
	for i := range long {
		long[i] = int32(200 + 13*i)
	}
	turn1 := alone(long, 10)
	next := append(append(slices.Clone(long), turn1...), 300, 301, 302)
	short := long[:W/2]
	cases := []struct {
		name   string
		prompt []int32
		cached int
	}{
		{"first turn", long, 0},
		{"next turn", next, len(long) + len(turn1) - 1}, // the last token made was never fed
		{"short prompt", short, 0},
		{"short prompt again", short, len(short) - 1},
		// The slot holding long has moved its window on, so the one
		// holding short (inside its window) serves the shared start.
		{"long prompt again", long, len(short)},
	}
	s := newSched(t, m, Config{})
	for _, tc := range cases {
		want := alone(tc.prompt, 10)
		st, err := s.Submit(context.Background(), Request{Prompt: tc.prompt, MaxTokens: 10})
		if err != nil {
			t.Fatal(err)
		}
		got, _, err := collect(t, st)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("%s: %v (%v), alone %v", tc.name, got, err, want)
		}
		if st.CachedTokens() != tc.cached {
			t.Errorf("%s: %d prompt tokens reused, want %d", tc.name, st.CachedTokens(), tc.cached)
		}
	}
}

// TestStopAndContext: a stop id ends a stream and is kept; a sequence that
// fills the context ends with FinishContext; a prompt longer than the
// context is refused.
func TestStopAndContext(t *testing.T) {
	m := openTiny(t, 2, 40)
	s := newSched(t, m, Config{})
	prompt := []int32{2, 500, 600, 700}
	ref, err := m.Generate(context.Background(), prompt, engine.GenOptions{MaxTokens: 10})
	if err != nil {
		t.Fatal(err)
	}
	stopAt := ref.Generated[3]
	st, err := s.Submit(context.Background(), Request{Prompt: prompt, MaxTokens: 10, Stop: func(id int32) bool { return id == stopAt }})
	if err != nil {
		t.Fatal(err)
	}
	got, reason, _ := collect(t, st)
	if i := slices.Index(ref.Generated, stopAt); reason != FinishStop || !slices.Equal(got, ref.Generated[:i+1]) {
		t.Errorf("stop: %q %v, want stop after %v", reason, got, ref.Generated[:i+1])
	}
	st, err = s.Submit(context.Background(), Request{Prompt: make([]int32, 38), MaxTokens: 10})
	if err != nil {
		t.Fatal(err)
	}
	got, reason, _ = collect(t, st)
	if reason != FinishContext || len(got) != 3 { // positions 38, 39 fed, the third token has no room
		t.Errorf("context: %q after %d tokens, want %q after 3", reason, len(got), FinishContext)
	}
	_, err = s.Submit(context.Background(), Request{Prompt: make([]int32, 41), MaxTokens: 1})
	var ce *ContextError
	if !errors.As(err, &ce) || ce.Prompt != 41 || ce.Context != 40 {
		t.Errorf("prompt of 41 in a context of 40: %v", err)
	}
}

func TestSubmitErrors(t *testing.T) {
	m := openTiny(t, 1, 64)
	s := newSched(t, m, Config{})
	for _, tc := range []struct {
		name string
		r    Request
		want string
	}{
		{"empty prompt", Request{MaxTokens: 1}, "empty"},
		{"id outside the vocabulary", Request{Prompt: []int32{1, 4096}, MaxTokens: 1}, "outside the vocabulary [0, 4096)"},
		{"negative id", Request{Prompt: []int32{-1}, MaxTokens: 1}, "outside the vocabulary"},
		{"no tokens to make", Request{Prompt: []int32{1}}, "max tokens must be positive (or 0 to score the prompt only), got 0"},
	} {
		if _, err := s.Submit(context.Background(), tc.r); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one mentioning %q", tc.name, err, tc.want)
		}
	}
	s.Close()
	if _, err := s.Submit(context.Background(), Request{Prompt: []int32{1}, MaxTokens: 1}); !errors.Is(err, ErrClosed) {
		t.Errorf("after Close: %v", err)
	}
}

// gateBackend is a Batcher whose steps wait for permits from the test, for
// checks that need the scheduler held mid-step; every row yields token 1.
type gateBackend struct {
	slots, vocab int
	fail         error
	lens         []int

	mu      sync.Mutex
	cond    *sync.Cond
	permits int
	open    bool
}

func newGate(slots, vocab int) *gateBackend {
	g := &gateBackend{slots: slots, vocab: vocab, lens: make([]int, slots)}
	g.cond = sync.NewCond(&g.mu)
	return g
}

// allow lets n more steps run; n < 0 lets all run.
func (g *gateBackend) allow(n int) {
	g.mu.Lock()
	if n < 0 {
		g.open = true
	}
	g.permits += n
	g.mu.Unlock()
	g.cond.Broadcast()
}

func (g *gateBackend) Slots() int               { return g.slots }
func (g *gateBackend) MaxPos() int              { return 1000 }
func (g *gateBackend) SlotLen(slot int) int     { return g.lens[slot] }
func (g *gateBackend) ResetSlot(slot int)       { g.lens[slot] = 0 }
func (g *gateBackend) Rewind(slot, n int) error { return fmt.Errorf("no rewinding") }
func (g *gateBackend) Step(segs []engine.Segment) ([]float32, []int32, error) {
	g.mu.Lock()
	for !g.open && g.permits <= 0 {
		g.cond.Wait()
	}
	g.permits--
	fail := g.fail
	g.mu.Unlock()
	if fail != nil {
		return nil, nil, fail
	}
	T := 0
	for _, s := range segs {
		T += len(s.Tokens)
		g.lens[s.Slot] += len(s.Tokens)
	}
	logits := make([]float32, T*g.vocab)
	next := make([]int32, T)
	for r := range next {
		next[r] = 1
		logits[r*g.vocab+1] = 1
	}
	return logits, next, nil
}

// waitLoad waits until the scheduler has that many waiting and running.
func waitLoad(t *testing.T, s *Scheduler, waiting, running int) {
	t.Helper()
	untilLoad(t, s, waiting, running, func() {})
}

// stepToLoad is waitLoad letting the gate's steps run one at a time
// meanwhile: a request admitted only at a step's end gets its slot without
// the test depending on when it arrived (under load the first step can
// start before the second request is submitted).
func stepToLoad(t *testing.T, s *Scheduler, g *gateBackend, waiting, running int) {
	t.Helper()
	untilLoad(t, s, waiting, running, func() {
		g.mu.Lock()
		idle := g.permits <= 0
		g.mu.Unlock()
		if idle {
			g.allow(1)
		}
	})
}

// untilLoad polls the scheduler's load for 10 s, calling nudge between
// looks, until it is waiting and running.
func untilLoad(t *testing.T, s *Scheduler, waiting, running int, nudge func()) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		w, r := s.Load()
		if w == waiting && r == running {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d waiting, %d running; want %d and %d", w, r, waiting, running)
		}
		nudge()
		time.Sleep(time.Millisecond)
	}
}

// TestQueueFullAndCancel: beyond the slots and the queue Submit refuses; a
// cancelled request (waiting or running) finishes as cancelled and frees
// its place.
func TestQueueFullAndCancel(t *testing.T) {
	g := newGate(2, 8)
	s, err := New(g, Config{MaxQueue: 1, Vocab: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { g.allow(-1); s.Close() }()
	ctx, cancel := context.WithCancel(context.Background())
	var streams []*Stream
	for i := range 3 {
		c := context.Background()
		if i == 0 {
			c = ctx
		}
		st, err := s.Submit(c, Request{Prompt: []int32{3, 4}, MaxTokens: 100})
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		streams = append(streams, st)
	}
	if _, err := s.Submit(context.Background(), Request{Prompt: []int32{3}, MaxTokens: 1}); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("fourth request with 2 slots and a queue of 1: %v", err)
	}
	// The first step may have started with request 0 alone (the gate holds
	// it); request 1 takes the free slot at a step's end.
	stepToLoad(t, s, g, 1, 2)
	cancel()            // a running one
	streams[2].Cancel() // the waiting one
	g.allow(3)
	for _, i := range []int{0, 2} {
		if _, reason, _ := collect(t, streams[i]); reason != FinishCanceled {
			t.Errorf("request %d: finish %q, want %q", i, reason, FinishCanceled)
		}
	}
	waitLoad(t, s, 0, 1)
	if _, err := s.Submit(context.Background(), Request{Prompt: []int32{3}, MaxTokens: 1}); err != nil {
		t.Errorf("after cancelling two: %v", err)
	}
}

// TestBackendError: a failed step ends the streams of that step with the
// error, and the scheduler goes on.
func TestBackendError(t *testing.T) {
	g := newGate(1, 8)
	g.fail = errors.New("device lost")
	g.allow(-1)
	s, err := New(g, Config{Vocab: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	st, err := s.Submit(context.Background(), Request{Prompt: []int32{3}, MaxTokens: 2})
	if err != nil {
		t.Fatal(err)
	}
	if _, reason, err := collect(t, st); reason != FinishError || err == nil || !strings.Contains(err.Error(), "device lost") {
		t.Errorf("finish %q, %v", reason, err)
	}
	g.mu.Lock()
	g.fail = nil
	g.mu.Unlock()
	st, err = s.Submit(context.Background(), Request{Prompt: []int32{3}, MaxTokens: 2})
	if err != nil {
		t.Fatal(err)
	}
	if got, reason, err := collect(t, st); reason != FinishLength || err != nil || !slices.Equal(got, []int32{1, 1}) {
		t.Errorf("after the error: %v %q %v", got, reason, err)
	}
}

// TestCloseCancels: Close ends running and waiting streams.
func TestCloseCancels(t *testing.T) {
	g := newGate(1, 8)
	s, err := New(g, Config{Vocab: 8})
	if err != nil {
		t.Fatal(err)
	}
	a, _ := s.Submit(context.Background(), Request{Prompt: []int32{3}, MaxTokens: 50})
	b, _ := s.Submit(context.Background(), Request{Prompt: []int32{3}, MaxTokens: 50})
	waitLoad(t, s, 1, 1)
	g.allow(2)
	go s.Close()
	// Let steps run only once Close has begun.
	for {
		st, err := s.Submit(context.Background(), Request{Prompt: []int32{3}, MaxTokens: 1})
		if errors.Is(err, ErrClosed) {
			break
		}
		if st != nil {
			st.Cancel()
		}
		time.Sleep(time.Millisecond)
	}
	g.allow(-1)
	for i, st := range []*Stream{a, b} {
		if got, reason, _ := collect(t, st); reason != FinishCanceled {
			t.Errorf("stream %d: finish %q after %d tokens; want %q", i, reason, len(got), FinishCanceled)
		}
	}
}

// rowBackend is a Batcher whose row of logits depends only on the row's
// token and position, so batching, slots and rewinds cannot change it, and
// spreads its logits so that a sampler's pick depends on the whole row.
// It has Step only; lastRowBackend adds StepLast.
type rowBackend struct {
	vocab           int
	lens            []int
	steps, lastRows atomic.Int64 // Step and StepLast calls
}

func (b *rowBackend) Slots() int           { return len(b.lens) }
func (b *rowBackend) MaxPos() int          { return 1000 }
func (b *rowBackend) SlotLen(slot int) int { return b.lens[slot] }
func (b *rowBackend) ResetSlot(slot int)   { b.lens[slot] = 0 }
func (b *rowBackend) Rewind(slot, n int) error {
	if n > b.lens[slot] {
		return fmt.Errorf("slot %d holds %d positions, not %d", slot, b.lens[slot], n)
	}
	b.lens[slot] = n
	return nil
}

// row writes the logits of tok at pos to out and returns their argmax.
func (b *rowBackend) row(tok int32, pos int, out []float32) int32 {
	rng := rand.New(rand.NewPCG(uint64(tok), uint64(pos)))
	best := 0
	for v := range out {
		out[v] = float32(3 * rng.NormFloat64())
		if out[v] > out[best] {
			best = v
		}
	}
	return int32(best)
}

// step feeds segs, writing every row's logits to all (if not nil), each
// segment's last to last (if not nil), and returns every row's argmax.
func (b *rowBackend) step(segs []engine.Segment, all, last []float32) []int32 {
	var next []int32
	buf := make([]float32, b.vocab)
	for i, sg := range segs {
		for j, tok := range sg.Tokens {
			next = append(next, b.row(tok, b.lens[sg.Slot]+j, buf))
			if all != nil {
				copy(all[(len(next)-1)*b.vocab:], buf)
			}
			if last != nil && j == len(sg.Tokens)-1 {
				copy(last[i*b.vocab:], buf)
			}
		}
		b.lens[sg.Slot] += len(sg.Tokens)
	}
	return next
}

func (b *rowBackend) Step(segs []engine.Segment) ([]float32, []int32, error) {
	b.steps.Add(1)
	T := 0
	for _, sg := range segs {
		T += len(sg.Tokens)
	}
	all := make([]float32, T*b.vocab)
	return all, b.step(segs, all, nil), nil
}

type lastRowBackend struct{ *rowBackend }

func (b lastRowBackend) StepLast(segs []engine.Segment) ([]float32, []int32, error) {
	b.lastRows.Add(1)
	last := make([]float32, len(segs)*b.vocab)
	return last, b.step(segs, nil, last), nil
}

// stepOnly hides a Batcher's StepLast.
type stepOnly struct{ engine.Batcher }

type served struct {
	ids    []int32
	reason string
}

// serveAll submits js to a scheduler on b at once and collects their streams.
func serveAll(t *testing.T, b engine.Batcher, vocab int, js []job) []served {
	t.Helper()
	s, err := New(b, Config{Budget: 24, Vocab: vocab})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	streams := make([]*Stream, len(js))
	for i, j := range js {
		if streams[i], err = s.Submit(context.Background(), Request{Prompt: j.prompt, MaxTokens: j.max, Sampler: j.sampler(t)}); err != nil {
			t.Fatal(err)
		}
	}
	out := make([]served, len(js))
	for i, st := range streams {
		ids, reason, err := collect(t, st)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		out[i] = served{ids, reason}
	}
	return out
}

// TestStepLast: the scheduler on a backend with StepLast (each segment's
// last row of logits only) serves exactly what it serves through Step, greedy
// and sampled, with prompt chunks beside decode rows and prefixes reused:
// on a fake whose rows depend on token and position, and on the bundled
// model on the CPU (whose batcher has StepLast).
func TestStepLast(t *testing.T) {
	m := openTiny(t, 4, 256)
	mb, err := m.Batch()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := mb.(engine.LastRowBatcher); !ok {
		t.Fatal("the CPU batcher is not an engine.LastRowBatcher")
	}
	const vocab = 4096
	fake := &rowBackend{vocab: vocab, lens: make([]int, 4)}
	js := jobs(10)
	for _, tc := range []struct {
		name       string
		step, last engine.Batcher
		vocab      int
	}{
		{"fake", fake, lastRowBackend{fake}, vocab},
		{"tiny on the CPU", stepOnly{mb}, mb, m.Config.VocabSize},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := serveAll(t, tc.step, tc.vocab, js)
			got := serveAll(t, tc.last, tc.vocab, js)
			for i := range js {
				if !slices.Equal(got[i].ids, want[i].ids) || got[i].reason != want[i].reason {
					t.Errorf("request %d (prompt %d tokens, seed %d):\n StepLast %v %q\n Step     %v %q",
						i, len(js[i].prompt), js[i].seed, got[i].ids, got[i].reason, want[i].ids, want[i].reason)
				}
			}
		})
	}
	if fake.steps.Load() == 0 || fake.lastRows.Load() == 0 {
		t.Errorf("the fake ran %d Steps and %d StepLasts; want both used", fake.steps.Load(), fake.lastRows.Load())
	}
}

// argmaxBackend adds StepArgmax to lastRowBackend, counting its calls and
// failing any with a segment that is not one token.
type argmaxBackend struct {
	lastRowBackend
	argmaxes atomic.Int64
	mixed    atomic.Bool // a StepArgmax was given a longer segment
	short    bool        // return one id too few
}

func (b *argmaxBackend) StepArgmax(segs []engine.Segment) ([]int32, error) {
	b.argmaxes.Add(1)
	for _, sg := range segs {
		if len(sg.Tokens) != 1 {
			b.mixed.Store(true)
		}
	}
	next := b.step(segs, nil, nil)
	if b.short {
		next = next[1:]
	}
	return next, nil
}

// TestStepArgmax: on a backend with StepArgmax, steps of greedy sequences'
// decode rows alone run without logits, every other step (a prompt chunk
// in it, or a sampled sequence) through StepLast, and every request gets
// what it gets through StepLast alone, greedy and sampled, alone and
// batched; an argmax of the wrong length ends the streams with an error.
func TestStepArgmax(t *testing.T) {
	const vocab = 4096
	js := jobs(10)
	greedy := slices.DeleteFunc(slices.Clone(js), func(j job) bool { return j.seed != 0 })
	for _, tc := range []struct {
		name string
		js   []job
	}{{"mixed", js}, {"greedy", greedy}, {"one greedy", greedy[:1]}} {
		t.Run(tc.name, func(t *testing.T) {
			last := lastRowBackend{&rowBackend{vocab: vocab, lens: make([]int, 4)}}
			ab := &argmaxBackend{lastRowBackend: lastRowBackend{&rowBackend{vocab: vocab, lens: make([]int, 4)}}}
			want := serveAll(t, last, vocab, tc.js)
			got := serveAll(t, ab, vocab, tc.js)
			for i := range tc.js {
				if !slices.Equal(got[i].ids, want[i].ids) || got[i].reason != want[i].reason {
					t.Errorf("request %d (prompt %d tokens, seed %d):\n StepArgmax %v %q\n StepLast   %v %q",
						i, len(tc.js[i].prompt), tc.js[i].seed, got[i].ids, got[i].reason, want[i].ids, want[i].reason)
				}
			}
			if ab.argmaxes.Load() == 0 || ab.lastRows.Load() == 0 || ab.mixed.Load() {
				t.Errorf("%d StepArgmax and %d StepLast calls, a prompt chunk in a StepArgmax %v; want both used, no chunk there",
					ab.argmaxes.Load(), ab.lastRows.Load(), ab.mixed.Load())
			}
		})
	}
	t.Run("short", func(t *testing.T) {
		ab := &argmaxBackend{lastRowBackend: lastRowBackend{&rowBackend{vocab: 8, lens: make([]int, 1)}}, short: true}
		wantStepError(t, ab, 3, "returned 0 next ids for 1 rows")
	})
}

// badLastRows is a fake whose StepLast is stepLast.
type badLastRows struct {
	*rowBackend
	stepLast func(b *rowBackend, segs []engine.Segment) ([]float32, []int32, error)
}

func (b badLastRows) StepLast(segs []engine.Segment) ([]float32, []int32, error) {
	return b.stepLast(b.rowBackend, segs)
}

// TestStepLastSizes: a StepLast returning logits or ids of the wrong size
// ends the step's streams with an error naming the sizes.
func TestStepLastSizes(t *testing.T) {
	for _, tc := range []struct {
		name     string
		stepLast func(b *rowBackend, segs []engine.Segment) ([]float32, []int32, error)
		want     string
	}{
		{"every row", func(b *rowBackend, segs []engine.Segment) ([]float32, []int32, error) { return b.Step(segs) },
			"returned 24 logits and 3 next ids for the last rows of 1 segments of 3 rows; expected 1 x vocab 8 and 3"},
		{"an id short", func(b *rowBackend, segs []engine.Segment) ([]float32, []int32, error) {
			last, next, err := lastRowBackend{b}.StepLast(segs)
			return last, next[1:], err
		}, "returned 8 logits and 2 next ids for the last rows of 1 segments of 3 rows"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantStepError(t, badLastRows{&rowBackend{vocab: 8, lens: make([]int, 1)}, tc.stepLast}, 2, tc.want)
		})
	}
}

// wantStepError serves the prompt 3, 4, 5 for up to max tokens on b (a
// vocabulary of 8) and wants the stream to end with an error mentioning
// want.
func wantStepError(t *testing.T, b engine.Batcher, max int, want string) {
	t.Helper()
	s, err := New(b, Config{Vocab: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	st, err := s.Submit(context.Background(), Request{Prompt: []int32{3, 4, 5}, MaxTokens: max})
	if err != nil {
		t.Fatal(err)
	}
	if _, reason, err := collect(t, st); reason != FinishError || err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("finish %q, %v; want an error mentioning %q", reason, err, want)
	}
}

// TestPromptRows: a request with PromptRow gets every prompt position's
// logits (bit for bit those of the prompt fed alone with every row kept),
// in order, over several steps of its own and in a slot that held its
// prompt already; it may generate none (MaxTokens 0) or go on to generate
// what it generates alone, and the requests beside it still get exactly
// what they get alone.
func TestPromptRows(t *testing.T) {
	m := openTiny(t, 3, 256)
	ref := openTiny(t, 1, 256)
	js := jobs(6)
	long := slices.Concat(js[0].prompt, js[1].prompt, js[2].prompt, js[3].prompt)[:40] // 40 tokens: two steps of 24
	scored := []job{{prompt: long, max: 0}, {prompt: slices.Concat(jobs(9)[8].prompt, long)[:50], max: 5}, {prompt: long[:30], max: 3}}
	type want struct {
		gen  []int32
		rows [][]float32
	}
	alone := func(j job) want {
		res, err := ref.Generate(context.Background(), j.prompt, engine.GenOptions{MaxTokens: max(j.max, 1), Sampler: j.sampler(t), Logits: true})
		if err != nil {
			t.Fatal(err)
		}
		return want{gen: res.Generated[:j.max], rows: res.PromptRows}
	}
	s := newSched(t, m, Config{Budget: 24})
	// The first scored prompt goes in after a request for its first 35
	// tokens has finished (38 in its slot, within the tiny model's window
	// of 64, so the slot could rewind to them): they must not be reused.
	first := job{prompt: long[:35], max: 3}
	st0, err := s.Submit(context.Background(), Request{Prompt: first.prompt, MaxTokens: first.max})
	if err != nil {
		t.Fatal(err)
	}
	if got, _, _ := collect(t, st0); !slices.Equal(got, alone(first).gen) {
		t.Fatalf("the first request alone: %v", got)
	}
	type sub struct {
		st   *Stream
		want want
		rows [][]float32
		next int
		bad  string
	}
	var subs []*sub
	for k := range max(len(js), len(scored)) {
		if k < len(scored) {
			j := scored[k]
			sb := &sub{want: alone(j)}
			sb.st, err = s.Submit(context.Background(), Request{Prompt: j.prompt, MaxTokens: j.max, Sampler: j.sampler(t),
				PromptRow: func(i int, row []float32) {
					if i != sb.next && sb.bad == "" {
						sb.bad = fmt.Sprintf("row %d after %d", i, sb.next)
					}
					sb.next = i + 1
					sb.rows = append(sb.rows, slices.Clone(row))
				}})
			if err != nil {
				t.Fatal(err)
			}
			subs = append(subs, sb)
		}
		if k < len(js) {
			j := js[k]
			st, err := s.Submit(context.Background(), Request{Prompt: j.prompt, MaxTokens: j.max, Sampler: j.sampler(t)})
			if err != nil {
				t.Fatal(err)
			}
			subs = append(subs, &sub{st: st, want: want{gen: alone(j).gen}})
		}
	}
	for i, sb := range subs {
		got, reason, err := collect(t, sb.st)
		if err != nil || reason != FinishLength || !slices.Equal(got, sb.want.gen) {
			t.Errorf("request %d: %v (%s, %v), alone %v", i, got, reason, err, sb.want.gen)
		}
		if sb.want.rows == nil {
			continue
		}
		if sb.bad != "" || sb.st.CachedTokens() != 0 {
			t.Errorf("request %d: %s, %d tokens cached", i, sb.bad, sb.st.CachedTokens())
		}
		if n := len(sb.want.rows) - 1; len(sb.rows) != n {
			t.Fatalf("request %d: %d rows for a prompt of %d tokens", i, len(sb.rows), n+1)
		}
		for r, row := range sb.rows {
			if !slices.Equal(row, sb.want.rows[r]) {
				t.Errorf("request %d: row %d differs from the prompt's alone", i, r)
				break
			}
		}
	}
}

// TestPromptRowsTakeTurns: while a prompt is scored in steps of its own, a
// generating sequence still gets a step between each two of them, and
// both get what they get alone.
func TestPromptRowsTakeTurns(t *testing.T) {
	m := openTiny(t, 2, 256)
	ref := openTiny(t, 1, 256)
	js := jobs(6)
	gen := job{prompt: js[1].prompt[:5], max: 40}
	scored := slices.Concat(js[0].prompt, js[2].prompt, js[3].prompt, js[4].prompt)[:60] // four steps of 16
	var mu sync.Mutex
	var decodeRows []int
	s := newSched(t, m, Config{Budget: 16, OnStep: func(st StepStats) {
		mu.Lock()
		decodeRows = append(decodeRows, st.DecodeRows)
		mu.Unlock()
	}})
	st1, err := s.Submit(context.Background(), Request{Prompt: gen.prompt, MaxTokens: gen.max})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	first, _, err := st1.Next(ctx) // generating from here on
	if err != nil || len(first) == 0 {
		t.Fatalf("first tokens: %v %v", first, err)
	}
	mu.Lock()
	before := len(decodeRows)
	mu.Unlock()
	rows := 0
	st2, err := s.Submit(context.Background(), Request{Prompt: scored, MaxTokens: 0, PromptRow: func(int, []float32) { rows++ }})
	if err != nil {
		t.Fatal(err)
	}
	if _, reason, err := collect(t, st2); reason != FinishLength || err != nil || rows != len(scored)-1 {
		t.Fatalf("scored prompt: %s, %v, %d rows", reason, err, rows)
	}
	rest, _, _ := collect(t, st1)
	res, err := ref.Generate(context.Background(), gen.prompt, engine.GenOptions{MaxTokens: gen.max})
	if err != nil {
		t.Fatal(err)
	}
	if got := append(first, rest...); !slices.Equal(got, res.Generated) {
		t.Errorf("the generating sequence beside the scoring: %v, alone %v", got, res.Generated)
	}
	mu.Lock()
	defer mu.Unlock()
	scoring := 0
	for i, d := range decodeRows[before:] {
		if d == 0 {
			scoring++
			if i > 0 && decodeRows[before+i-1] == 0 {
				t.Errorf("steps %v: two scoring steps in a row while a sequence generates", decodeRows[before:])
				break
			}
		}
	}
	if scoring != 4 {
		t.Errorf("%d steps without a decode row, want the scored prompt's 4: %v", scoring, decodeRows[before:])
	}
}
