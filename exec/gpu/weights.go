package gpu

import (
	"fmt"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"

	"lagc/cuda"
	"lagc/lower"
	"lagc/prep"
	"lagc/quant"
)

// convertWeight returns weight i of p as the device holds it (w.Bytes
// bytes): a block-quantised one repacked into its device layout, any other
// read as float32, derived (concat, reshape) and converted to the device
// dtype (bf16 rounds to nearest even). It only reads ws, so several may
// run at once; the sources of a derived weight are read for it alone.
func convertWeight(p *lower.Plan, ws WeightSource, i int) ([]byte, error) {
	w := p.Weights[i]
	if lower.IsQuantLayout(w.Layout) {
		return convertQuant(p, ws, i)
	}
	d, err := readWeightF32(p, ws, i)
	if err != nil {
		return nil, err
	}
	dt, err := dtypeOf(w.DType)
	if err != nil {
		return nil, fmt.Errorf("weight %s: %w", w.Name, err)
	}
	if w.Layout == lower.LayoutGateUpSplit {
		if d, err = splitGateUp(d, w.Shape); err != nil {
			return nil, fmt.Errorf("weight %s: %w", w.Name, err)
		}
	} else if w.Layout != "" {
		return nil, fmt.Errorf("weight %s: unknown layout %q", w.Name, w.Layout)
	}
	b := encode(d, dt)
	if int64(len(b)) != w.Bytes {
		return nil, fmt.Errorf("weight %s: %d bytes encoded, the plan has %d", w.Name, len(b), w.Bytes)
	}
	return b, nil
}

// readWeightF32 reads weight i as float32, deriving it from its sources.
func readWeightF32(p *lower.Plan, ws WeightSource, i int) ([]float32, error) {
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
		d, err := readWeightF32(p, ws, s)
		if err != nil {
			return nil, err
		}
		srcs[j] = d
	}
	return derive(p, w, srcs)
}

// RawSource is a WeightSource that also gives tensors as stored: the
// blocks of a quantised one (ckpt.Checkpoint is one).
type RawSource interface {
	Raw(name string) ([]byte, error)
}

// convertQuant is block-quantised weight i in the device layout: its
// blocks as stored (derived ones joined as whole rows of blocks), the gate
// and up rows of a fused stack split, then repacked.
func convertQuant(p *lower.Plan, ws WeightSource, i int) ([]byte, error) {
	w := p.Weights[i]
	t, err := quant.ParseType(w.DType)
	if err != nil {
		return nil, fmt.Errorf("weight %s: %w", w.Name, err)
	}
	rs, ok := ws.(RawSource)
	if !ok {
		return nil, fmt.Errorf("weight %s is %s: the weight source cannot give stored blocks", w.Name, t)
	}
	parts, ok, err := gateUpParts(p, rs, i)
	if err != nil {
		return nil, err
	}
	if !ok {
		raw, err := rawWeight(p, rs, i)
		if err != nil {
			return nil, err
		}
		if lower.GateUpSplit(w.Layout) {
			if raw, err = splitGateUpRows(raw, w.Shape, t); err != nil {
				return nil, fmt.Errorf("weight %s: %w", w.Name, err)
			}
		}
		parts = [][]byte{raw}
	}
	K := w.Shape[len(w.Shape)-1]
	rows := elems(w.Shape) / K
	dst := make([]byte, w.Bytes)
	if err := lower.RepackQuantParts(t, rows, K, parts, dst); err != nil {
		return nil, fmt.Errorf("weight %s: %w", w.Name, err)
	}
	return dst, nil
}

// gateUpParts gives the split rows of a gate_up stack made by joining a
// gate and an up stack ([E,I,H] each) along the rows without copying
// them: the split puts every gate row before every up row, which is the
// gate stack's blocks, then the up stack's. ok is false for any other
// weight.
func gateUpParts(p *lower.Plan, rs RawSource, i int) (parts [][]byte, ok bool, err error) {
	if !gateUpInPlace(p, i) {
		return nil, false, nil
	}
	for _, s := range p.Weights[i].From.Srcs {
		b, err := rawWeight(p, rs, s)
		if err != nil {
			return nil, false, err
		}
		parts = append(parts, b)
	}
	return parts, true, nil
}

