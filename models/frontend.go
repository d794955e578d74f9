package models

import (
	_ "embed"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"lagc/ckpt"
	"lagc/config"
	"lagc/ir"
)

// LagunaYAML is models/laguna.yaml, embedded in the binary.
//
//go:embed laguna.yaml
var LagunaYAML []byte

// Error is a model-file error at a position: "file:line:col: message".
type Error struct {
	File      string
	Line, Col int
	Msg       string
}

func (e *Error) Error() string { return fmt.Sprintf("%s:%d:%d: %s", e.File, e.Line, e.Col, e.Msg) }

// BuildOptions tune graph construction.
type BuildOptions struct {
	// WeightDType is the dtype of weights declared without one (default bf16).
	WeightDType ir.DType
}

// BuildLaguna instantiates the embedded laguna.yaml for cfg.
func BuildLaguna(cfg *config.Config) (*ir.Graph, error) {
	return Build("laguna.yaml", LagunaYAML, cfg, BuildOptions{})
}

// Build reads a model file (see laguna.yaml for the language) and
// instantiates its graph for cfg. Errors in the file are *Error values.
func Build(file string, src []byte, cfg *config.Config, opt BuildOptions) (*ir.Graph, error) {
	if cfg == nil {
		return nil, fmt.Errorf("no model config")
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("model config: %w", err)
	}
	if opt.WeightDType == ir.Invalid {
		opt.WeightDType = ir.BF16
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(src, &doc); err != nil {
		return nil, yamlSyntaxError(file, src, err)
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		return nil, &Error{file, 1, 1, "expected a YAML mapping with model, params, inputs, weights, layer, body and outputs"}
	}
	b := &builder{file: file, cfg: cfg.ConfigKeys(), c: cfg, opt: opt}
	g, err := b.build(doc.Content[0])
	if err != nil {
		return nil, err
	}
	if err := ir.Verify(g); err != nil {
		return nil, fmt.Errorf("%s: built graph is invalid: %w", file, err)
	}
	return g, nil
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// yamlSyntaxError turns the YAML parser's "line N: msg" into file:line:col,
// the column being where that line's text starts (the parser gives no column).
func yamlSyntaxError(file string, src []byte, err error) error {
	m := yamlLine.FindStringSubmatch(err.Error())
	if m == nil {
		return &Error{file, 1, 1, "expected valid YAML: " + strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	line, _ := strconv.Atoi(m[1])
	lines := strings.Split(string(src), "\n")
	msg := m[2]
	if strings.Contains(msg, "did not find expected") {
		if l := badIndent(lines, line); l > 0 {
			line = l
		} else {
			msg += " (in the block that starts here)"
		}
	}
	col := 1
	if line >= 1 && line <= len(lines) {
		text := lines[line-1]
		col = indent(text) + 1
		if i := strings.IndexByte(text[:col-1], '\t'); i >= 0 {
			col, msg = i+1, "a tab cannot indent YAML, use spaces"
		}
	}
	return &Error{file, line, col, "expected valid YAML (check the indentation): " + msg}
}

func indent(s string) int { return len(s) - len(strings.TrimLeft(s, " \t")) }

// badIndent looks, from the block starting at line ctx (1-based) whose
// entries the parser could not read, for the first line indented deeper
// than its predecessor although that opens no nested block, or between two
// open indentation levels: the slips the parser reports only at the
// block's start. 0 if none is found.
func badIndent(lines []string, ctx int) int {
	var stack []int
	opens := false
	for i := ctx - 1; i >= 0 && i < len(lines); i++ {
		t := strings.TrimSpace(lines[i])
		if t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		in := indent(lines[i])
		switch {
		case len(stack) == 0:
			stack = append(stack, in)
		case in > stack[len(stack)-1]:
			if !opens {
				return i + 1
			}
			stack = append(stack, in)
		default:
			for len(stack) > 0 && in < stack[len(stack)-1] {
				stack = stack[:len(stack)-1]
			}
			if len(stack) == 0 {
				return 0 // left the block
			}
			if in != stack[len(stack)-1] {
				return i + 1
			}
		}
		if c := strings.Index(t, " #"); c >= 0 {
			t = strings.TrimSpace(t[:c])
		}
		opens = strings.HasSuffix(t, ":") || strings.HasSuffix(t, "|") || strings.HasSuffix(t, ">") || t == "-" || strings.HasPrefix(t, "- ")
	}
	return 0
}

type builder struct {
	file  string
	cfg   map[string]any
	c     *config.Config
	opt   BuildOptions
	g     *ir.Graph
	dims  []string
	top   *scope
	layer *yaml.Node
}

// scope is the name space of the top level or of one layer instance.
type scope struct {
	params  map[string]any
	locals  map[string]*ir.Value
	where   map[string]*yaml.Node // where each local was defined
	weights map[string]*weightDecl
	prefix  string // canonical-name prefix of this scope's weights and values
	parent  *scope
}

type weightDecl struct {
	name string // local name; canonical name is scope prefix + name
	key  *yaml.Node
	node *yaml.Node
}

func (b *builder) errAt(n *yaml.Node, off int, format string, args ...any) error {
	col := n.Column + off
	if off > 0 && (n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle)) != 0 {
		col++
	}
	return &Error{b.file, n.Line, col, fmt.Sprintf(format, args...)}
}

func (b *builder) errf(n *yaml.Node, format string, args ...any) error {
	return b.errAt(n, 0, format, args...)
}

func deref(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	return n
}

// pairs returns a mapping's key/value pairs, checking keys against allowed.
func (b *builder) pairs(n *yaml.Node, what string, allowed ...string) ([][2]*yaml.Node, error) {
	n = deref(n)
	if n == nil || n.Kind != yaml.MappingNode {
		return nil, b.errf(orNode(n), "expected a mapping for %s", what)
	}
	var out [][2]*yaml.Node
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			return nil, b.errf(k, "expected a name as key in %s", what)
		}
		if len(allowed) > 0 && !contains(allowed, k.Value) {
			return nil, b.errf(k, "unknown key %q in %s (expected one of %s)", k.Value, what, strings.Join(allowed, ", "))
		}
		if seen[k.Value] {
			return nil, b.errf(k, "key %q given twice in %s", k.Value, what)
		}
		seen[k.Value] = true
		out = append(out, [2]*yaml.Node{k, deref(v)})
	}
	return out, nil
}

func orNode(n *yaml.Node) *yaml.Node {
	if n == nil {
		return &yaml.Node{Line: 1, Column: 1}
	}
	return n
}

func contains(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}

func (b *builder) build(root *yaml.Node) (*ir.Graph, error) {
	top, err := b.pairs(root, "the model file", "model", "dims", "params", "inputs", "weights", "layer", "body", "outputs")
	if err != nil {
		return nil, err
	}
	sec := map[string][2]*yaml.Node{}
	for _, p := range top {
		sec[p[0].Value] = p
	}
	for _, k := range []string{"model", "body", "outputs"} {
		if _, ok := sec[k]; !ok {
			return nil, b.errf(root, "expected a %q section", k)
		}
	}
	name := sec["model"][1]
	if name.Kind != yaml.ScalarNode || !validName(name.Value) {
		return nil, b.errf(name, "expected a model name")
	}
	if d, ok := sec["dims"]; ok {
		if d[1].Kind != yaml.SequenceNode {
			return nil, b.errf(d[1], "expected a list of symbolic dimensions such as [T]")
		}
		for _, s := range d[1].Content {
			if s.Kind != yaml.ScalarNode || !isIdent(s.Value) || contains(b.dims, s.Value) {
				return nil, b.errf(s, "expected a new dimension name")
			}
			b.dims = append(b.dims, s.Value)
		}
	}
	b.g = ir.NewGraph(name.Value, b.dims...)
	b.top = &scope{params: map[string]any{}, locals: map[string]*ir.Value{}, where: map[string]*yaml.Node{}, weights: map[string]*weightDecl{}}
	if p, ok := sec["params"]; ok {
		if err := b.params(p[1], b.top, "params"); err != nil {
			return nil, err
		}
	}
	if p, ok := sec["inputs"]; ok {
		ps, err := b.pairs(p[1], "inputs")
		if err != nil {
			return nil, err
		}
		for _, kv := range ps {
			t, err := b.typeDecl(kv[1], b.top, false)
			if err != nil {
				return nil, err
			}
			v, err := b.g.AddInput(kv[0].Value, t)
			if err != nil {
				return nil, b.errf(kv[0], "%v", err)
			}
			b.top.locals[kv[0].Value] = v
			b.top.where[kv[0].Value] = kv[0]
		}
	}
	if p, ok := sec["weights"]; ok {
		if err := b.weightDecls(p[1], b.top); err != nil {
			return nil, err
		}
	}
	if p, ok := sec["layer"]; ok {
		b.layer = p[1]
		if _, err := b.pairs(b.layer, "layer", "params", "prefix", "input", "output", "weights", "body"); err != nil {
			return nil, err
		}
	}
	if err := b.block(sec["body"][1], b.top); err != nil {
		return nil, err
	}
	outs := sec["outputs"][1]
	if outs.Kind != yaml.SequenceNode || len(outs.Content) == 0 {
		return nil, b.errf(outs, "expected a list of output names")
	}
	for _, o := range outs.Content {
		v, err := b.resolve(o, 0, o.Value, b.top)
		if err != nil {
			return nil, err
		}
		b.g.Outputs = append(b.g.Outputs, v)
	}
	return b.g, nil
}

// params evaluates a params mapping in order: each value is an expression
// over config keys and the params before it.
func (b *builder) params(n *yaml.Node, s *scope, what string) error {
	ps, err := b.pairs(n, what)
	if err != nil {
		return err
	}
	for _, kv := range ps {
		if !isIdent(kv[0].Value) {
			return b.errf(kv[0], "expected a parameter name (letters, digits, _)")
		}
		v, err := b.eval(kv[1], s, true)
		if err != nil {
			return err
		}
		s.params[kv[0].Value] = v
	}
	return nil
}

// eval evaluates an expression node. Quoted scalars are string literals.
// With config set, unknown names are looked up among the config keys.
func (b *builder) eval(n *yaml.Node, s *scope, inParams bool) (any, error) {
	n = deref(n)
	if n.Kind != yaml.ScalarNode {
		return nil, b.errf(n, "expected an expression")
	}
	if n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle|yaml.LiteralStyle|yaml.FoldedStyle) != 0 {
		return n.Value, nil
	}
	v, err := evalExpr(n.Value, func(name string) (any, error) { return b.lookup(name, s, inParams) })
	var ee *exprError
	if errors.As(err, &ee) {
		return nil, b.errAt(n, ee.off, "%s", ee.msg)
	}
	return v, err
}

