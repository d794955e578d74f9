package gpu

import (
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync"

	"lagc/cuda"
	"lagc/lower"
	"lagc/prep"
)

// uploadWeights reads every weight a kernel uses from ws as float32,
// derives the transformed ones (concat, reshape) on the host, converts to
// the plan's device dtype (bf16 rounds to nearest even) and copies it to
// its offset. One tensor is held at a time, plus the sources of derived
// weights.
func (e *Executor) uploadWeights(ws WeightSource) error {
	p := e.plan
	host := map[int][]float32{} // sources of derived weights, read once
	var read func(i int) ([]float32, error)
	read = func(i int) ([]float32, error) {
		if d, ok := host[i]; ok {
			return d, nil
		}
		w := p.Weights[i]
		if w.From == nil {
			d, err := ws.ReadF32(w.Name)
			if err != nil {
				return nil, fmt.Errorf("weight %s: %w", w.Name, err)
			}
			if len(d) != elems(w.Shape) {
				return nil, fmt.Errorf("weight %s has %d elements, the plan expects %v", w.Name, len(d), w.Shape)
			}
			return d, nil
		}
		srcs := make([][]float32, len(w.From.Srcs))
		for j, s := range w.From.Srcs {
			if s < 0 || s >= len(p.Weights) {
				return nil, fmt.Errorf("weight %s derives from weight #%d, outside the plan", w.Name, s)
			}
			d, err := read(s)
			if err != nil {
				return nil, err
			}
			host[s] = d
			srcs[j] = d
		}
		return derive(p, w, srcs)
	}
	for i, w := range p.Weights {
		if w.Offset < 0 {
			continue
		}
		d, err := read(i)
		if err != nil {
			return err
		}
		dt, err := dtypeOf(w.DType)
		if err != nil {
			return fmt.Errorf("weight %s: %w", w.Name, err)
		}
		if w.Layout == lower.LayoutGateUpSplit {
			if d, err = splitGateUp(d, w.Shape); err != nil {
				return fmt.Errorf("weight %s: %w", w.Name, err)
			}
		} else if w.Layout != "" {
			return fmt.Errorf("weight %s: unknown layout %q", w.Name, w.Layout)
		}
		b := encode(d, dt)
		if int64(len(b)) != w.Bytes {
			return fmt.Errorf("weight %s: %d bytes encoded, the plan has %d", w.Name, len(b), w.Bytes)
		}
		if err := e.q.CopyHtoD(e.weights.Add(w.Offset), b); err != nil {
			return fmt.Errorf("uploading weight %s: %w", w.Name, err)
		}
	}
	return nil
}

// splitGateUp reorders a fused expert stack [E,2I,H] (per expert: I gate
// rows, then I up rows) into every gate row [E,I,H], then every up row.
func splitGateUp(d []float32, shape []int) ([]float32, error) {
	if len(shape) != 3 || shape[1]%2 != 0 || len(d) != elems(shape) {
		return nil, fmt.Errorf("a fused gate_up stack must be [E,2I,H], is %v", shape)
	}
	E, I, H := shape[0], shape[1]/2, shape[2]
	out := make([]float32, len(d))
	half := E * I * H
	for ex := 0; ex < E; ex++ {
		src := d[ex*2*I*H:]
		copy(out[ex*I*H:(ex+1)*I*H], src[:I*H])
		copy(out[half+ex*I*H:half+(ex+1)*I*H], src[I*H:2*I*H])
	}
	return out, nil
}

