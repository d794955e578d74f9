package ir

import (
	"fmt"
	"sort"
)

// ValueKind says where a value comes from.
type ValueKind uint8

// Value kinds.
const (
	Activation ValueKind = iota // computed by a node
	Input                       // fed by the caller each step (tokens, pos)
	Weight                      // a checkpoint tensor, or one derived from others (From)
)

func (k ValueKind) String() string {
	switch k {
	case Input:
		return "input"
	case Weight:
		return "weight"
	}
	return "activation"
}

// Value is a single-assignment value of the graph.
type Value struct {
	Name string
	Type Type
	Kind ValueKind
	Def  *Node // the node computing an activation; nil otherwise
	// From, for a weight, records that it is derived from other weights by a
	// load-time transform (e.g. concat of gate and up rows); nil for
	// checkpoint tensors.
	From *Transform

	// Use-def information, kept by the graph's mutation methods once built
	// (see Graph.Users): the nodes reading the value, one entry per input
	// slot, and the derived weights whose transform reads it.
	users  []*Node
	derivs []*Value
	erased bool // a weight removed from the graph, awaiting Compact

	// Doc, for a weight, says where its shape comes from (the model file's
	// declaration), for messages about a checkpoint that disagrees.
	Doc string
}

// Transform is a load-time computation of a weight from other weights,
// expressed as a use of a single-output op (concat, reshape, split).
type Transform struct {
	Op    string
	Srcs  []*Value
	Attrs Attrs
}

func (v *Value) String() string {
	if v.Kind == Weight {
		return "@" + v.Name
	}
	return "%" + v.Name
}

// Node is one op application.
type Node struct {
	ID      int // unique in its graph; orders ties in topological sorts
	Op      string
	Inputs  []*Value
	Outputs []*Value
	Attrs   Attrs
	erased  bool // removed from the graph, awaiting Compact
}

// String names the node by its first output and op, as errors do.
func (n *Node) String() string {
	name := "?"
	if len(n.Outputs) > 0 {
		name = n.Outputs[0].String()
	}
	return fmt.Sprintf("node %s (%s)", name, n.Op)
}

// Def returns n's op definition.
func (n *Node) Def() (*OpDef, bool) { return Op(n.Op) }

func (n *Node) attr(name string) any {
	if v, ok := n.Attrs[name]; ok {
		return v
	}
	if d, ok := n.Def(); ok {
		if s, ok := d.Attr(name); ok {
			return s.Default
		}
	}
	return nil
}

// AttrInt returns an int attribute (its default when absent, else 0).
func (n *Node) AttrInt(name string) int {
	v, _ := coerceAttr(AttrKindInt, n.attr(name))
	i, _ := v.(int)
	return i
}

// AttrFloat returns a float attribute (its default when absent, else 0).
func (n *Node) AttrFloat(name string) float64 {
	v, _ := coerceAttr(AttrKindFloat, n.attr(name))
	f, _ := v.(float64)
	return f
}

// AttrString returns a string attribute (its default when absent, else "").
func (n *Node) AttrString(name string) string {
	s, _ := n.attr(name).(string)
	return s
}

// AttrInts returns an int-list attribute (nil when absent).
func (n *Node) AttrInts(name string) []int {
	v, _ := coerceAttr(AttrKindInts, n.attr(name))
	is, _ := v.([]int)
	return is
}

// AttrShape returns a shape attribute (nil when absent).
func (n *Node) AttrShape(name string) Shape {
	v, _ := coerceAttr(AttrKindShape, n.attr(name))
	s, _ := v.(Shape)
	return s
}

// Graph is a dataflow graph in single-assignment form.
//
// Code that edits the slices or a node's Inputs directly (a parser, a
// test) must call Reindex afterwards; the methods keep the name index and
// the use-def information current themselves, each in time proportional to
// what it changes, so that a pass is linear in the graph. A Graph is not
// safe for concurrent use, not even by readers: Order keeps its result and
// the use-def information is built on first use.
type Graph struct {
	Name    string
	Syms    []string // symbolic dimensions, e.g. T
	Inputs  []*Value
	Weights []*Value
	Nodes   []*Node // in insertion order; Order gives a topological order
	Outputs []*Value
	nextID  int
	names   map[string]*Value
	useDef  bool    // Value.users and Value.derivs are current
	erased  int     // nodes and weights erased but still in the slices
	order   []*Node // Order's result, until a method changes the nodes or edges
}

// NewGraph returns an empty graph with the given symbolic dimensions.
func NewGraph(name string, syms ...string) *Graph {
	return &Graph{Name: name, Syms: syms, names: map[string]*Value{}}
}

