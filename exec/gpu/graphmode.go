package gpu

import (
	"fmt"
	"math"

	"lagc/cuda"
	"lagc/lower"
)

// Decode steps. Everything that changes from one step to the next lives in
// device memory: the token (tokens[0]), the position (pos[0]; attention
// derives the number of valid keys from it), so one captured graph serves
// every step. The graph ends with step_next, which copies the step's argmax
// into tokens[0] and advances pos[0]: a greedy generation needs nothing
// from the host between replays but the 4-byte token it copies out.

// decodeStep runs one token at position e.next and returns its argmax (and
// its logits row when logits is true).
func (e *Executor) decodeStep(tok int32, logits bool) (int32, []float32, error) {
	// The device already holds (tok, next) when the previous decode step
	// produced tok; otherwise (prefill, sampling, a new sequence) write them.
	if !e.devState || tok != e.lastNext {
		if err := e.setScalars([]int32{tok}); err != nil {
			return 0, nil, err
		}
	}
	if err := e.launchDecode(); err != nil {
		return 0, nil, err
	}
	lg, next, err := e.readOut(e.decode, 1, rowsIf(logits))
	if err != nil {
		return 0, nil, err
	}
	if e.prof != nil {
		if err := e.prof.collect(lower.Decode); err != nil {
			return 0, nil, err
		}
	}
	e.rb.kept = true // its row is BaseKept's too
	e.next++
	e.devState, e.lastNext = true, next[0]
	return next[0], lg, nil
}

// launchDecode queues one decode step: eagerly for the first step (which
// compiles every kernel, the warm-up) and in eager mode; afterwards a
// replay of the graph captured from the eager launches.
func (e *Executor) launchDecode() error {
	if e.o.Eager || e.hooked() || e.decodeSteps == 0 {
		e.decodeSteps++
		return e.decodeKernels()
	}
	if e.graph == nil {
		if err := e.capture(); err != nil {
			return err
		}
	}
	e.decodeSteps++
	return e.graph.Launch(e.s)
}

// decodeKernels queues the decode schedule, which ends with the step
// bookkeeping (step_next).
func (e *Executor) decodeKernels() error { return e.run(e.decode) }

// capture records the decode step once as a CUDA graph.
func (e *Executor) capture() error {
	g, err := e.captureRun(e.decode, "the decode step")
	if err != nil {
		return err
	}
	e.graph = g
	return nil
}

// captureRun records p's launches (what, in errors) as an instantiated
// CUDA graph, once the stream is idle.
func (e *Executor) captureRun(p *program, what string) (*cuda.GraphExec, error) {
	if err := e.s.Synchronize(); err != nil {
		return nil, err
	}
	g, err := e.s.Capture(func() error { return e.run(p) })
	if err != nil {
		return nil, fmt.Errorf("capturing %s: %w", what, err)
	}
	defer g.Close()
	ex, err := g.Instantiate()
	if err != nil {
		return nil, fmt.Errorf("instantiating the graph of %s: %w", what, err)
	}
	return ex, nil
}

// Captured reports whether decode steps replay a captured graph now.
func (e *Executor) Captured() bool { return e.graph != nil }

// SetEager switches decode between eager launches and graph replay (the
// graph, once captured, is kept: its pointers never change).
func (e *Executor) SetEager(eager bool) { e.o.Eager = eager }

// ForwardArgmax feeds one token like Forward but copies only the argmax
// and the logit it picked to the host, not the row of logits: greedy
// decoding's step (engine.GreedyStepper). finite is false when that logit
// is NaN or infinite; the argmax picks a NaN above every number and +Inf
// above every finite value, so a row holding either says so here (a row
// whose only non-finite values are -Inf does not). StepLogits then reads
// the row.
func (e *Executor) ForwardArgmax(tok int32) (next int32, finite bool, err error) {
	if err := e.canFeed([]int32{tok}); err != nil {
		return 0, false, err
	}
	next, logit, err := e.argmaxStep(tok)
	if err == nil && (next < 0 || int(next) >= e.V) {
		err = fmt.Errorf("gpu: forward: the argmax %d is outside the vocabulary [0, %d)", next, e.V)
	}
	if err != nil {
		e.broken = true
		return 0, false, err
	}
	f := float64(logit)
	return next, !math.IsNaN(f) && !math.IsInf(f, 0), nil
}

// argmaxStep feeds tok and returns the step's argmax and the logit it
// picked: through greedyStep (one step ahead), or one step and a read of
// that logit.
func (e *Executor) argmaxStep(tok int32) (int32, float32, error) {
	if e.greedyPath() {
		return e.greedyStep(tok)
	}
	next, _, err := e.decodeStep(tok, false)
	if err != nil || next < 0 || int(next) >= e.V {
		return next, 0, err
	}
	v := make([]float32, 1)
	if err := cuda.Download(e.q, v, e.arena.Add(e.decode.logits.Offset+4*int64(next))); err != nil {
		return 0, 0, fmt.Errorf("reading the argmax's logit: %w", err)
	}
	return next, v[0], nil
}

// StepLogits copies the last decode step's row of logits to the host.
func (e *Executor) StepLogits() ([]float32, error) {
	if e.rb.on && e.rb.kept {
		// The arena's row may be the next step's already (greedyStep).
		return e.keptRow(e.next - 1)
	}
	out := make([]float32, e.V)
	if err := cuda.Download(e.q, out, e.arena.Add(e.decode.logits.Offset)); err != nil {
		return nil, fmt.Errorf("reading the logits: %w", err)
	}
	return out, nil
}

// graphCache holds programs' captured graphs by key (a bucket, a slot):
// a program runs eagerly on its first run (compiling its kernels) and in
// eager mode, else replays the graph captured on its second. With max > 0
// at most max graphs are kept: past it they are dropped together.
type graphCache struct {
	max    int
	graphs map[int]*cuda.GraphExec
	runs   map[int]int
}

func newGraphCache(max int) graphCache {
	return graphCache{max: max, graphs: map[int]*cuda.GraphExec{}, runs: map[int]int{}}
}

// has reports whether key replays a graph.
func (c *graphCache) has(key int) bool { return c.graphs[key] != nil }

func (c *graphCache) close() error {
	var first error
	for k, g := range c.graphs {
		if err := g.Close(); err != nil && first == nil {
			first = err
		}
		delete(c.graphs, k)
	}
	return first
}

// launchCached queues p, key's program in c; whatKey names it in errors,
// a format of key (formatted only when capturing: it runs every step).
func (e *Executor) launchCached(c *graphCache, key int, p *program, whatKey string) error {
	runs := c.runs[key]
	c.runs[key]++
	if e.o.Eager || e.hooked() || runs == 0 {
		return e.run(p)
	}
	g := c.graphs[key]
	if g == nil {
		if c.max > 0 && len(c.graphs) >= c.max {
			if err := c.close(); err != nil {
				return err
			}
		}
		var err error
		if g, err = e.captureRun(p, fmt.Sprintf(whatKey, key)); err != nil {
			return err
		}
		c.graphs[key] = g
	}
	return g.Launch(e.s)
}