func (b *builder) lookup(name string, s *scope, inParams bool) (any, error) {
	for sc := s; sc != nil; sc = sc.parent {
		if v, ok := sc.params[name]; ok {
			return v, nil
		}
	}
	if contains(b.dims, name) {
		return sym(name), nil
	}
	if inParams {
		if v, ok := b.cfg[name]; ok {
			return v, nil
		}
		return nil, fmt.Errorf("expected a config key or parameter, got %q (config keys: %s)", name, strings.Join(config.ConfigKeyNames(), ", "))
	}
	return nil, fmt.Errorf("expected a parameter or dimension, got %q (config keys are read in params:)", name)
}

// weightDecls records a weights mapping: local name -> shape or dtype[shape].
// Weights enter the graph when first used.
func (b *builder) weightDecls(n *yaml.Node, s *scope) error {
	ps, err := b.pairs(n, "weights")
	if err != nil {
		return err
	}
	for _, kv := range ps {
		if !validName(kv[0].Value) {
			return b.errf(kv[0], "expected a weight name")
		}
		s.weights[kv[0].Value] = &weightDecl{name: kv[0].Value, key: kv[0], node: kv[1]}
	}
	return nil
}

// typeDecl reads a shape list [a, b] (weights only, default dtype) or a
// scalar "dtype[a, b]".
func (b *builder) typeDecl(n *yaml.Node, s *scope, weight bool) (ir.Type, error) {
	n = deref(n)
	t := ir.Type{DType: b.opt.WeightDType}
	switch {
	case n.Kind == yaml.SequenceNode && weight:
		for _, d := range n.Content {
			v, err := b.eval(d, s, false)
			if err != nil {
				return t, err
			}
			dim, err := toDim(v)
			if err != nil {
				return t, b.errf(d, "%v", err)
			}
			t.Shape = append(t.Shape, dim)
		}
		return t, nil
	case n.Kind == yaml.ScalarNode:
		text := n.Value
		i := strings.IndexByte(text, '[')
		if i < 0 || !strings.HasSuffix(text, "]") {
			return t, b.errf(n, "expected a type such as f32[T, H], got %q", text)
		}
		dt, err := ir.ParseDType(strings.TrimSpace(text[:i]))
		if err != nil {
			return t, b.errf(n, "expected a dtype (%s), got %q", strings.Join(ir.DTypeNames(), ", "), text[:i])
		}
		t.DType = dt
		body := text[i+1 : len(text)-1]
		off := i + 1
		if strings.TrimSpace(body) == "" {
			return t, nil
		}
		for _, part := range strings.Split(body, ",") {
			v, err := evalExpr(part, func(name string) (any, error) { return b.lookup(name, s, false) })
			var ee *exprError
			if errors.As(err, &ee) {
				return t, b.errAt(n, off+ee.off, "%s", ee.msg)
			}
			dim, err := toDim(v)
			if err != nil {
				return t, b.errAt(n, off, "%v", err)
			}
			t.Shape = append(t.Shape, dim)
			off += len(part) + 1
		}
		return t, nil
	}
	if weight {
		return t, b.errf(n, "expected a shape such as [V, H] or a type such as f32[E]")
	}
	return t, b.errf(n, "expected a type such as i32[T]")
}

