package lower

import (
	"fmt"
	"maps"
	"slices"

	"lagc/ir"
)

// A lowering rule turns one step of an op into its launches at T tokens.
// Every op the CUDA executor runs has one, registered under the op's name;
// the rules call the kernel functions (kernels_*.go), which hold every
// choice of kernel, tile and geometry.
type rule struct {
	launches func(c *stepCtx) ([]Launch, error)
	// scratch, when set, is the workspace and routes bytes the step needs
	// at c.T tokens.
	scratch func(c *stepCtx) (ws, routes int64, err error)
	// counters, when set, is the sync bytes (BaseSync) the step needs at
	// c.T tokens.
	counters func(c *stepCtx) (int64, error)
	// f32Inputs are the inputs the kernels read in f32 whatever the plan's
	// dtype: weights stored so, activations produced so.
	f32Inputs []int
	// f32Outputs: the kernels write every float output in f32.
	f32Outputs bool
	// layout, when set, is the device layout of weight input i of n ("":
	// row-major).
	layout func(n *ir.Node, i int) string
	// quantInputs are the weight inputs the kernels may read block-
	// quantised (in the device layout of qlayout.go), where the
	// checkpoint stores them in a type with GPU kernels.
	quantInputs []int
	// quantKeep, when set, says whether n's quantInputs may stay
	// block-quantised at all: where it says no, every one of them is
	// converted to the plan's dtype.
	quantKeep func(n *ir.Node) bool
	// outputs is the fewest outputs a step has (0: 1).
	outputs int
}

func (r rule) f32Input(i int) bool { return slices.Contains(r.f32Inputs, i) }

var rules = map[string]rule{}

func defRule(op string, r rule) {
	if _, dup := rules[op]; dup {
		panic("lower: two rules for op " + op) // programming error in this package
	}
	rules[op] = r
}

// RuleOps lists the ops that have a lowering rule, sorted.
func RuleOps() []string { return slices.Sorted(maps.Keys(rules)) }

// stepCtx is what a rule sees: the plan, the schedule, one step with its
// operands' pointers, and the step's token count.
type stepCtx struct {
	p       *Plan
	s       *Schedule
	st      *Step
	T       int
	in, out []Ptr
	// batch: the T rows are decode rows of T sequences (Plan.AtBatch).
	batch bool
}

func (p *Plan) newCtx(s *Schedule, st *Step, T int) (*stepCtx, error) {
	// A plan read from JSON may hold any operand lists: the rules index
	// the ones the op table gives.
	if def, ok := ir.Op(st.Op); ok && len(st.In) < len(def.Inputs) {
		return nil, fmt.Errorf("%s has %d inputs, the op takes %d", st.Op, len(st.In), len(def.Inputs))
	}
	if n := max(rules[st.Op].outputs, 1); len(st.Out) < n {
		return nil, fmt.Errorf("%s has %d outputs, the op makes %d", st.Op, len(st.Out), n)
	}
	if st.Op == "concat" && len(st.In) == 0 {
		return nil, fmt.Errorf("concat of no inputs")
	}
	c := &stepCtx{p: p, s: s, st: st, T: T}
	for _, o := range st.In {
		q, err := p.operandPtr(o)
		if err != nil {
			return nil, err
		}
		c.in = append(c.in, q)
	}
	for _, o := range st.Out {
		q, err := p.operandPtr(o)
		if err != nil {
			return nil, err
		}
		c.out = append(c.out, q)
	}
	return c, nil
}

// operandPtr is where an operand lives: an activation in the arena, a
// weight in the weight allocation, the tokens and positions in their own.
func (p *Plan) operandPtr(o Operand) (Ptr, error) {
	switch o.Kind {
	case "weight":
		if o.Offset < 0 {
			return Ptr{}, fmt.Errorf("weight %s is not uploaded", o.Value)
		}
		return Ptr{BaseWeights, o.Offset}, nil
	case "input":
		switch o.Value {
		case "tokens":
			return Ptr{BaseTokens, 0}, nil
		case "pos":
			return Ptr{BasePos, 0}, nil
		}
		return Ptr{}, fmt.Errorf("graph input %s is not tokens or pos", o.Value)
	}
	return Ptr{BaseArena, o.Offset}, nil
}