func (g *Graph) index() map[string]*Value {
	if g.names == nil {
		g.names = map[string]*Value{}
		for _, v := range g.Values() {
			g.names[v.Name] = v
		}
	}
	return g.names
}

// Value returns the input, weight or activation of that name.
func (g *Graph) Value(name string) *Value {
	v := g.index()[name]
	return v
}

// Values lists every value: inputs, weights, then node outputs in node order.
func (g *Graph) Values() []*Value {
	g.Compact()
	vs := append(append([]*Value(nil), g.Inputs...), g.Weights...)
	for _, n := range g.Nodes {
		vs = append(vs, n.Outputs...)
	}
	return vs
}

func (g *Graph) claim(name string) error {
	if name == "" {
		return fmt.Errorf("value without a name")
	}
	if _, dup := g.index()[name]; dup {
		return fmt.Errorf("value %s defined twice", name)
	}
	return nil
}

// UniqueName returns base, or base with a numeric suffix, unused in g.
func (g *Graph) UniqueName(base string) string {
	if _, used := g.index()[base]; !used {
		return base
	}
	for i := 1; ; i++ {
		n := fmt.Sprintf("%s.%d", base, i)
		if _, used := g.index()[n]; !used {
			return n
		}
	}
}

// AddInput declares a graph input.
func (g *Graph) AddInput(name string, t Type) (*Value, error) {
	if err := g.claim(name); err != nil {
		return nil, err
	}
	v := &Value{Name: name, Type: t, Kind: Input}
	g.Inputs = append(g.Inputs, v)
	g.index()[name] = v
	return v, nil
}

// AddWeight declares a checkpoint weight under its canonical name.
func (g *Graph) AddWeight(name string, t Type) (*Value, error) {
	if err := g.claim(name); err != nil {
		return nil, err
	}
	v := &Value{Name: name, Type: t, Kind: Weight}
	g.Weights = append(g.Weights, v)
	g.index()[name] = v
	return v, nil
}

// DeriveWeight declares a weight computed at load time by applying op to
// other weights, e.g. DeriveWeight("blk.1.ffn_gate_up.weight", "concat",
// Attrs{"axis": 0}, gate, up). Fusion passes use it to record the weight
// layouts their kernels need; lowering performs the transform.
func (g *Graph) DeriveWeight(name, op string, attrs Attrs, srcs ...*Value) (*Value, error) {
	t, err := transformType(op, attrs, srcs)
	if err != nil {
		return nil, fmt.Errorf("derived weight %s: %w", name, err)
	}
	v, err := g.AddWeight(name, t)
	if err != nil {
		return nil, err
	}
	v.From = &Transform{Op: op, Srcs: srcs, Attrs: attrs}
	if g.useDef {
		for _, s := range srcs {
			s.derivs = append(s.derivs, v)
		}
	}
	return v, nil
}

// transformOps are the ops a weight transform may use.
var transformOps = map[string]bool{"concat": true, "reshape": true, "split": false}

func transformType(op string, attrs Attrs, srcs []*Value) (Type, error) {
	if !transformOps[op] {
		return Type{}, fmt.Errorf("op %q cannot derive a weight (use concat or reshape)", op)
	}
	in := make([]Type, len(srcs))
	for i, s := range srcs {
		if s == nil || s.Kind != Weight {
			return Type{}, fmt.Errorf("source %d is not a weight", i)
		}
		in[i] = s.Type
	}
	out, err := InferTypes(op, in, attrs)
	if err != nil {
		return Type{}, err
	}
	return out[0], checkBlockRuns(op, attrs, srcs, out[0])
}

// AddNode appends a node applying op to inputs, infers its output types and
// names its outputs (a name is made unique if taken; empty names get
// "t<ID>").
func (g *Graph) AddNode(op string, inputs []*Value, attrs Attrs, names ...string) (*Node, error) {
	in := make([]Type, len(inputs))
	for i, v := range inputs {
		if v == nil {
			return nil, fmt.Errorf("%s: input %d is nil", op, i)
		}
		in[i] = v.Type
	}
	d, ok := Op(op)
	if !ok {
		return nil, fmt.Errorf("unknown op %q", op)
	}
	checked, err := d.CheckAttrs(attrs)
	if err != nil {
		return nil, err
	}
	outs, err := d.inferChecked(in, checked)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	n := &Node{ID: g.nextID, Op: op, Inputs: append([]*Value(nil), inputs...), Attrs: canonicalAttrs(op, attrs)}
	g.nextID++
	for i, t := range outs {
		name := ""
		if i < len(names) {
			name = names[i]
		}
		if name == "" {
			name = fmt.Sprintf("t%d", n.ID)
			if len(outs) > 1 {
				name = fmt.Sprintf("t%d.%d", n.ID, i)
			}
		}
		name = g.UniqueName(name)
		v := &Value{Name: name, Type: t, Kind: Activation, Def: n}
		n.Outputs = append(n.Outputs, v)
		g.index()[name] = v
	}
	g.Nodes = append(g.Nodes, n)
	g.order = nil
	if g.useDef {
		for _, v := range n.Inputs {
			v.users = append(v.users, n)
		}
	}
	return n, nil
}