func toDim(v any) (ir.Dim, error) {
	switch x := v.(type) {
	case int:
		if x < 0 {
			return ir.Dim{}, fmt.Errorf("expected a dimension >= 0, got %d", x)
		}
		return ir.C(x), nil
	case sym:
		return ir.S(string(x)), nil
	}
	return ir.Dim{}, fmt.Errorf("expected an integer dimension, got %s", describe(v))
}

// block runs a list of statements and when-blocks.
func (b *builder) block(n *yaml.Node, s *scope) error {
	n = deref(n)
	if n.Kind != yaml.SequenceNode {
		return b.errf(n, "expected a list of statements `out = op(in, ...)`")
	}
	for _, item := range n.Content {
		item = deref(item)
		switch {
		case item.Kind == yaml.ScalarNode:
			if err := b.statement(item, nil, s); err != nil {
				return err
			}
		case item.Kind == yaml.MappingNode && len(item.Content) >= 2 && item.Content[0].Value == "when":
			if err := b.when(item, s); err != nil {
				return err
			}
		case item.Kind == yaml.MappingNode && len(item.Content) == 2:
			if err := b.statement(item.Content[0], deref(item.Content[1]), s); err != nil {
				return err
			}
		default:
			return b.errf(item, "expected a statement `out = op(in, ...)` (optionally `: {attr: value}`) or a `when:` block")
		}
	}
	return nil
}

