package ir

import (
	"fmt"
	"strconv"
	"strings"
)

// Parse reads the text form and verifies the graph.
func Parse(src string) (*Graph, error) {
	g, err := ParseUnverified(src)
	if err != nil {
		return nil, err
	}
	if err := Verify(g); err != nil {
		return nil, err
	}
	return g, nil
}

// ParseUnverified reads the text form without running Verify: references to
// names never defined become values without a definition, so Verify (or a
// test) can report them. Syntax errors are "line:col: expected X".
func ParseUnverified(src string) (*Graph, error) {
	p := &textParser{g: &Graph{}, defs: map[string]*Value{}}
	lines := strings.Split(src, "\n")
	for i, line := range lines {
		p.line = i + 1
		if err := p.statement(line); err != nil {
			return nil, err
		}
	}
	if p.g.Name == "" {
		return nil, fmt.Errorf("line 1:1: expected `graph NAME`")
	}
	for _, f := range p.fixups {
		if err := f(); err != nil {
			return nil, err
		}
	}
	p.g.Reindex()
	return p.g, nil
}

type textParser struct {
	g      *Graph
	line   int
	toks   []token
	i      int
	defs   map[string]*Value
	fixups []func() error // resolve references once every definition is known
	nextID int
}

type tokKind uint8

const (
	tEOF tokKind = iota
	tIdent
	tNumber
	tString
	tLocal  // %name
	tWeight // @name
	tPunct
)

type token struct {
	kind tokKind
	text string
	col  int
}

func (t token) desc() string {
	if t.kind == tEOF {
		return "end of line"
	}
	return strconv.Quote(t.text)
}