// rawWeight is weight i's stored bytes: read, or derived from its
// sources' (a concatenation of whole rows of blocks, or a reshape).
func rawWeight(p *lower.Plan, rs RawSource, i int) ([]byte, error) {
	w := p.Weights[i]
	t, err := quant.ParseType(w.Source)
	if err != nil {
		return nil, fmt.Errorf("weight %s: %w", w.Name, err)
	}
	want, err := t.RowBytes(elems(w.Shape))
	if err != nil {
		return nil, fmt.Errorf("weight %s: %w", w.Name, err)
	}
	var b []byte
	switch {
	case w.From == nil:
		if b, err = rs.Raw(w.Name); err != nil {
			return nil, fmt.Errorf("weight %s: %w", w.Name, err)
		}
	case w.From.Op == "reshape" && len(w.From.Srcs) == 1:
		if b, err = rawWeight(p, rs, w.From.Srcs[0]); err != nil {
			return nil, err
		}
	case w.From.Op == "concat":
		// outer runs of each source's inner bytes, in source order
		outer := 1
		for _, d := range w.Shape[:w.From.Axis] {
			outer *= d
		}
		parts := make([][]byte, len(w.From.Srcs))
		inner := make([]int64, len(w.From.Srcs))
		for j, s := range w.From.Srcs {
			if parts[j], err = rawWeight(p, rs, s); err != nil {
				return nil, err
			}
			inner[j] = int64(len(parts[j])) / int64(outer)
		}
		b = make([]byte, 0, want)
		for o := 0; o < outer; o++ {
			for j := range parts {
				b = append(b, parts[j][int64(o)*inner[j]:int64(o+1)*inner[j]]...)
			}
		}
	default:
		return nil, fmt.Errorf("weight %s: transform %s of quantised weights", w.Name, w.From.Op)
	}
	if int64(len(b)) != want {
		return nil, fmt.Errorf("weight %s: %d bytes of %s, its shape %v needs %d", w.Name, len(b), t, w.Shape, want)
	}
	return b, nil
}

// gateUpInPlace reports whether weight i is a split gate_up stack joined
// from a gate and an up stack of the same type ([E,I,H] each) along the
// rows, which gateUpParts repacks without copies.
func gateUpInPlace(p *lower.Plan, i int) bool {
	w := p.Weights[i]
	f := w.From
	if !lower.GateUpSplit(w.Layout) || f == nil || f.Op != "concat" || f.Axis != 1 || len(f.Srcs) != 2 || len(w.Shape) != 3 {
		return false
	}
	half := []int{w.Shape[0], w.Shape[1] / 2, w.Shape[2]}
	for _, s := range f.Srcs {
		if s < 0 || s >= len(p.Weights) || !slices.Equal(p.Weights[s].Shape, half) || p.Weights[s].Source != w.Source {
			return false
		}
	}
	return true
}

// splitGateUpRows is splitGateUp on rows of blocks.
func splitGateUpRows(d []byte, shape []int, t quant.Type) ([]byte, error) {
	if len(shape) != 3 || shape[1]%2 != 0 {
		return nil, fmt.Errorf("a fused gate_up stack must be [E,2I,H], is %v", shape)
	}
	E, I := shape[0], shape[1]/2
	row, err := t.RowBytes(shape[2])
	if err != nil {
		return nil, err
	}
	if int64(len(d)) != int64(E)*2*int64(I)*row {
		return nil, fmt.Errorf("a fused gate_up stack of %d bytes, not %v of %s", len(d), shape, t)
	}
	out := make([]byte, len(d))
	half := int64(E) * int64(I) * row
	for ex := int64(0); ex < int64(E); ex++ {
		src := d[ex*2*int64(I)*row:]
		copy(out[ex*int64(I)*row:], src[:int64(I)*row])
		copy(out[half+ex*int64(I)*row:], src[int64(I)*row:2*int64(I)*row])
	}
	return out, nil
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
		if lower.IsQuantLayout(w.Layout) {
			t, err := quant.ParseType(w.DType)
			if err != nil {
				return fmt.Errorf("filling weight %s: %w", w.Name, err)
			}
			K := w.Shape[len(w.Shape)-1]
			l, err := lower.QSynth(t, lower.Ptr{Base: lower.BaseWeights, Offset: w.Offset}, elems(w.Shape)/K, K, seed*0x9e3779b9+uint32(i))
			if err == nil {
				var b KernelLaunch
				if b, err = e.k.Bind(l, e.base); err == nil {
					err = b.Launch(e.q)
				}
			}
			if err != nil {
				return fmt.Errorf("filling weight %s: %w", w.Name, err)
			}
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

// fillShadows makes the plan's bf16 copies of quantised weights
// (lower.Plan.Shadows) from the weights now on the device.
func (e *Executor) fillShadows() error {
	ls, err := e.plan.ShadowInit()
	if err != nil || len(ls) == 0 {
		return err
	}
	for i, l := range ls { // ShadowInit: one launch a shadow, in order
		b, err := e.k.Bind(l, e.base)
		if err == nil {
			err = b.Launch(e.q)
		}
		if err != nil {
			return fmt.Errorf("bf16 copy of quantised weight %s: %w", e.plan.Weights[e.plan.Shadows[i].Weight].Name, err)
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
