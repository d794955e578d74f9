package gpu

import (
	"errors"
	"fmt"
	"strings"

	"lagc/cuda"
	"lagc/lower"
	"lagc/prep"
)

// NonFiniteError names the first plan step whose output held a NaN or an
// infinity, with the non-finite float weights it read.
type NonFiniteError struct {
	Step       string // the step's node: its first output's name
	Op         string
	Layer      int // -1 outside the layer blocks
	Output     string
	NaN, Inf   int
	First      int      // index of the first non-finite element
	BadWeights []string // "name (n NaN, m infinite)"
}

func (e *NonFiniteError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "node %%%s (%s", e.Step, e.Op)
	if e.Layer >= 0 {
		fmt.Fprintf(&b, ", layer %d", e.Layer)
	}
	fmt.Fprintf(&b, ") first produced non-finite values on the GPU: %%%s holds %d NaN and %d infinite (first at element %d)",
		e.Output, e.NaN, e.Inf, e.First)
	if len(e.BadWeights) > 0 {
		fmt.Fprintf(&b, "; it reads non-finite weights: %s", strings.Join(e.BadWeights, ", "))
	} else {
		b.WriteString(" from finite inputs")
	}
	return b.String()
}

// LocateNonFinite feeds steps again from position 0, eagerly, copying
// every plan step's float outputs to the host after its launches; the
// first that holds a NaN or an infinity is returned as a *NonFiniteError
// (nil if none does). The sequence is reset afterwards. It is slow (a
// synchronisation and a copy per step) and meant for diagnosing a failed
// generation only.
func (e *Executor) LocateNonFinite(steps [][]int32) error {
	e.Reset()
	e.checking = true
	defer func() {
		e.checking = false
		e.Reset()
	}()
	for i, s := range steps {
		pos := e.next
		if _, _, err := e.Forward(s); err != nil {
			var nf *NonFiniteError
			if errors.As(err, &nf) {
				return fmt.Errorf("step %d of %d (%d tokens at position %d): %w", i+1, len(steps), len(s), pos, err)
			}
			return err
		}
	}
	return nil
}

// checkStep returns a *NonFiniteError if a float activation step i of p
// (st) wrote holds a non-finite value. A router_topk step whose selection
// was fused to write the routes buffer (lower.StepSelection) left its own
// rows as they were: not read.
func (e *Executor) checkStep(st *lower.Step, p *program, i int) error {
	T := p.T
	if st.Op == "router_topk" && len(st.Out) == 2 {
		if sel, ok := lower.StepSelection(p.lowered, i); ok && sel.IDs != (lower.Ptr{Base: lower.BaseArena, Offset: st.Out[1].Offset}) {
			return nil
		}
	}
	for _, o := range st.Out {
		if o.Kind != "activation" {
			continue
		}
		d, ok, err := e.readFloats(e.arena.Add(o.Offset), o.DType, o.Elems(T))
		if err != nil {
			return fmt.Errorf("checking %s: %w", o.Value, err)
		}
		if !ok {
			continue
		}
		nan, inf, first := prep.CountNonFinite(d)
		if nan+inf == 0 {
			continue
		}
		nf := &NonFiniteError{Step: st.Name, Op: st.Op, Layer: st.Layer, Output: o.Value, NaN: nan, Inf: inf, First: first}
		for _, in := range st.In {
			if in.Kind != "weight" || in.Weight < 0 || in.Weight >= len(e.plan.Weights) {
				continue
			}
			w, ok, err := e.readFloats(e.weights.Add(in.Offset), in.DType, in.Elems(T))
			if err != nil {
				return fmt.Errorf("checking weight %s: %w", in.Value, err)
			}
			if wn, wi, _ := prep.CountNonFinite(w); ok && wn+wi > 0 {
				nf.BadWeights = append(nf.BadWeights, fmt.Sprintf("@%s (%d NaN, %d infinite)", e.plan.Weights[in.Weight].Name, wn, wi))
			}
		}
		return nf
	}
	return nil
}

// readFloats copies n elements of a float dtype at p to the host as
// float32; ok is false for other dtypes (integers, quantised blocks).
func (e *Executor) readFloats(p cuda.DevicePtr, dtype string, n int) ([]float32, bool, error) {
	switch dtype {
	case "f32":
		out := make([]float32, n)
		return out, true, cuda.Download(e.q, out, p)
	case "bf16", "f16":
		h := make([]uint16, n)
		if err := cuda.Download(e.q, h, p); err != nil {
			return nil, false, err
		}
		out := make([]float32, n)
		for i, x := range h {
			if dtype == "bf16" {
				out[i] = cuda.BF16ToF32(x)
			} else {
				out[i] = cuda.F16ToF32(x)
			}
		}
		return out, true, nil
	}
	return nil, false, nil
}