func isNameByte(c byte) bool {
	return c == '_' || c == '.' || c == '-' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

func (p *textParser) errf(col int, format string, args ...any) error {
	return fmt.Errorf("line %d:%d: %s", p.line, col, fmt.Sprintf(format, args...))
}

func (p *textParser) lex(line string) error {
	p.toks, p.i = p.toks[:0], 0
	for i := 0; i < len(line); {
		c := line[i]
		start := i
		switch {
		case c == ' ' || c == '\t' || c == '\r':
			i++
			continue
		case c == '%' || c == '@':
			i++
			for i < len(line) && isNameByte(line[i]) {
				i++
			}
			if i == start+1 {
				return p.errf(start+1, "expected a name after %c", c)
			}
			k := tLocal
			if c == '@' {
				k = tWeight
			}
			p.toks = append(p.toks, token{k, line[start+1 : i], start + 1})
			continue
		case c == '"':
			i++
			for i < len(line) && line[i] != '"' {
				if line[i] == '\\' {
					i++
				}
				i++
			}
			if i >= len(line) {
				return p.errf(start+1, "expected a closing quote")
			}
			i++
			s, err := strconv.Unquote(line[start:i])
			if err != nil {
				return p.errf(start+1, "expected a valid string literal")
			}
			p.toks = append(p.toks, token{tString, s, start + 1})
			continue
		case c >= '0' && c <= '9' || c == '-' || c == '+':
			i++
			for i < len(line) && (isNameByte(line[i]) || line[i] == '+') {
				i++
			}
			p.toks = append(p.toks, token{tNumber, line[start:i], start + 1})
			continue
		case isNameByte(c):
			for i < len(line) && isNameByte(line[i]) {
				i++
			}
			p.toks = append(p.toks, token{tIdent, line[start:i], start + 1})
			continue
		case strings.IndexByte(":,=(){}[]", c) >= 0:
			p.toks = append(p.toks, token{tPunct, string(c), start + 1})
			i++
			continue
		}
		return p.errf(start+1, "unexpected character %q", c)
	}
	p.toks = append(p.toks, token{kind: tEOF, col: len(line) + 1})
	return nil
}

func (p *textParser) peek() token { return p.toks[p.i] }

func (p *textParser) next() token {
	t := p.toks[p.i]
	if t.kind != tEOF {
		p.i++
	}
	return t
}

func (p *textParser) expect(text string) error {
	t := p.next()
	if t.kind != tPunct || t.text != text {
		return p.errf(t.col, "expected %q, got %s", text, t.desc())
	}
	return nil
}

func (p *textParser) accept(text string) bool {
	if t := p.peek(); t.kind == tPunct && t.text == text {
		p.i++
		return true
	}
	return false
}

func (p *textParser) end() error {
	if t := p.peek(); t.kind != tEOF {
		return p.errf(t.col, "expected end of line, got %s", t.desc())
	}
	return nil
}

func (p *textParser) statement(line string) error {
	if s := strings.TrimSpace(line); s == "" || s[0] == '#' {
		return nil
	}
	if err := p.lex(line); err != nil {
		return err
	}
	t := p.peek()
	if p.g.Name == "" && !(t.kind == tIdent && t.text == "graph") {
		return p.errf(t.col, "expected `graph NAME` first, got %s", t.desc())
	}
	if t.kind == tLocal {
		return p.nodeStmt()
	}
	if t.kind != tIdent {
		return p.errf(t.col, "expected graph, sym, input, weight, output or %%value, got %s", t.desc())
	}
	p.next()
	switch t.text {
	case "graph":
		if p.g.Name != "" {
			return p.errf(t.col, "expected one `graph` line")
		}
		n := p.next()
		if n.kind != tIdent || !isName(n.text) {
			return p.errf(n.col, "expected a graph name, got %s", n.desc())
		}
		p.g.Name = n.text
		return p.end()
	case "sym":
		for {
			s := p.next()
			if s.kind != tIdent || !isIdent(s.text) {
				return p.errf(s.col, "expected a symbol name, got %s", s.desc())
			}
			if contains(p.g.Syms, s.text) {
				return p.errf(s.col, "symbol %s declared twice", s.text)
			}
			p.g.Syms = append(p.g.Syms, s.text)
			if !p.accept(",") {
				return p.end()
			}
		}
	case "input", "weight":
		return p.declStmt(t.text == "weight")
	case "output":
		for {
			r := p.next()
			if r.kind != tLocal && r.kind != tWeight {
				return p.errf(r.col, "expected a %%value, got %s", r.desc())
			}
			slot := len(p.g.Outputs)
			p.g.Outputs = append(p.g.Outputs, nil)
			p.ref(r, func(v *Value) { p.g.Outputs[slot] = v })
			if !p.accept(",") {
				return p.end()
			}
		}
	}
	return p.errf(t.col, "expected graph, sym, input, weight, output or %%value, got %s", t.desc())
}

func (p *textParser) define(t token, v *Value) error {
	if _, dup := p.defs[t.text]; dup {
		return p.errf(t.col, "value %s defined twice", t.text)
	}
	p.defs[t.text] = v
	return nil
}

// ref resolves a reference once all definitions are known.
func (p *textParser) ref(t token, set func(*Value)) {
	line := p.line
	p.fixups = append(p.fixups, func() error {
		v, ok := p.defs[t.text]
		if !ok {
			// Left undefined for Verify to report with the node's name.
			kind := Activation
			if t.kind == tWeight {
				kind = Weight
			}
			v = &Value{Name: t.text, Kind: kind}
			p.defs[t.text] = v
		} else if (t.kind == tWeight) != (v.Kind == Weight) {
			return fmt.Errorf("line %d:%d: expected %s to be written %s", line, t.col, t.text, v)
		}
		set(v)
		return nil
	})
}

func (p *textParser) declStmt(weight bool) error {
	n := p.next()
	want := tLocal
	if weight {
		want = tWeight
	}
	if n.kind != want {
		return p.errf(n.col, "expected a %s name, got %s", map[bool]string{false: "%input", true: "@weight"}[weight], n.desc())
	}
	if err := p.expect(":"); err != nil {
		return err
	}
	typ, err := p.typ()
	if err != nil {
		return err
	}
	kind := Input
	if weight {
		kind = Weight
	}
	v := &Value{Name: n.text, Type: typ, Kind: kind}
	if err := p.define(n, v); err != nil {
		return err
	}
	if weight {
		p.g.Weights = append(p.g.Weights, v)
		if p.accept("=") {
			op, srcs, attrs, err := p.call()
			if err != nil {
				return err
			}
			tr := &Transform{Op: op, Attrs: canonicalAttrs(op, attrs), Srcs: make([]*Value, len(srcs))}
			for i, s := range srcs {
				i := i
				p.ref(s, func(v *Value) { tr.Srcs[i] = v })
			}
			v.From = tr
		}
	} else {
		p.g.Inputs = append(p.g.Inputs, v)
	}
	return p.end()
}

func (p *textParser) nodeStmt() error {
	n := &Node{ID: p.nextID}
	p.nextID++
	for {
		t := p.next()
		if t.kind != tLocal {
			return p.errf(t.col, "expected a %%value, got %s", t.desc())
		}
		if err := p.expect(":"); err != nil {
			return err
		}
		typ, err := p.typ()
		if err != nil {
			return err
		}
		v := &Value{Name: t.text, Type: typ, Kind: Activation, Def: n}
		if err := p.define(t, v); err != nil {
			return err
		}
		n.Outputs = append(n.Outputs, v)
		if !p.accept(",") {
			break
		}
	}
	if err := p.expect("="); err != nil {
		return err
	}
	op, args, attrs, err := p.call()
	if err != nil {
		return err
	}
	n.Op, n.Attrs = op, canonicalAttrs(op, attrs)
	n.Inputs = make([]*Value, len(args))
	for i, a := range args {
		i := i
		p.ref(a, func(v *Value) { n.Inputs[i] = v })
	}
	p.g.Nodes = append(p.g.Nodes, n)
	return p.end()
}

// call parses op(%a, @b) {k=v, ...}.
func (p *textParser) call() (string, []token, Attrs, error) {
	op := p.next()
	if op.kind != tIdent {
		return "", nil, nil, p.errf(op.col, "expected an op name, got %s", op.desc())
	}
	if err := p.expect("("); err != nil {
		return "", nil, nil, err
	}
	var args []token
	if !p.accept(")") {
		for {
			a := p.next()
			if a.kind != tLocal && a.kind != tWeight {
				return "", nil, nil, p.errf(a.col, "expected a %%value or @weight, got %s", a.desc())
			}
			args = append(args, a)
			if p.accept(")") {
				break
			}
			if err := p.expect(","); err != nil {
				return "", nil, nil, err
			}
		}
	}
	var attrs Attrs
	if p.accept("{") {
		attrs = Attrs{}
		for !p.accept("}") {
			k := p.next()
			if k.kind != tIdent {
				return "", nil, nil, p.errf(k.col, "expected an attribute name, got %s", k.desc())
			}
			if _, dup := attrs[k.text]; dup {
				return "", nil, nil, p.errf(k.col, "attribute %s given twice", k.text)
			}
			if err := p.expect("="); err != nil {
				return "", nil, nil, err
			}
			v, err := p.attrValue()
			if err != nil {
				return "", nil, nil, err
			}
			attrs[k.text] = v
			if !p.accept(",") {
				if err := p.expect("}"); err != nil {
					return "", nil, nil, err
				}
				break
			}
		}
	}
	return op.text, args, attrs, nil
}

func (p *textParser) attrValue() (any, error) {
	t := p.next()
	switch {
	case t.kind == tString:
		return t.text, nil
	case t.kind == tNumber || t.kind == tIdent && (t.text == "NaN" || t.text == "Inf"):
		return parseNumber(t.text, func() error { return p.errf(t.col, "expected a number, got %s", t.desc()) })
	case t.kind == tPunct && t.text == "[":
		var sh Shape
		ints := true
		if p.accept("]") {
			return []int{}, nil
		}
		for {
			d := p.next()
			switch {
			case d.kind == tNumber:
				n, err := strconv.Atoi(d.text)
				if err != nil {
					return nil, p.errf(d.col, "expected an integer, got %s", d.desc())
				}
				sh = append(sh, C(n))
			case d.kind == tIdent && isIdent(d.text):
				sh = append(sh, S(d.text))
				ints = false
			default:
				return nil, p.errf(d.col, "expected an integer or a symbol, got %s", d.desc())
			}
			if p.accept("]") {
				break
			}
			if err := p.expect(","); err != nil {
				return nil, err
			}
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
	return nil, p.errf(t.col, "expected an attribute value, got %s", t.desc())
}

// parseNumber reads an int, or a float when the text has '.', 'e', Inf or NaN.
func parseNumber(s string, bad func() error) (any, error) {
	if !strings.ContainsAny(s, ".eEIN") {
		n, err := strconv.Atoi(s)
		if err != nil {
			return nil, bad()
		}
		return n, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return nil, bad()
	}
	return f, nil
}

// typ parses dtype[dims].
func (p *textParser) typ() (Type, error) {
	d := p.next()
	if d.kind != tIdent {
		return Type{}, p.errf(d.col, "expected a dtype (%s), got %s", strings.Join(DTypeNames(), ", "), d.desc())
	}
	dt, err := ParseDType(d.text)
	if err != nil {
		return Type{}, p.errf(d.col, "expected a dtype (%s), got %s", strings.Join(DTypeNames(), ", "), d.desc())
	}
	if err := p.expect("["); err != nil {
		return Type{}, err
	}
	sh := Shape{}
	if p.accept("]") {
		return Type{dt, sh}, nil
	}
	for {
		t := p.next()
		switch {
		case t.kind == tNumber:
			n, err := strconv.Atoi(t.text)
			if err != nil || n < 0 {
				return Type{}, p.errf(t.col, "expected a dimension, got %s", t.desc())
			}
			sh = append(sh, C(n))
		case t.kind == tIdent && isIdent(t.text):
			sh = append(sh, S(t.text))
		default:
			return Type{}, p.errf(t.col, "expected a dimension, got %s", t.desc())
		}
		if p.accept("]") {
			return Type{dt, sh}, nil
		}
		if err := p.expect(","); err != nil {
			return Type{}, err
		}
	}
}