// inferChecked runs the arity check and inference on already-checked attrs.
func (d *OpDef) inferChecked(in []Type, a Attrs) ([]Type, error) {
	if d.Variadic() {
		if len(in) < len(d.Inputs) {
			return nil, fmt.Errorf("takes at least %d inputs, got %d", len(d.Inputs), len(in))
		}
	} else if len(in) != len(d.Inputs) {
		return nil, fmt.Errorf("takes %d inputs %v, got %d", len(d.Inputs), d.Inputs, len(in))
	}
	return d.Infer(in, a)
}

// Uses maps every value to the nodes reading it, in node order.
func (g *Graph) Uses() map[*Value][]*Node {
	uses := map[*Value][]*Node{}
	for _, n := range g.Nodes {
		if n.erased {
			continue
		}
		for _, v := range n.Inputs {
			uses[v] = append(uses[v], n)
		}
	}
	return uses
}

// buildUseDef computes the use-def information from scratch, once after
// construction or Reindex; the mutation methods keep it current after that.
func (g *Graph) buildUseDef() {
	if g.useDef {
		return
	}
	g.Compact()
	for _, v := range g.Inputs {
		v.users, v.derivs = nil, nil
	}
	for _, v := range g.Weights {
		v.users, v.derivs = nil, nil
	}
	for _, n := range g.Nodes {
		for _, v := range n.Outputs {
			v.users, v.derivs = nil, nil
		}
	}
	for _, n := range g.Nodes {
		for _, v := range n.Inputs {
			if v != nil {
				v.users = append(v.users, n)
			}
		}
	}
	for _, w := range g.Weights {
		if w.From != nil {
			for _, s := range w.From.Srcs {
				if s != nil {
					s.derivs = append(s.derivs, w)
				}
			}
		}
	}
	g.useDef = true
}

// Users returns the nodes reading v, one entry per input slot, in the order
// they came to read it. The slice is the graph's own: do not modify it.
func (g *Graph) Users(v *Value) []*Node {
	g.buildUseDef()
	return v.users
}

// NumUses counts the readers of v: node input slots and graph outputs.
func (g *Graph) NumUses(v *Value) int {
	g.buildUseDef()
	n := len(v.users)
	for _, o := range g.Outputs {
		if o == v {
			n++
		}
	}
	return n
}

// Derivations returns the derived weights whose transform reads w. The
// slice is the graph's own: do not modify it.
func (g *Graph) Derivations(w *Value) []*Value {
	g.buildUseDef()
	return w.derivs
}

// ReplaceUses makes every node and graph output reading old read new.
func (g *Graph) ReplaceUses(old, new *Value) {
	g.buildUseDef()
	if old == new {
		return
	}
	g.order = nil
	// users holds a node once per slot reading old: rewire one slot each.
	for _, n := range old.users {
		for i, v := range n.Inputs {
			if v == old {
				n.Inputs[i] = new
				break
			}
		}
		new.users = append(new.users, n)
	}
	old.users = nil
	for i, v := range g.Outputs {
		if v == old {
			g.Outputs[i] = new
		}
	}
}

// EraseNode removes n from the graph: its outputs leave the name index and
// its inputs lose it as a reader. The caller must have rewired the uses of
// its outputs. n leaves g.Nodes at the next Compact, which every method
// reading the node list runs first.
func (g *Graph) EraseNode(n *Node) {
	if n.erased {
		return
	}
	if g.useDef {
		for _, v := range n.Inputs {
			if v != nil {
				v.users = removeOne(v.users, n)
			}
		}
	}
	for _, v := range n.Outputs {
		if g.names != nil && g.names[v.Name] == v {
			delete(g.names, v.Name)
		}
	}
	n.erased = true
	g.erased++
	g.order = nil
}

// EraseWeight removes w from the graph (nothing may read it any more); it
// leaves g.Weights at the next Compact.
func (g *Graph) EraseWeight(w *Value) {
	if w.erased {
		return
	}
	if g.useDef && w.From != nil {
		for _, s := range w.From.Srcs {
			if s != nil {
				s.derivs = removeOne(s.derivs, w)
			}
		}
	}
	if g.names != nil && g.names[w.Name] == w {
		delete(g.names, w.Name)
	}
	w.erased = true
	g.erased++
}

