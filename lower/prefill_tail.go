package lower

import "fmt"

// A prefill chunk's tail is its steps after the last one that mixes rows
// (in Laguna the last layer's attention): the last layer's o_proj, MLP or
// experts, the final norm, the LM head and the argmax. Each of their rows
// depends on the same row of their inputs alone, and nothing later reads
// them but the caller (the KV caches are written before), so a caller that
// wants only the last token's logits needs the tail on the chunk's last
// row only, and a chunk before the prompt's last needs no tail at all:
// at 2048 tokens that is about a layer's MLP and the LM head over 2047
// rows (docs/PERF.md). AtTail lowers a chunk so.

// Tail says which rows of a prefill chunk its tail runs on.
type Tail int

const (
	TailAll  Tail = iota // every row: every token's logits and argmax
	TailLast             // the chunk's last row: its logits and argmax alone
	TailNone             // none: a chunk whose logits nobody reads
)

// rowWiseOps are the ops each of whose output rows depends on the same
// row of their inputs alone (the token axis first), positions aside: the
// ops a tail may hold.
var rowWiseOps = map[string]bool{
	"add": true, "argmax": true, "embedding": true, "matmul": true, "matmul_add": true, "matmul_split": true,
	"matmul_swiglu": true, "moe_experts": true, "moe_grouped": true, "mul": true, "rms_norm": true,
	"router_topk": true, "silu": true, "softplus_gate": true,
}

// TailStart is the index of s's first tail step: the step after the last
// whose op is not row-wise (len(s.Steps) when the last is not).
func TailStart(s *Schedule) int {
	for i := len(s.Steps) - 1; i >= 0; i-- {
		if !rowWiseOps[s.Steps[i].Op] {
			return i + 1
		}
	}
	return 0
}

// AtTail is At with the tail on the last of the t rows only (TailLast: its
// activations are read and written at that row's place, so the chunk's
// last logits row and argmax land where At puts them) or not run
// (TailNone). Only the last row's logits and argmax are then defined.
func (p *Plan) AtTail(s *Schedule, t int, tail Tail) ([][]Launch, error) {
	if t < 1 || t > s.Tokens {
		return nil, fmt.Errorf("lower: %s runs 1 to %d tokens, not %d", s.Class, s.Tokens, t)
	}
	if tail == TailAll || (tail == TailLast && t == 1) {
		return p.at(s, t, false)
	}
	start := TailStart(s)
	out := make([][]Launch, len(s.Steps))
	for i := range s.Steps {
		st := &s.Steps[i]
		var ls []Launch
		var err error
		switch {
		case i < start:
			ls, err = p.stepLaunches(s, st, t, false)
		case tail == TailLast:
			ls, err = p.lastRowLaunches(s, st, t)
		}
		if err != nil {
			return nil, fmt.Errorf("lower: %s %s (%s) at T=%d, tail %d: %w", s.Class, st.Name, st.Op, t, tail, err)
		}
		out[i] = ls
	}
	fuseLaunches(s.Steps, out, p.fusionsOff())
	return out, nil
}

// lastRowLaunches are a row-wise step's launches for row t-1 of t alone:
// lowered at one token, each activation and input with a token axis moved
// to that row.
func (p *Plan) lastRowLaunches(s *Schedule, st *Step, t int) ([]Launch, error) {
	r, ok := rules[st.Op]
	if !ok {
		return nil, fmt.Errorf("no lowering rule for op %q", st.Op)
	}
	c, err := p.newCtx(s, st, 1)
	if err != nil {
		return nil, err
	}
	move := func(ptrs []Ptr, ops []Operand) error {
		for i, o := range ops {
			if o.Kind == "weight" {
				continue
			}
			for j, d := range o.Shape {
				if d != T {
					continue
				}
				if j != 0 {
					return fmt.Errorf("%s's token axis is not its first", o.Value)
				}
				size := dtypeSize(o.DType)
				if size == 0 {
					return fmt.Errorf("%s: dtype %q", o.Value, o.DType)
				}
				ptrs[i] = ptrs[i].At(int64(t-1) * int64(o.Elems(1)) * int64(size))
			}
		}
		return nil
	}
	if err := move(c.in, st.In); err != nil {
		return nil, err
	}
	if err := move(c.out, st.Out); err != nil {
		return nil, err
	}
	return r.launches(c)
}
