package cpu

import (
	"fmt"

	"lagc/exec/cpu/internal/vec"
	"lagc/ir"
	"lagc/prep"
	"lagc/quant"
)

// WeightSource provides a checkpoint's tensors as float32 by canonical name
// (ckpt.Checkpoint satisfies it).
type WeightSource interface {
	ReadF32(name string) ([]float32, error)
}

// RawSource is a WeightSource that also gives a tensor's stored bytes, in
// the dtype the graph declares for it (ckpt.Checkpoint satisfies it, and
// engine binds the graph to the checkpoint's dtypes). With one, matrices
// stay in their stored type; a source with ReadF32 only has every weight
// read as float32 (a quantised one dequantised whole by the source: the
// reference the tests hold the stored path to).
type RawSource interface {
	WeightSource
	Raw(name string) ([]byte, error)
}

// Options tune NewExecutorWith.
type Options struct {
	// Slots is the number of sequence slots for Step (0: 1).
	Slots int
	// F32Budget bounds the bytes of float32 copies made of f16 and bf16
	// matrices at load (exact, and several times faster to multiply than
	// converting rows at every step); matrices past it stay in their
	// stored bytes. 0 means DefaultF32Budget, negative none. Block-quantised
	// matrices are never expanded, nor bf16 ones where the machine has a
	// kernel that multiplies them in place (at least as fast, half the
	// bytes, the same results).
	F32Budget int64
}

// DefaultF32Budget is the F32Budget of NewExecutor.
const DefaultF32Budget = 1 << 30

// matrixInputs lists, per op, the inputs that the kernels read as a Matrix
// (any stored type); every other weight input is read as float32.
var matrixInputs = map[string]func(i int) bool{
	"embedding":     func(i int) bool { return i == 1 },
	"matmul":        func(i int) bool { return i == 1 },
	"matmul_split":  func(i int) bool { return i == 1 },
	"matmul_swiglu": func(i int) bool { return i == 1 },
	"matmul_add":    func(i int) bool { return i == 1 },
	"moe_experts":   func(i int) bool { return i >= 3 },
	"moe_grouped":   func(i int) bool { return i >= 3 }, // the residual is an activation
}

// isMatrixInput reports whether input i of op is read as a Matrix.
func isMatrixInput(op string, i int) bool {
	m := matrixInputs[op]
	return m != nil && m(i)
}

// weightLoader reads a graph's weights once each, deriving the load-time
// transforms (concat, reshape) on float32 or on stored bytes.
type weightLoader struct {
	ws     WeightSource
	raw    RawSource // nil: the source gives float32 only
	f32    map[*ir.Value][]float32
	bytes  map[*ir.Value][]byte
	budget int64
}

// loadWeights gives every weight a node reads its Matrix: f32 as float32;
// f16 and bf16 as float32 while o's budget lasts; everything else, and
// every weight when the source has no stored bytes, in the stored type
// unless an op reads it as plain float32.
func (e *Executor) loadWeights(ws WeightSource, o Options) error {
	l := &weightLoader{ws: ws, f32: map[*ir.Value][]float32{}, bytes: map[*ir.Value][]byte{}, budget: o.F32Budget}
	if l.budget == 0 {
		l.budget = DefaultF32Budget
	}
	l.raw, _ = ws.(RawSource)
	asF32 := map[*ir.Value]bool{} // read by an op as plain float32
	read := map[*ir.Value]bool{}
	for _, n := range e.order {
		for i, v := range n.Inputs {
			if v.Kind != ir.Weight {
				continue
			}
			read[v] = true
			if !isMatrixInput(n.Op, i) {
				asF32[v] = true
			}
		}
	}
	for _, w := range e.g.Weights {
		if !read[w] {
			continue // a source of a derived weight only
		}
		m, err := l.matrix(w, asF32[w])
		if err != nil {
			return err
		}
		e.weights[w] = m
	}
	return nil
}

// matrix loads w, in float32 when an op needs it so.
func (l *weightLoader) matrix(w *ir.Value, needF32 bool) (*Matrix, error) {
	shape, err := w.Type.Shape.Eval(nil)
	if err != nil {
		return nil, fmt.Errorf("weight %s: %w", w.Name, err)
	}
	rows, cols := 1, 1
	if len(shape) > 0 {
		cols = shape[len(shape)-1]
		rows = prodInts(shape[:len(shape)-1])
	}
	t := w.Type.DType.Quant()
	expand := t == quant.F32 || needF32 || l.raw == nil
	kept := t == quant.BF16 && vec.DirectBF16(cols) // multiplied in place, as fast as f32
	if !expand && !kept && (t == quant.F16 || t == quant.BF16) && int64(4*rows*cols) <= l.budget {
		l.budget -= int64(4 * rows * cols)
		expand = true
	}
	if expand {
		d, err := l.floats(w)
		if err != nil {
			return nil, err
		}
		if want := rows * cols; len(d) != want {
			return nil, fmt.Errorf("weight %s has %d elements, the graph expects %v = %d", w.Name, len(d), shape, want)
		}
		return MatrixF32(d, rows, cols), nil
	}
	raw, err := l.stored(w)
	if err != nil {
		return nil, err
	}
	m, err := NewMatrix(t, raw, rows, cols)
	if err != nil {
		return nil, fmt.Errorf("weight %s (%s%v): %w", w.Name, w.Type.DType, shape, err)
	}
	return m, nil
}

