package cpu

import (
	"fmt"
	"sync"

	"lagc/exec/cpu/internal/vec"
	"lagc/prep"
	"lagc/quant"
)

// Matrix is a weight as the matrix kernels (matmul and its fused forms, the
// experts, the embedding) read it: Rows rows of Cols elements in their
// stored type. An f32 matrix is read in place; any other type (f16, bf16,
// the block-quantised ones) stays in its stored bytes and is converted a
// block of rows at a time into scratch, so a quantised model is never
// expanded whole. Conversions are exact functions of the stored bytes, and
// the kernels then run the same float32 arithmetic, so a matrix gives
// bitwise the results of its dequantised f32 copy.
type Matrix struct {
	Type       quant.Type
	Rows, Cols int
	F32        []float32 // Type F32: Rows*Cols values, row-major
	Raw        []byte    // other types: Rows rows of RowBytes bytes
	RowBytes   int
}

// MatrixF32 views w [rows, cols] as a Matrix.
func MatrixF32(w []float32, rows, cols int) *Matrix {
	return &Matrix{Type: quant.F32, Rows: rows, Cols: cols, F32: w, RowBytes: 4 * cols}
}

// NewMatrix wraps raw, rows rows of cols elements stored as t (for f32 use
// MatrixF32). It checks that quant converts t, that cols is a whole number
// of t's blocks and that raw has exactly the bytes of the rows.
func NewMatrix(t quant.Type, raw []byte, rows, cols int) (*Matrix, error) {
	if rows <= 0 || cols <= 0 {
		return nil, fmt.Errorf("cpu.NewMatrix: %d x %d %s: dimensions must be positive", rows, cols, t)
	}
	if t == quant.F32 {
		return nil, fmt.Errorf("cpu.NewMatrix: f32 matrices are float32 slices (MatrixF32)")
	}
	if !t.Supported() {
		return nil, fmt.Errorf("cpu.NewMatrix: type %s cannot be converted (supported: %v)", t, quant.Names())
	}
	rb, err := t.RowBytes(cols)
	if err != nil {
		return nil, fmt.Errorf("cpu.NewMatrix: rows of %d elements: %w", cols, err)
	}
	if want := prod(int(rb), rows); want < 0 || len(raw) != want {
		return nil, fmt.Errorf("cpu.NewMatrix: %d rows of %d %s elements take %d bytes each, got %d bytes in all", rows, cols, t, rb, len(raw))
	}
	return &Matrix{Type: t, Rows: rows, Cols: cols, Raw: raw, RowBytes: int(rb)}, nil
}

// Slice returns rows [r0, r1) as a Matrix sharing m's storage.
func (m *Matrix) Slice(r0, r1 int) *Matrix {
	s := *m
	s.Rows = r1 - r0
	if m.Type == quant.F32 {
		s.F32 = m.F32[r0*m.Cols : r1*m.Cols]
	} else {
		s.Raw = m.Raw[r0*m.RowBytes : r1*m.RowBytes]
	}
	return &s
}

// rowsF32 returns rows [r0, r1) as float32: m's own memory for f32, else
// converted into buf, which must hold (r1-r0)*Cols values.
func (m *Matrix) rowsF32(buf []float32, r0, r1 int) []float32 {
	if m.Type == quant.F32 {
		return m.F32[r0*m.Cols : r1*m.Cols]
	}
	out := buf[:(r1-r0)*m.Cols]
	// Sizes were checked by NewMatrix: Dequantize cannot fail here.
	_ = quant.Dequantize(m.Type, out, m.Raw[r0*m.RowBytes:r1*m.RowBytes])
	return out
}

// directBF16 reports whether the matrix kernels multiply m's rows in place
// (bf16 on a machine with a kernel for them) rather than converting them.
func (m *Matrix) directBF16() bool {
	return m.Type == quant.BF16 && vec.DirectBF16(m.Cols)
}

// check reports a matrix that is not rows x cols.
func (m *Matrix) check(op, name string, rows, cols int) error {
	if m == nil {
		return fmt.Errorf("cpu.%s: %s: no matrix", op, name)
	}
	if m.Rows != rows || m.Cols != cols {
		return fmt.Errorf("cpu.%s: %s is [%d,%d], want [%d,%d]", op, name, m.Rows, m.Cols, rows, cols)
	}
	if m.Type == quant.F32 {
		return checkLen(op, name, len(m.F32), rows, cols)
	}
	if want := prod(m.RowBytes, rows); len(m.Raw) != want {
		return fmt.Errorf("cpu.%s: %s has %d bytes, want %d rows of %d", op, name, len(m.Raw), rows, m.RowBytes)
	}
	return nil
}

// scratch recycles the aligned buffers that converted rows are written to.
var scratch sync.Pool

// getScratch returns an aligned buffer of n floats (contents undefined);
// give it back with putScratch.
func getScratch(n int) *[]float32 {
	if p, ok := scratch.Get().(*[]float32); ok && cap(*p) >= n {
		*p = (*p)[:n]
		return p
	}
	b := vec.AlignedFloats(n)
	return &b
}

func putScratch(p *[]float32) { scratch.Put(p) }

// WeightTypes counts the weights the executor holds by the type it keeps
// them in (f16 and bf16 expanded at load count as f32).
func (e *Executor) WeightTypes() map[quant.Type]int {
	n := map[quant.Type]int{}
	for _, m := range e.weights {
		n[m.Type]++
	}
	return n
}

// countNonFinite counts the NaNs and infinities among m's values,
// converting a block of rows at a time.
func (m *Matrix) countNonFinite() (nan, inf int) {
	if m.Type == quant.F32 {
		nan, inf, _ = prep.CountNonFinite(m.F32)
		return nan, inf
	}
	step := max(1, 4096/max(m.Cols, 1))
	buf := getScratch(step * m.Cols)
	defer putScratch(buf)
	for r := 0; r < m.Rows; r += step {
		a, b, _ := prep.CountNonFinite(m.rowsF32(*buf, r, min(r+step, m.Rows)))
		nan, inf = nan+a, inf+b
	}
	return nan, inf
}