// rows is the number of rows of operand o (its elements over its last axis).
func (c *stepCtx) rows(o Operand) int { return o.Elems(c.T) / max(o.Last(c.T), 1) }

// same fails unless every dtype is dts[0].
func same(what string, dts ...string) error {
	for _, d := range dts[1:] {
		if d != dts[0] {
			return fmt.Errorf("%s: mixed dtypes %v", what, dts)
		}
	}
	return nil
}

func one(l Launch, err error) ([]Launch, error) {
	if err != nil {
		return nil, err
	}
	return []Launch{l}, nil
}

// stepLaunches lowers one step at T tokens.
func (p *Plan) stepLaunches(s *Schedule, st *Step, T int, batch bool) ([]Launch, error) {
	r, ok := rules[st.Op]
	if !ok {
		return nil, fmt.Errorf("no lowering rule for op %q", st.Op)
	}
	c, err := p.newCtx(s, st, T)
	if err != nil {
		return nil, err
	}
	c.batch = batch
	return r.launches(c)
}

// At returns the launches of every step of s at t tokens (1 <= t <=
// s.Tokens), in step order: prefill runs any chunk up to the planned one.
// At s.Tokens they are the steps' recorded Launches. A step may rely on
// an earlier one's quantised activations (reuseQ8X), a norm quantise
// them for a later step (fuseNormQ8X), an add or a GEMV launch the next
// step's norm (fuseAddNorm, fuseGEMVNorm), or a router GEMV's step select
// the experts for the next (fuseRouter, leaving that step no launch): the
// steps run in order, all of them.
func (p *Plan) At(s *Schedule, t int) ([][]Launch, error) {
	if t < 1 || t > s.Tokens {
		return nil, fmt.Errorf("lower: %s runs 1 to %d tokens, not %d", s.Class, s.Tokens, t)
	}
	return p.at(s, t, false)
}

func (p *Plan) at(s *Schedule, t int, batch bool) ([][]Launch, error) {
	out := make([][]Launch, len(s.Steps))
	for i := range s.Steps {
		st := &s.Steps[i]
		ls, err := p.stepLaunches(s, st, t, batch)
		if err != nil {
			what := "T"
			if batch {
				what = "batch"
			}
			return nil, fmt.Errorf("lower: %s %s (%s) at %s=%d: %w", s.Class, st.Name, st.Op, what, t, err)
		}
		out[i] = ls
	}
	fuseLaunches(s.Steps, out, p.fusionsOff())
	if s.Class == Decode && !batch {
		ws, _, _, err := p.scratch(s)
		if err != nil {
			return nil, err
		}
		p.lateFusions(out, ws)
	}
	return out, nil
}

// scratch sizes the workspace, routes and counters of s: the most any
// step needs at any T up to s.Tokens (steps run one at a time and share
// them).
func (p *Plan) scratch(s *Schedule) (ws, routes, sync int64, err error) {
	for i := range s.Steps {
		st := &s.Steps[i]
		r := rules[st.Op]
		if r.scratch == nil && r.counters == nil {
			continue
		}
		c, err := p.newCtx(s, st, s.Tokens)
		if err != nil {
			return 0, 0, 0, err
		}
		for t := 1; t <= s.Tokens; t++ {
			c.T = t
			if r.scratch != nil {
				w, q, err := r.scratch(c)
				if err != nil {
					return 0, 0, 0, fmt.Errorf("%s (%s) at T=%d: %w", st.Name, st.Op, t, err)
				}
				ws, routes = max(ws, w), max(routes, q)
			}
			if r.counters != nil {
				n, err := r.counters(c)
				if err != nil {
					return 0, 0, 0, fmt.Errorf("%s (%s) at T=%d: %w", st.Name, st.Op, t, err)
				}
				sync = max(sync, n)
			}
		}
	}
	return align(ws), align(routes), align(sync), nil
}