// floats returns w as float32, reading or deriving it once.
func (l *weightLoader) floats(w *ir.Value) ([]float32, error) {
	if d, ok := l.f32[w]; ok {
		return d, nil
	}
	var data []float32
	if w.From == nil {
		d, err := l.ws.ReadF32(w.Name)
		if err != nil {
			return nil, fmt.Errorf("weight %s: %w", w.Name, err)
		}
		data = d
	} else {
		srcs := make([][]float32, len(w.From.Srcs))
		for i, s := range w.From.Srcs {
			d, err := l.floats(s)
			if err != nil {
				return nil, err
			}
			srcs[i] = d
		}
		d, err := deriveWeight(w, srcs)
		if err != nil {
			return nil, fmt.Errorf("deriving weight %s: %w", w.Name, err)
		}
		data = d
	}
	l.f32[w] = data
	return data, nil
}

// stored returns w's bytes in its dtype, reading or deriving it once: a
// concatenation joins the sources' bytes, which for block-quantised rows
// needs every joined piece to be whole blocks (ir checks this when the
// weight is derived).
func (l *weightLoader) stored(w *ir.Value) ([]byte, error) {
	if b, ok := l.bytes[w]; ok {
		return b, nil
	}
	n, err := w.Type.Shape.Elems(nil)
	if err != nil {
		return nil, fmt.Errorf("weight %s: %w", w.Name, err)
	}
	want := w.Type.DType.Bytes(n)
	var data []byte
	switch {
	case w.From == nil:
		if data, err = l.raw.Raw(w.Name); err != nil {
			return nil, fmt.Errorf("weight %s: %w", w.Name, err)
		}
	case w.From.Op == "reshape":
		if data, err = l.stored(w.From.Srcs[0]); err != nil {
			return nil, err
		}
	case w.From.Op == "concat":
		if data, err = l.concatStored(w); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("deriving weight %s: unsupported weight transform %q", w.Name, w.From.Op)
	}
	if int64(len(data)) != want {
		return nil, fmt.Errorf("weight %s: %s%s takes %d bytes, the source gave %d", w.Name, w.Type.DType, w.Type.Shape, want, len(data))
	}
	l.bytes[w] = data
	return data, nil
}

// concatStored joins the sources of a concat weight as stored bytes: per
// index of the axes before the concat axis, each source's run of elements.
func (l *weightLoader) concatStored(w *ir.Value) ([]byte, error) {
	dt := w.Type.DType
	shapes := make([][]int, len(w.From.Srcs))
	srcs := make([][]byte, len(w.From.Srcs))
	for i, s := range w.From.Srcs {
		if s.Type.DType != dt {
			return nil, fmt.Errorf("deriving weight %s: source %s is %s, not %s", w.Name, s.Name, s.Type.DType, dt)
		}
		sh, err := s.Type.Shape.Eval(nil)
		if err != nil {
			return nil, err
		}
		shapes[i] = sh
		if srcs[i], err = l.stored(s); err != nil {
			return nil, err
		}
	}
	outer, sizes := axisSplit(shapes, w.From.Attrs["axis"].(int))
	runs := make([]int, len(sizes))
	total := 0
	for i, n := range sizes {
		if n%dt.BlockSize() != 0 {
			return nil, fmt.Errorf("deriving weight %s: runs of %d %s elements of %s are not whole blocks of %d",
				w.Name, n, dt, w.From.Srcs[i].Name, dt.BlockSize())
		}
		runs[i] = int(dt.Bytes(int64(n)))
		total += runs[i]
	}
	out := make([]byte, 0, outer*total)
	for o := 0; o < outer; o++ {
		for i, src := range srcs {
			out = append(out, src[o*runs[i]:(o+1)*runs[i]]...)
		}
	}
	return out, nil
}

// deriveWeight applies a load-time transform (concat or reshape) to
// float32 sources.
func deriveWeight(w *ir.Value, srcs [][]float32) ([]float32, error) {
	shapes := make([][]int, len(srcs))
	for i, s := range w.From.Srcs {
		sh, err := s.Type.Shape.Eval(nil)
		if err != nil {
			return nil, err
		}
		shapes[i] = sh
	}
	axis, _ := w.From.Attrs["axis"].(int)
	return prep.Derive(w.From.Op, axis, srcs, shapes)
}

// axisSplit views tensors of the given shapes as [outer, size_i] around axis.
func axisSplit(shapes [][]int, axis int) (outer int, sizes []int) {
	r := len(shapes[0])
	if axis < 0 {
		axis += r
	}
	outer = prodInts(shapes[0][:axis])
	for _, s := range shapes {
		sizes = append(sizes, prodInts(s[axis:]))
	}
	return outer, sizes
}

func prodInts(s []int) int {
	p := 1
	for _, x := range s {
		p *= x
	}
	return p
}
