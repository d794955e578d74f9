package ir

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// Dim is one dimension of a shape: a constant size, or a symbol such as T
// (tokens in this step) bound to a size only when a plan is made.
type Dim struct {
	Sym string // "" for a constant
	N   int    // the size when Sym == ""
}

// C returns a constant dimension.
func C(n int) Dim { return Dim{N: n} }

// S returns a symbolic dimension.
func S(sym string) Dim { return Dim{Sym: sym} }

// IsConst reports whether d is a constant.
func (d Dim) IsConst() bool { return d.Sym == "" }

func (d Dim) String() string {
	if d.Sym != "" {
		return d.Sym
	}
	return strconv.Itoa(d.N)
}

// Env binds symbolic dimensions to sizes, e.g. Env{"T": 1} for decode.
type Env map[string]int

// String lists the bindings, sorted: "T=1, U=4".
func (e Env) String() string {
	parts := make([]string, 0, len(e))
	for k, v := range e {
		parts = append(parts, k+"="+strconv.Itoa(v))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

// Eval returns the size of d under env.
func (d Dim) Eval(env Env) (int, error) {
	if d.Sym == "" {
		return d.N, nil
	}
	n, ok := env[d.Sym]
	if !ok {
		return 0, fmt.Errorf("symbolic dimension %s is not bound", d.Sym)
	}
	return n, nil
}

// Shape is a row-major shape, outermost dimension first.
type Shape []Dim

// Consts builds a shape of constant dimensions.
func Consts(ns ...int) Shape {
	s := make(Shape, len(ns))
	for i, n := range ns {
		s[i] = C(n)
	}
	return s
}

func (s Shape) String() string {
	parts := make([]string, len(s))
	for i, d := range s {
		parts[i] = d.String()
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// Equal reports whether two shapes are identical (symbols by name).
func (s Shape) Equal(o Shape) bool {
	if len(s) != len(o) {
		return false
	}
	for i := range s {
		if s[i] != o[i] {
			return false
		}
	}
	return true
}

// Clone returns a copy of s.
func (s Shape) Clone() Shape { return append(Shape(nil), s...) }

// Eval binds every symbol of s; the executor's concrete shape.
func (s Shape) Eval(env Env) ([]int, error) {
	out := make([]int, len(s))
	for i, d := range s {
		n, err := d.Eval(env)
		if err != nil {
			return nil, err
		}
		out[i] = n
	}
	return out, nil
}

// MaxElems bounds the element count Elems computes: a byte size of that
// many elements of any dtype, rounded up to an alignment, still fits int64.
const MaxElems = math.MaxInt64 / 16

// Elems returns the number of elements of s under env. A count beyond
// MaxElems (a symbol bound to a huge size, say) is an error, not a wrapped
// product.
func (s Shape) Elems(env Env) (int64, error) {
	n := int64(1)
	for _, d := range s {
		v, err := d.Eval(env)
		if err != nil {
			return 0, err
		}
		if v < 0 {
			return 0, fmt.Errorf("shape %s with %s: dimension %d is negative", s, env, v)
		}
		if v != 0 && n > MaxElems/int64(v) {
			return 0, fmt.Errorf("shape %s with %s has more than %d elements", s, env, int64(MaxElems))
		}
		n *= int64(v)
	}
	return n, nil
}

// ConstElems returns the number of elements when s has no symbols.
func (s Shape) ConstElems() (int64, bool) {
	n := int64(1)
	for _, d := range s {
		if d.Sym != "" {
			return 0, false
		}
		n *= int64(d.N)
	}
	return n, true
}

// Type is the dtype and shape of a value.
type Type struct {
	DType DType
	Shape Shape
}

func (t Type) String() string { return t.DType.String() + t.Shape.String() }

// Equal reports whether two types are identical.
func (t Type) Equal(o Type) bool { return t.DType == o.DType && t.Shape.Equal(o.Shape) }

// Bytes returns the storage size of a value of type t under env.
func (t Type) Bytes(env Env) (int64, error) {
	n, err := t.Shape.Elems(env)
	if err != nil {
		return 0, err
	}
	return t.DType.Bytes(n), nil
}

// ParseType parses "bf16[T,3072]".
func ParseType(s string) (Type, error) {
	i := strings.IndexByte(s, '[')
	if i < 0 || !strings.HasSuffix(s, "]") {
		return Type{}, fmt.Errorf("type %q: expected dtype[dims]", s)
	}
	dt, err := ParseDType(s[:i])
	if err != nil {
		return Type{}, err
	}
	sh, err := ParseShape(s[i:])
	if err != nil {
		return Type{}, err
	}
	return Type{dt, sh}, nil
}

// ParseShape parses "[T,48,128]"; "[]" is a scalar.
func ParseShape(s string) (Shape, error) {
	if len(s) < 2 || s[0] != '[' || s[len(s)-1] != ']' {
		return nil, fmt.Errorf("shape %q: expected [dims]", s)
	}
	body := strings.TrimSpace(s[1 : len(s)-1])
	if body == "" {
		return Shape{}, nil
	}
	var out Shape
	for _, f := range strings.Split(body, ",") {
		f = strings.TrimSpace(f)
		if n, err := strconv.Atoi(f); err == nil {
			if n < 0 {
				return nil, fmt.Errorf("shape %q: negative dimension %d", s, n)
			}
			out = append(out, C(n))
			continue
		}
		if !isIdent(f) {
			return nil, fmt.Errorf("shape %q: dimension %q is neither a size nor a symbol", s, f)
		}
		out = append(out, S(f))
	}
	return out, nil
}

func isIdent(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		switch {
		case r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z':
		case i > 0 && r >= '0' && r <= '9':
		default:
			return false
		}
	}
	return true
}
