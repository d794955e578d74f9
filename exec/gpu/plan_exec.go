package gpu

import (
	"fmt"

	"lagc/cuda"
	"lagc/lower"
)

// program is a schedule at T tokens bound to the executor's memory: every
// step's launches (lower's, at T) with their kernels compiled and their
// arguments resolved, then the schedule's Finish launches.
type program struct {
	sch          *lower.Schedule
	T            int
	tail         lower.Tail // prefill: the rows its tail runs on
	steps        [][]KernelLaunch
	lowered      [][]lower.Launch // steps' launches as lower gave them (StepSelection)
	finish       []KernelLaunch
	logits, next lower.Buffer
}

// run queues every launch of p on e.q.
func (e *Executor) run(p *program) error {
	for i, ls := range p.steps {
		st := &p.sch.Steps[i]
		for _, l := range ls {
			var err error
			if e.prof != nil {
				err = e.prof.timed(e.s, p.sch.Class, st, l.Name, func() error { return l.Launch(e.q) })
			} else {
				err = l.Launch(e.q)
			}
			if err != nil {
				return fmt.Errorf("%s %s (%s): %w", p.sch.Class, st.Name, st.Op, err)
			}
		}
		if e.checking {
			if err := e.checkStep(st, p, i); err != nil {
				return err
			}
		}
		if e.census != nil {
			if err := e.censusStep(st, p, i); err != nil {
				return err
			}
		}
	}
	for _, l := range p.finish {
		if err := l.Launch(e.q); err != nil {
			return fmt.Errorf("%s: %w", p.sch.Class, err)
		}
	}
	return nil
}

func dtypeOf(s string) (cuda.DType, error) {
	switch s {
	case "f32":
		return cuda.F32, nil
	case "bf16":
		return cuda.BF16, nil
	case "f16":
		return cuda.F16, nil
	case "i32":
		return cuda.I32, nil
	}
	return 0, fmt.Errorf("dtype %q has no kernels", s)
}

// base is the address of a plan region in the executor's memory.
func (e *Executor) base(region string) (cuda.DevicePtr, error) {
	var p cuda.DevicePtr
	switch region {
	case lower.BaseArena:
		p = e.arena
	case lower.BaseWeights:
		p = e.weights
	case lower.BaseKV:
		p = e.kvMem
		if e.kvSlot > 0 && p != 0 {
			p = p.Add(int64(e.kvSlot) * e.plan.KVSeqBytes())
		}
	case lower.BaseWorkspace:
		p = e.ws
	case lower.BaseRoutes:
		p = e.routes
	case lower.BaseTokens:
		p = e.tokens
	case lower.BasePos:
		p = e.pos
	case lower.BaseSeq:
		p = e.seq
	case lower.BaseSync:
		p = e.sync
	case lower.BaseRope:
		p = e.ropes
	case lower.BaseOut:
		p = e.out
	case lower.BaseKept:
		p = e.kept
	case lower.BaseShadow:
		p = e.shadows
	default:
		return 0, fmt.Errorf("the executor has no region %q", region)
	}
	if p == 0 {
		return 0, fmt.Errorf("region %q is empty in this plan", region)
	}
	return p, nil
}

// bind resolves the launches of sch at T tokens (per step, as lower gives
// them).
func (e *Executor) bind(sch *lower.Schedule, T int, launches [][]lower.Launch) (*program, error) {
	p := &program{sch: sch, T: T, lowered: launches}
	var ok1, ok2 bool
	p.logits, ok1 = sch.Value("logits")
	p.next, ok2 = sch.Value("next")
	if !ok1 || !ok2 || p.logits.DType != "f32" || p.next.DType != "i32" {
		return nil, fmt.Errorf("the plan needs outputs logits (f32) and next (i32)")
	}
	if len(launches) != len(sch.Steps) {
		return nil, fmt.Errorf("%d launch lists for %d steps", len(launches), len(sch.Steps))
	}
	bindAll := func(ls []lower.Launch) ([]KernelLaunch, error) {
		if sch.Class == lower.Decode { // EnvSkipKernels: decode steps only
			var n int
			ls, n = withoutSkipped(ls, e.skip)
			e.skipped += n
		}
		out := make([]KernelLaunch, len(ls))
		for i, l := range ls {
			b, err := e.k.Bind(l, e.base)
			if err != nil {
				return nil, err
			}
			out[i] = b
		}
		return out, nil
	}
	for i, ls := range launches {
		b, err := bindAll(ls)
		if err != nil {
			st := &sch.Steps[i]
			return nil, fmt.Errorf("%s (%s): %w", st.Name, st.Op, err)
		}
		p.steps = append(p.steps, b)
	}
	var err error
	if p.finish, err = bindAll(sch.Finish); err != nil {
		return nil, err
	}
	return p, nil
}

// bindPlanned binds a schedule at its planned Tokens: the steps' recorded
// launches.
func (e *Executor) bindPlanned(sch *lower.Schedule) (*program, error) {
	launches := make([][]lower.Launch, len(sch.Steps))
	for i, st := range sch.Steps {
		launches[i] = st.Launches
	}
	return e.bind(sch, sch.Tokens, launches)
}

// prefillAt is the prefill program for a chunk of T tokens: the planned
// one at the plan's chunk, else lower's launches at T (the last one bound
// is kept: a prompt has at most one short chunk).
func (e *Executor) prefillAt(T int) (*program, error) {
	if T == e.prefill.T {
		return e.prefill, nil
	}
	if e.ragged != nil && e.ragged.T == T {
		return e.ragged, nil
	}
	launches, err := e.plan.At(e.plan.Prefill, T)
	if err != nil {
		return nil, err
	}
	p, err := e.bind(e.plan.Prefill, T, launches)
	if err != nil {
		return nil, fmt.Errorf("prefill at T=%d: %w", T, err)
	}
	e.ragged = p
	return p, nil
}

// prefillProgram lowers and binds the prefill program of T tokens with its
// tail on the rows tail says (lower.AtTail), bound to slot's caches; the
// callers keep them (prefillTailAt for slot 0, slotPrefill the others).
func (e *Executor) prefillProgram(slot, T int, tail lower.Tail) (*program, error) {
	launches, err := e.plan.AtTail(e.plan.Prefill, T, tail)
	if err != nil {
		return nil, err
	}
	e.kvSlot = slot
	p, err := e.bind(e.plan.Prefill, T, launches)
	e.kvSlot = 0
	if err != nil {
		return nil, fmt.Errorf("prefill at T=%d, tail %d, slot %d: %w", T, tail, slot, err)
	}
	p.tail = tail
	return p, nil
}

// prefillTailAt is the prefill program for a chunk of T tokens with its
// tail on the last row only or not run (lower.AtTail); the last few bound
// are kept (a prompt needs a full chunk without a tail and its last chunk
// with one).
func (e *Executor) prefillTailAt(T int, tail lower.Tail) (*program, error) {
	if tail == lower.TailAll {
		return e.prefillAt(T)
	}
	for _, p := range e.tails {
		if p.T == T && p.tail == tail {
			return p, nil
		}
	}
	p, err := e.prefillProgram(0, T, tail)
	if err != nil {
		return nil, err
	}
	const keep = 4
	if len(e.tails) == keep {
		e.tails = e.tails[1:]
	}
	e.tails = append(e.tails, p)
	return p, nil
}