// removeOne deletes the last occurrence of x from xs, keeping the order.
func removeOne[T comparable](xs []T, x T) []T {
	for i := len(xs) - 1; i >= 0; i-- {
		if xs[i] == x {
			copy(xs[i:], xs[i+1:])
			var zero T
			xs[len(xs)-1] = zero
			return xs[:len(xs)-1]
		}
	}
	return xs
}

// Compact drops erased nodes and weights from g.Nodes and g.Weights. The
// slices are new, so a caller ranging over the old ones is unaffected.
func (g *Graph) Compact() {
	if g.erased == 0 {
		return
	}
	nodes := make([]*Node, 0, len(g.Nodes))
	for _, n := range g.Nodes {
		if !n.erased {
			nodes = append(nodes, n)
		}
	}
	weights := make([]*Value, 0, len(g.Weights))
	for _, w := range g.Weights {
		if !w.erased {
			weights = append(weights, w)
		}
	}
	g.Nodes, g.Weights, g.erased = nodes, weights, 0
}

// RemoveNodes deletes the given nodes (their outputs become undefined; the
// caller must have rewired their uses).
func (g *Graph) RemoveNodes(dead map[*Node]bool) {
	for _, n := range g.Nodes {
		if dead[n] {
			g.EraseNode(n)
		}
	}
	g.Compact()
}

// RemoveWeights deletes weights for which dead returns true.
func (g *Graph) RemoveWeights(dead func(*Value) bool) {
	for _, w := range g.Weights {
		if !w.erased && dead(w) {
			g.EraseWeight(w)
		}
	}
	g.Compact()
}

// Reindex rebuilds the name index after direct edits of the slices; the
// use-def information is rebuilt when next needed.
func (g *Graph) Reindex() {
	g.Compact()
	g.names = nil
	g.useDef = false
	g.order = nil
	g.index()
	for _, n := range g.Nodes {
		if n.ID >= g.nextID {
			g.nextID = n.ID + 1
		}
	}
}

// Env returns a binding of every symbol of g to t (the tokens in a step).
func (g *Graph) Env(t int) Env {
	env := Env{}
	for _, s := range g.Syms {
		env[s] = t
	}
	return env
}

// Clone returns a deep copy of g (values and nodes are new objects).
func (g *Graph) Clone() *Graph {
	g.Compact()
	c := &Graph{Name: g.Name, Syms: append([]string(nil), g.Syms...), nextID: g.nextID}
	m := map[*Value]*Value{}
	cp := func(v *Value) *Value {
		if v == nil {
			return nil
		}
		if nv, ok := m[v]; ok {
			return nv
		}
		nv := &Value{Name: v.Name, Type: Type{v.Type.DType, v.Type.Shape.Clone()}, Kind: v.Kind}
		m[v] = nv
		return nv
	}
	for _, v := range g.Inputs {
		c.Inputs = append(c.Inputs, cp(v))
	}
	for _, v := range g.Weights {
		c.Weights = append(c.Weights, cp(v))
	}
	for _, v := range g.Weights {
		if v.From != nil {
			t := &Transform{Op: v.From.Op, Attrs: v.From.Attrs.Clone()}
			for _, s := range v.From.Srcs {
				t.Srcs = append(t.Srcs, cp(s))
			}
			m[v].From = t
		}
	}
	for _, n := range g.Nodes {
		nn := &Node{ID: n.ID, Op: n.Op, Attrs: n.Attrs.Clone()}
		for _, v := range n.Outputs {
			o := cp(v)
			o.Def = nn
			nn.Outputs = append(nn.Outputs, o)
		}
		c.Nodes = append(c.Nodes, nn)
	}
	for i, n := range g.Nodes {
		for _, v := range n.Inputs {
			c.Nodes[i].Inputs = append(c.Nodes[i].Inputs, cp(v))
		}
	}
	for _, v := range g.Outputs {
		c.Outputs = append(c.Outputs, cp(v))
	}
	c.Reindex()
	return c
}

// OpCounts returns how many nodes use each op.
func (g *Graph) OpCounts() map[string]int {
	g.Compact()
	m := map[string]int{}
	for _, n := range g.Nodes {
		m[n.Op]++
	}
	return m
}

// sortedNodes returns nodes sorted by ID.
func sortedNodes(ns []*Node) []*Node {
	out := append([]*Node(nil), ns...)
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Shapes binds the symbolic dimensions of every value's shape under env:
// the concrete shapes an executor allocates for one step.
func (g *Graph) Shapes(env Env) (map[*Value][]int, error) {
	out := map[*Value][]int{}
	for _, v := range g.Values() {
		s, err := v.Type.Shape.Eval(env)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", v, err)
		}
		out[v] = s
	}
	return out, nil
}
