package ir

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// AttrKind is the type of an op attribute.
type AttrKind uint8

// Attribute kinds. Values are stored as int, float64, string, []int or Shape.
const (
	AttrKindInt AttrKind = iota + 1
	AttrKindFloat
	AttrKindString
	AttrKindInts
	AttrKindShape
)

func (k AttrKind) String() string {
	switch k {
	case AttrKindInt:
		return "int"
	case AttrKindFloat:
		return "float"
	case AttrKindString:
		return "string"
	case AttrKindInts:
		return "int list"
	case AttrKindShape:
		return "shape"
	}
	return "unknown"
}

// Attrs are a node's attributes by name.
type Attrs map[string]any

// Clone returns a deep copy of a.
func (a Attrs) Clone() Attrs {
	if a == nil {
		return nil
	}
	out := make(Attrs, len(a))
	for k, v := range a {
		switch x := v.(type) {
		case []int:
			out[k] = append([]int(nil), x...)
		case Shape:
			out[k] = x.Clone()
		default:
			out[k] = v
		}
	}
	return out
}

// Keys returns the attribute names, sorted.
func (a Attrs) Keys() []string {
	ks := make([]string, 0, len(a))
	for k := range a {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// coerceAttr converts v to the Go representation of kind k, accepting the
// natural widenings (an int where a float is wanted, an int list for a
// constant shape); ok is false when v has the wrong type.
func coerceAttr(k AttrKind, v any) (any, bool) {
	switch k {
	case AttrKindInt:
		switch x := v.(type) {
		case int:
			return x, true
		case int64:
			return int(x), true
		case float64:
			if x == math.Trunc(x) && math.Abs(x) < 1<<53 {
				return int(x), true
			}
		}
	case AttrKindFloat:
		switch x := v.(type) {
		case float64:
			return x, true
		case int:
			return float64(x), true
		case int64:
			return float64(x), true
		}
	case AttrKindString:
		if s, ok := v.(string); ok {
			return s, true
		}
	case AttrKindInts:
		switch x := v.(type) {
		case []int:
			return x, true
		case Shape:
			out := make([]int, len(x))
			for i, d := range x {
				if !d.IsConst() {
					return nil, false
				}
				out[i] = d.N
			}
			return out, true
		}
	case AttrKindShape:
		switch x := v.(type) {
		case Shape:
			return x, true
		case []int:
			return Consts(x...), true
		}
	}
	return nil, false
}

// formatAttr writes v in the IR text syntax.
func formatAttr(v any) string {
	switch x := v.(type) {
	case int:
		return strconv.Itoa(x)
	case float64:
		return formatFloat(x)
	case string:
		return strconv.Quote(x)
	case []int:
		parts := make([]string, len(x))
		for i, n := range x {
			parts[i] = strconv.Itoa(n)
		}
		return "[" + strings.Join(parts, ",") + "]"
	case Shape:
		return x.String()
	}
	return fmt.Sprintf("%v", v)
}

// formatFloat prints f so that it reads back as a float, exactly.
func formatFloat(f float64) string {
	s := strconv.FormatFloat(f, 'g', -1, 64)
	if !strings.ContainsAny(s, ".eEIN") {
		s += ".0"
	}
	return s
}

// Check converts v to the spec's kind (ints widen to floats, constant shapes
// and int lists interchange) and checks enums; the error says what was
// expected.
func (s AttrSpec) Check(v any) (any, error) {
	c, ok := coerceAttr(s.Kind, v)
	if !ok {
		return nil, fmt.Errorf("expected %s for attribute %s, got %s", s.Kind, s.Name, formatAttr(v))
	}
	if len(s.Enum) > 0 && !contains(s.Enum, c.(string)) {
		return nil, fmt.Errorf("expected one of %q for attribute %s, got %q", s.Enum, s.Name, c)
	}
	return c, nil
}
