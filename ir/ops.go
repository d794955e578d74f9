package ir

import (
	"fmt"
	"sort"
)

// AttrSpec describes one attribute of an op.
type AttrSpec struct {
	Name     string
	Kind     AttrKind
	Required bool
	Default  any      // used when absent and not Required
	Enum     []string // allowed values of a string attribute
}

// OpDef is one entry of the op table: the contract every frontend, pass and
// executor shares (docs/CONTRACTS.md).
type OpDef struct {
	Name string
	Doc  string // one line
	// Inputs names the operands; a final name ending in "..." takes one or
	// more values.
	Inputs []string
	Attrs  []AttrSpec
	// SideEffect marks ops that change state outside the graph (attention
	// appends to its KV cache): DCE and CSE leave them alone.
	SideEffect bool
	// KVCache marks the ops that append to and attend over the KV cache
	// of their `layer` attribute (attention and its gated form): their
	// inputs begin q, k, v, pos and their attributes include layer,
	// window and scale.
	KVCache bool
	// Commutative marks two-operand ops whose operands may be swapped
	// (add, mul): patterns match them in either order.
	Commutative bool
	// InPlace, when set, returns the input of n whose buffer n's output may
	// take over once no later node reads that input (-1: none): the output
	// has the input's type, and each of its elements is the input's element
	// plus what the other inputs give, so the kernels accumulate into it.
	InPlace func(n *Node) int
	// Infer returns the output types for the given input types and
	// attributes (already checked against Attrs and defaulted).
	Infer func(in []Type, a Attrs) ([]Type, error)
}

// Variadic reports whether the last input takes several values.
func (d *OpDef) Variadic() bool {
	return len(d.Inputs) > 0 && len(d.Inputs[len(d.Inputs)-1]) > 3 &&
		d.Inputs[len(d.Inputs)-1][len(d.Inputs[len(d.Inputs)-1])-3:] == "..."
}

// Attr returns the spec of the named attribute.
func (d *OpDef) Attr(name string) (AttrSpec, bool) {
	for _, s := range d.Attrs {
		if s.Name == name {
			return s, true
		}
	}
	return AttrSpec{}, false
}

// inputName names operand i for error messages.
func (d *OpDef) inputName(i int) string {
	if i < len(d.Inputs) {
		return d.Inputs[i]
	}
	if d.Variadic() {
		return d.Inputs[len(d.Inputs)-1]
	}
	return fmt.Sprintf("#%d", i)
}

var opTable = map[string]*OpDef{}

func defOp(d *OpDef) {
	if _, dup := opTable[d.Name]; dup {
		panic("ir: op defined twice: " + d.Name) // programming error in this file
	}
	opTable[d.Name] = d
}

// IsAttention reports whether n attends over a KV cache (OpDef.KVCache).
func IsAttention(n *Node) bool {
	d, ok := n.Def()
	return ok && d.KVCache
}

// Op returns the definition of the named op.
func Op(name string) (*OpDef, bool) {
	d, ok := opTable[name]
	return d, ok
}

// OpNames lists every op name, sorted.
func OpNames() []string {
	names := make([]string, 0, len(opTable))
	for n := range opTable {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// CheckAttrs validates a against d's schema and returns a copy with
// defaults filled and values in their canonical Go types.
func (d *OpDef) CheckAttrs(a Attrs) (Attrs, error) {
	out := Attrs{}
	for _, k := range a.Keys() {
		spec, ok := d.Attr(k)
		if !ok {
			return nil, fmt.Errorf("%s has no attribute %q (has %s)", d.Name, k, attrList(d))
		}
		v, ok := coerceAttr(spec.Kind, a[k])
		if !ok {
			return nil, fmt.Errorf("attribute %s of %s: expected %s, got %s", k, d.Name, spec.Kind, formatAttr(a[k]))
		}
		if len(spec.Enum) > 0 && !contains(spec.Enum, v.(string)) {
			return nil, fmt.Errorf("attribute %s of %s: expected one of %q, got %q", k, d.Name, spec.Enum, v)
		}
		out[k] = v
	}
	for _, s := range d.Attrs {
		if _, ok := out[s.Name]; ok {
			continue
		}
		if s.Required {
			return nil, fmt.Errorf("%s needs attribute %s (%s)", d.Name, s.Name, s.Kind)
		}
		if s.Default != nil {
			out[s.Name] = s.Default
		}
	}
	return out, nil
}

func attrList(d *OpDef) string {
	if len(d.Attrs) == 0 {
		return "none"
	}
	s := ""
	for i, a := range d.Attrs {
		if i > 0 {
			s += ", "
		}
		s += a.Name
	}
	return s
}

func contains(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}

// InferTypes checks the arity and attributes of a use of op and returns its
// output types.
func InferTypes(op string, in []Type, a Attrs) ([]Type, error) {
	d, ok := Op(op)
	if !ok {
		return nil, fmt.Errorf("unknown op %q", op)
	}
	a, err := d.CheckAttrs(a)
	if err != nil {
		return nil, err
	}
	out, err := d.inferChecked(in, a)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	return out, nil
}