func elems(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

// derive applies a load-time transform.
func derive(p *lower.Plan, w lower.Weight, srcs [][]float32) ([]float32, error) {
	shapes := make([][]int, len(w.From.Srcs))
	for i, s := range w.From.Srcs {
		shapes[i] = p.Weights[s].Shape
	}
	d, err := prep.Derive(w.From.Op, w.From.Axis, srcs, shapes)
	if err != nil {
		return nil, fmt.Errorf("weight %s: %w", w.Name, err)
	}
	if len(d) != elems(w.Shape) {
		return nil, fmt.Errorf("weight %s: derived %d elements, its shape %v has %d", w.Name, len(d), w.Shape, elems(w.Shape))
	}
	return d, nil
}

// encode converts float32 values to dt's bytes, in parallel for big tensors.
func encode(d []float32, dt cuda.DType) []byte {
	switch dt {
	case cuda.F32:
		return cuda.AsBytes(d)
	case cuda.BF16, cuda.F16:
		h := make([]uint16, len(d))
		conv := cuda.F32ToBF16
		if dt == cuda.F16 {
			conv = cuda.F32ToF16
		}
		parallel(len(d), func(lo, hi int) {
			for i := lo; i < hi; i++ {
				h[i] = conv(d[i])
			}
		})
		return cuda.AsBytes(h)
	}
	return nil
}

func parallel(n int, f func(lo, hi int)) {
	const grain = 1 << 16
	w := min(runtime.GOMAXPROCS(0), (n+grain-1)/grain)
	if w <= 1 {
		f(0, n)
		return
	}
	var wg sync.WaitGroup
	per := (n + w - 1) / w
	for lo := 0; lo < n; lo += per {
		wg.Add(1)
		go func(lo, hi int) {
			defer wg.Done()
			f(lo, hi)
		}(lo, min(lo+per, n))
	}
	wg.Wait()
}

// syntheticWeights fills every uploaded weight on the device with a hash
// of its index: no host copies (a synthetic Laguna-S-2.1 layer is 5 GB).
// Matmul weights are uniform in ±1/sqrt(K) so activations keep their
// scale through the layers; norm weights are near 1; the router bias is
// small, so routing is spread over the experts.
func (e *Executor) syntheticWeights(seed uint32) error {
	for i, w := range e.plan.Weights {
		if w.Offset < 0 {
			continue
		}
		offset, scale := float32(0), float32(1)
		switch {
		case strings.HasSuffix(w.Name, "norm.weight"):
			offset, scale = 1, 0.1
		case strings.HasSuffix(w.Name, ".bias"):
			scale = 0.01
		case strings.HasPrefix(w.Name, "token_embd") && len(w.Shape) == 2:
			scale = 1
		case len(w.Shape) >= 2:
			scale = float32(1 / math.Sqrt(float64(w.Shape[len(w.Shape)-1])))
		}
		l := lower.FillHash(w.DType, int64(elems(w.Shape)), seed*0x9e3779b9+uint32(i), offset, scale, lower.Ptr{Base: lower.BaseWeights, Offset: w.Offset})
		b, err := e.k.Bind(l, e.base)
		if err == nil {
			err = b.Launch(e.q)
		}
		if err != nil {
			return fmt.Errorf("filling weight %s: %w", w.Name, err)
		}
	}
	if e.s == nil {
		return nil
	}
	return e.s.Synchronize()
}

// uploadRopes computes the plan's rotary tables and copies them to their
// offsets.
func (e *Executor) uploadRopes() error {
	for _, r := range e.plan.Ropes {
		tab, err := prep.NewRopeTable(r.Params)
		if err != nil {
			return fmt.Errorf("rope table at %d: %w", r.Offset, err)
		}
		if n := RopeTableBytes(tab); n != r.Bytes || r.Offset < 0 || r.Offset+n > e.plan.RopeBytes ||
			tab.RotaryDim != r.RotaryDim || tab.AttnFactor != r.AttnFactor {
			return fmt.Errorf("rope table at %d: %d bytes of rotary width %d (factor %g), the plan has %d bytes of %d (factor %g)",
				r.Offset, n, tab.RotaryDim, tab.AttnFactor, r.Bytes, r.RotaryDim, r.AttnFactor)
		}
		if _, err := UploadRope(e.q, e.ropes.Add(r.Offset), tab); err != nil {
			return err
		}
	}
	return nil
}