func (b *builder) when(n *yaml.Node, s *scope) error {
	ps, err := b.pairs(n, "a when block", "when", "then", "else")
	if err != nil {
		return err
	}
	var cond, then, els *yaml.Node
	for _, kv := range ps {
		switch kv[0].Value {
		case "when":
			cond = kv[1]
		case "then":
			then = kv[1]
		case "else":
			els = kv[1]
		}
	}
	if then == nil {
		return b.errf(n, "expected `then:` in the when block")
	}
	v, err := b.eval(cond, s, false)
	if err != nil {
		return err
	}
	c, ok := v.(bool)
	if !ok {
		return b.errf(cond, "expected a boolean condition, got %s", describe(v))
	}
	if c {
		return b.block(then, s)
	}
	if els != nil {
		return b.block(els, s)
	}
	return nil
}

// stmtRe splits "outs = op(args)"; names are checked one by one after.
var stmtRe = regexp.MustCompile(`^\s*([^=()]*?)\s*=\s*([A-Za-z_][A-Za-z0-9_]*)\s*\(([^()]*)\)\s*$`)

// statement handles `outs = op(args)` with optional attributes.
func (b *builder) statement(key, attrs *yaml.Node, s *scope) error {
	if key.Kind != yaml.ScalarNode {
		return b.errf(key, "expected a statement `out = op(in, ...)`")
	}
	text := key.Value
	m := stmtRe.FindStringSubmatchIndex(text)
	if m == nil {
		return b.errf(key, "expected a statement `out = op(in, ...)`, got %q", text)
	}
	outs := splitNames(text, m[2], m[3])
	op, opOff := text[m[4]:m[5]], m[4]
	args := splitNames(text, m[6], m[7])
	for _, o := range outs {
		if !validName(o.name) {
			return b.errAt(key, o.off, "expected an output name, got %q", o.name)
		}
	}
	if op == "layers" {
		return b.layers(key, outs, args, attrs, s)
	}
	def, ok := ir.Op(op)
	if !ok {
		return b.errAt(key, opOff, "unknown op %q (expected one of %s, or layers)", op, strings.Join(ir.OpNames(), ", "))
	}
	var inputs []*ir.Value
	for _, a := range args {
		if a.name == "" {
			continue // op() with no arguments
		}
		v, err := b.resolve(key, a.off, a.name, s)
		if err != nil {
			return err
		}
		inputs = append(inputs, v)
	}
	at, err := b.attrs(def, key, attrs, s)
	if err != nil {
		return err
	}
	names := make([]string, len(outs))
	for i, o := range outs {
		if prev, dup := s.locals[o.name]; dup && prev != nil {
			w := s.where[o.name]
			return b.errAt(key, o.off, "%s is already defined at %d:%d (values are assigned once)", o.name, w.Line, w.Column)
		}
		names[i] = s.prefix + o.name
		if b.g.Value(names[i]) != nil {
			return b.errAt(key, o.off, "value %s already exists in the graph", names[i])
		}
	}
	n, err := b.g.AddNode(op, inputs, at, names...)
	if err != nil {
		return b.errAt(key, opOff, "%v", err)
	}
	if len(n.Outputs) != len(outs) {
		return b.errAt(key, 0, "%s gives %d outputs, the statement names %d", op, len(n.Outputs), len(outs))
	}
	for i, o := range outs {
		s.locals[o.name] = n.Outputs[i]
		s.where[o.name] = key
	}
	return nil
}

type nameAt struct {
	name string
	off  int
}

// splitNames splits text[lo:hi] at commas, trimming, with offsets.
func splitNames(text string, lo, hi int) []nameAt {
	var out []nameAt
	start := lo
	for i := lo; i <= hi; i++ {
		if i == hi || text[i] == ',' {
			part := text[start:i]
			trimmed := strings.TrimLeft(part, " \t")
			off := start + len(part) - len(trimmed)
			out = append(out, nameAt{strings.TrimRight(trimmed, " \t"), off})
			start = i + 1
		}
	}
	return out
}

// attrs evaluates a statement's attribute mapping against the op schema.
func (b *builder) attrs(def *ir.OpDef, key, n *yaml.Node, s *scope) (ir.Attrs, error) {
	out := ir.Attrs{}
	if n != nil && !(n.Kind == yaml.ScalarNode && n.Tag == "!!null") {
		ps, err := b.pairs(n, "the attributes of "+def.Name)
		if err != nil {
			return nil, err
		}
		for _, kv := range ps {
			spec, ok := def.Attr(kv[0].Value)
			if !ok {
				var names []string
				for _, a := range def.Attrs {
					names = append(names, a.Name)
				}
				return nil, b.errf(kv[0], "%s has no attribute %q (expected one of: %s)", def.Name, kv[0].Value, strings.Join(names, ", "))
			}
			v, err := b.attrValue(kv[1], s)
			if err != nil {
				return nil, err
			}
			c, err := spec.Check(v)
			if err != nil {
				return nil, b.errf(kv[1], "%v", err)
			}
			out[kv[0].Value] = c
		}
	}
	for _, a := range def.Attrs {
		if _, ok := out[a.Name]; !ok && a.Required {
			return nil, b.errf(key, "expected attribute %s (%s) for %s", a.Name, a.Kind, def.Name)
		}
	}
	return out, nil
}

func (b *builder) attrValue(n *yaml.Node, s *scope) (any, error) {
	if n.Kind == yaml.SequenceNode {
		var sh ir.Shape
		ints := true
		for _, d := range n.Content {
			v, err := b.eval(d, s, false)
			if err != nil {
				return nil, err
			}
			dim, err := toDim(v)
			if err != nil {
				return nil, b.errf(d, "%v", err)
			}
			ints = ints && dim.IsConst()
			sh = append(sh, dim)
		}
		if ints {
			out := make([]int, len(sh))
			for i, d := range sh {
				out[i] = d.N
			}
			return out, nil
		}
		return sh, nil
	}
	v, err := b.eval(n, s, false)
	if err != nil {
		return nil, err
	}
	switch v.(type) {
	case int, float64, string:
		return v, nil
	}
	return nil, b.errf(n, "expected a number, string or list as attribute value, got %s", describe(v))
}

// resolve finds a name: this scope's values, then its weights, then the
// enclosing scope's.
func (b *builder) resolve(at *yaml.Node, off int, name string, s *scope) (*ir.Value, error) {
	for sc := s; sc != nil; sc = sc.parent {
		if v, ok := sc.locals[name]; ok {
			return v, nil
		}
		if w, ok := sc.weights[name]; ok {
			canon := sc.prefix + w.name
			if v := b.g.Value(canon); v != nil {
				return v, nil
			}
			t, err := b.typeDecl(w.node, sc, true)
			if err != nil {
				return nil, err
			}
			v, err := b.g.AddWeight(canon, t)
			if err != nil {
				return nil, b.errAt(at, off, "%v", err)
			}
			v.Doc = b.weightDoc(w, sc)
			return v, nil
		}
	}
	return nil, b.errAt(at, off, "expected a defined value, input or weight, got %q", name)
}

// weightDoc describes a weight's declaration for messages: the shape as
// written, where, the values of the names it uses, and its comment, e.g.
// "[nh * d, H] at laguna.yaml:56, nh = 4, d = 8, H = 32".
func (b *builder) weightDoc(w *weightDecl, s *scope) string {
	n := deref(w.node)
	text := n.Value
	if n.Kind == yaml.SequenceNode {
		var parts []string
		for _, d := range n.Content {
			parts = append(parts, d.Value)
		}
		text = "[" + strings.Join(parts, ", ") + "]"
	}
	doc := fmt.Sprintf("%s at %s:%d", text, b.file, w.key.Line)
	seen := map[string]bool{}
	for _, name := range identRE.FindAllString(text, -1) {
		if seen[name] {
			continue
		}
		seen[name] = true
		if v, err := b.lookup(name, s, false); err == nil {
			if _, isSym := v.(sym); !isSym {
				doc += fmt.Sprintf(", %s = %v", name, v)
			}
		}
	}
	for _, c := range []string{w.key.LineComment, w.node.LineComment} {
		if c = strings.TrimSpace(strings.TrimPrefix(c, "#")); c != "" {
			doc += " (" + c + ")"
			break
		}
	}
	return doc
}

var identRE = regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*`)

// layers instantiates the layer template once per model layer, feeding each
// layer's output to the next: `h2 = layers(h)`.
func (b *builder) layers(key *yaml.Node, outs, args []nameAt, attrs *yaml.Node, s *scope) error {
	if b.layer == nil {
		return b.errf(key, "layers(...) needs a `layer:` section")
	}
	if len(outs) != 1 || len(args) != 1 || attrs != nil {
		return b.errf(key, "expected `out = layers(in)` with no attributes")
	}
	cur, err := b.resolve(key, args[0].off, args[0].name, s)
	if err != nil {
		return err
	}
	ps, _ := b.pairs(b.layer, "layer")
	sec := map[string]*yaml.Node{}
	for _, kv := range ps {
		sec[kv[0].Value] = kv[1]
	}
	for _, k := range []string{"input", "output", "body"} {
		if sec[k] == nil {
			return b.errf(b.layer, "expected %q in the layer section", k)
		}
	}
	in, out := sec["input"], sec["output"]
	for _, n := range []*yaml.Node{in, out} {
		if n.Kind != yaml.ScalarNode || !validName(n.Value) {
			return b.errf(n, "expected a value name for the layer's input and output")
		}
	}
	if p := sec["prefix"]; p != nil && p.Kind != yaml.ScalarNode {
		return b.errf(p, "expected a weight-name prefix such as blk.{l}.")
	}
	for l := 0; l < b.c.NumLayers; l++ {
		ls := &scope{params: map[string]any{"l": l}, locals: map[string]*ir.Value{}, where: map[string]*yaml.Node{},
			weights: map[string]*weightDecl{}, parent: s}
		if p := sec["prefix"]; p != nil {
			ls.prefix = strings.ReplaceAll(p.Value, "{l}", strconv.Itoa(l))
		}
		if p := sec["params"]; p != nil {
			if err := b.params(p, ls, "layer params"); err != nil {
				return err
			}
		}
		if w := sec["weights"]; w != nil {
			if err := b.weightDecls(w, ls); err != nil {
				return err
			}
		}
		ls.locals[in.Value] = cur
		ls.where[in.Value] = in
		if err := b.block(sec["body"], ls); err != nil {
			return err
		}
		next, ok := ls.locals[out.Value]
		if !ok {
			return b.errf(out, "layer %d defines no value %q", l, out.Value)
		}
		cur = next
	}
	if _, dup := s.locals[outs[0].name]; dup {
		return b.errAt(key, outs[0].off, "%s is already defined", outs[0].name)
	}
	s.locals[outs[0].name] = cur
	s.where[outs[0].name] = key
	return nil
}

func isIdent(s string) bool {
	if s == "" || !isIdentStart(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if c := s[i]; !(isIdentStart(c) || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// validName accepts value and weight names: identifiers joined by dots.
func validName(s string) bool {
	for _, part := range strings.Split(s, ".") {
		if part == "" {
			return false
		}
		for i := 0; i < len(part); i++ {
			if c := part[i]; !(isIdentStart(c) || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}

// SetRecipeTypes is SetWeightTypes with the types recipe r gives.
func SetRecipeTypes(g *ir.Graph, r *ckpt.Recipe) error {
	return SetWeightTypes(g, func(name string, shape []int) string {
		return r.TypeFor(ckpt.TensorInfo{Name: name, Shape: shape}).String()
	})
}

// SetWeightTypes gives every weight of g read from a checkpoint (not the
// derived ones) the dtype typeFor names for it: a quantisation recipe's
// types, for a synthetic quantised model. Run it before the passes.
func SetWeightTypes(g *ir.Graph, typeFor func(name string, shape []int) string) error {
	for _, v := range g.Weights {
		if v.From != nil {
			continue
		}
		shape, err := v.Type.Shape.Eval(nil)
		if err != nil {
			return fmt.Errorf("weight %s: %w", v.Name, err)
		}
		name := typeFor(v.Name, shape)
		dt, err := ir.ParseDType(name)
		if err != nil {
			return fmt.Errorf("weight %s: %w", v.Name, err)
		}
		v.Type.DType = dt
	}
	return ir.Verify(g)
}
