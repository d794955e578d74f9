package models

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// The expression language of model files: arithmetic, comparisons and a few
// functions over numbers, strings and config values. It has no loops,
// assignment or user functions; model files stay declarative.
//
//	expr:  a || b, a && b, !a, == != < <= > >=, + - * / (float) // (floor) %,
//	       -x, x[i], x.field, (e), 12, 1e-6, "text",
//	       if(cond, a, b), sqrt(x), int(x), float(x), min(a, b), max(a, b)
//
// Values are int, float64, string, bool, []any, map[string]any, and sym (a
// symbolic dimension such as T, usable only as itself).

// sym is a symbolic dimension in an expression.
type sym string

// exprError is an error at a byte offset of the expression text.
type exprError struct {
	off int
	msg string
}

func (e *exprError) Error() string { return e.msg }

type exprParser struct {
	src    string
	pos    int
	depth  int // nesting of parentheses, calls, indexes and prefix operators
	lookup func(name string) (any, error)
}

// maxExprDepth bounds the nesting of an expression: the parser recurses
// once per level, and a model file must not be able to exhaust the stack.
const maxExprDepth = 200

// nest enters one level of nesting; the caller defers p.depth--.
func (p *exprParser) nest() error {
	if p.depth >= maxExprDepth {
		return p.errf("expected an expression nested at most %d levels deep", maxExprDepth)
	}
	p.depth++
	return nil
}

// evalExpr evaluates src; lookup resolves identifiers.
func evalExpr(src string, lookup func(string) (any, error)) (any, error) {
	p := &exprParser{src: src, lookup: lookup}
	v, err := p.or()
	if err != nil {
		return nil, err
	}
	p.space()
	if p.pos < len(p.src) {
		return nil, p.errf("expected an operator or the end of the expression, got %q", p.src[p.pos:])
	}
	return v, nil
}

func (p *exprParser) errf(format string, args ...any) error {
	return &exprError{p.pos, fmt.Sprintf(format, args...)}
}

func (p *exprParser) errAt(off int, format string, args ...any) error {
	return &exprError{off, fmt.Sprintf(format, args...)}
}

func (p *exprParser) space() {
	for p.pos < len(p.src) && (p.src[p.pos] == ' ' || p.src[p.pos] == '\t') {
		p.pos++
	}
}

// op consumes one of the operators if next.
func (p *exprParser) op(ops ...string) string {
	p.space()
	for _, o := range ops {
		if strings.HasPrefix(p.src[p.pos:], o) {
			// Do not read "<=" as "<", nor "//" as "/".
			if len(o) == 1 && p.pos+1 < len(p.src) && (p.src[p.pos+1] == '=' && strings.Contains("<>!=", o) || o == "/" && p.src[p.pos+1] == '/') {
				continue
			}
			p.pos += len(o)
			return o
		}
	}
	return ""
}

func (p *exprParser) or() (any, error) {
	if err := p.nest(); err != nil {
		return nil, err
	}
	defer func() { p.depth-- }()
	l, err := p.and()
	for err == nil {
		at := p.pos
		if p.op("||") == "" {
			break
		}
		var r any
		if r, err = p.and(); err != nil {
			break
		}
		l, err = logic(p, at, "||", l, r)
	}
	return l, err
}

func (p *exprParser) and() (any, error) {
	l, err := p.cmp()
	for err == nil {
		at := p.pos
		if p.op("&&") == "" {
			break
		}
		var r any
		if r, err = p.cmp(); err != nil {
			break
		}
		l, err = logic(p, at, "&&", l, r)
	}
	return l, err
}

func logic(p *exprParser, at int, op string, l, r any) (any, error) {
	a, ok1 := l.(bool)
	b, ok2 := r.(bool)
	if !ok1 || !ok2 {
		return nil, p.errAt(at, "expected booleans around %s, got %s and %s", op, describe(l), describe(r))
	}
	if op == "&&" {
		return a && b, nil
	}
	return a || b, nil
}

func (p *exprParser) cmp() (any, error) {
	l, err := p.sum()
	if err != nil {
		return nil, err
	}
	at := p.pos
	op := p.op("==", "!=", "<=", ">=", "<", ">")
	if op == "" {
		return l, nil
	}
	r, err := p.sum()
	if err != nil {
		return nil, err
	}
	if op == "==" || op == "!=" {
		eq, ok := equal(l, r)
		if !ok {
			return nil, p.errAt(at, "cannot compare %s with %s", describe(l), describe(r))
		}
		return eq == (op == "=="), nil
	}
	a, ok1 := num(l)
	b, ok2 := num(r)
	if !ok1 || !ok2 {
		return nil, p.errAt(at, "expected numbers around %s, got %s and %s", op, describe(l), describe(r))
	}
	switch op {
	case "<":
		return a < b, nil
	case "<=":
		return a <= b, nil
	case ">":
		return a > b, nil
	}
	return a >= b, nil
}

func equal(l, r any) (bool, bool) {
	if a, ok := num(l); ok {
		b, ok := num(r)
		return a == b, ok
	}
	switch a := l.(type) {
	case string:
		b, ok := r.(string)
		return a == b, ok
	case bool:
		b, ok := r.(bool)
		return a == b, ok
	case sym:
		b, ok := r.(sym)
		return a == b, ok
	}
	return false, false
}

func (p *exprParser) sum() (any, error) {
	l, err := p.prod()
	for err == nil {
		at := p.pos
		op := p.op("+", "-")
		if op == "" {
			break
		}
		var r any
		if r, err = p.prod(); err != nil {
			break
		}
		l, err = arith(p, at, op, l, r)
	}
	return l, err
}

func (p *exprParser) prod() (any, error) {
	l, err := p.unary()
	for err == nil {
		at := p.pos
		op := p.op("//", "*", "/", "%")
		if op == "" {
			break
		}
		var r any
		if r, err = p.unary(); err != nil {
			break
		}
		l, err = arith(p, at, op, l, r)
	}
	return l, err
}

func arith(p *exprParser, at int, op string, l, r any) (any, error) {
	if a, ok := l.(string); ok && op == "+" {
		if b, ok := r.(string); ok {
			return a + b, nil
		}
	}
	ai, aInt := l.(int)
	bi, bInt := r.(int)
	if aInt && bInt {
		overflow := func() (any, error) {
			return nil, p.errAt(at, "integer overflow: %d %s %d does not fit in 64 bits", ai, op, bi)
		}
		switch op {
		case "+":
			if bi > 0 && ai > math.MaxInt-bi || bi < 0 && ai < math.MinInt-bi {
				return overflow()
			}
			return ai + bi, nil
		case "-":
			if bi < 0 && ai > math.MaxInt+bi || bi > 0 && ai < math.MinInt+bi {
				return overflow()
			}
			return ai - bi, nil
		case "*":
			if ai != 0 && ((ai*bi)/ai != bi || ai == -1 && bi == math.MinInt) {
				return overflow()
			}
			return ai * bi, nil
		case "//", "%":
			if bi == 0 {
				return nil, p.errAt(at, "division by zero")
			}
			if op == "%" {
				return ai % bi, nil
			}
			if ai == math.MinInt && bi == -1 {
				return overflow()
			}
			q := ai / bi
			if (ai%bi != 0) && ((ai < 0) != (bi < 0)) {
				q--
			}
			return q, nil
		}
	}
	a, ok1 := num(l)
	b, ok2 := num(r)
	if !ok1 || !ok2 {
		return nil, p.errAt(at, "expected numbers around %s, got %s and %s", op, describe(l), describe(r))
	}
	switch op {
	case "+":
		return a + b, nil
	case "-":
		return a - b, nil
	case "*":
		return a * b, nil
	case "/":
		if b == 0 {
			return nil, p.errAt(at, "division by zero")
		}
		return a / b, nil
	case "//":
		if b == 0 {
			return nil, p.errAt(at, "division by zero")
		}
		return math.Floor(a / b), nil
	}
	return nil, p.errAt(at, "%% needs integers, got %s and %s", describe(l), describe(r))
}

func (p *exprParser) unary() (any, error) {
	at := p.pos
	op := p.op("-", "!")
	if op != "" {
		if err := p.nest(); err != nil {
			return nil, err
		}
		defer func() { p.depth-- }()
	}
	switch op {
	case "-":
		v, err := p.unary()
		if err != nil {
			return nil, err
		}
		switch x := v.(type) {
		case int:
			if x == math.MinInt {
				return nil, p.errAt(at, "integer overflow: -(%d) does not fit in 64 bits", x)
			}
			return -x, nil
		case float64:
			return -x, nil
		}
		return nil, p.errAt(at, "expected a number after -, got %s", describe(v))
	case "!":
		v, err := p.unary()
		if err != nil {
			return nil, err
		}
		b, ok := v.(bool)
		if !ok {
			return nil, p.errAt(at, "expected a boolean after !, got %s", describe(v))
		}
		return !b, nil
	}
	return p.postfix()
}

func (p *exprParser) postfix() (any, error) {
	v, err := p.primary()
	for err == nil {
		p.space()
		at := p.pos
		switch {
		case p.op("[") != "":
			var idx any
			if idx, err = p.or(); err != nil {
				return nil, err
			}
			if p.op("]") == "" {
				return nil, p.errf("expected ]")
			}
			v, err = index(p, at, v, idx)
		case p.pos < len(p.src) && p.src[p.pos] == '.' && p.pos+1 < len(p.src) && isIdentStart(p.src[p.pos+1]):
			p.pos++
			name := p.ident()
			m, ok := v.(map[string]any)
			if !ok {
				return nil, p.errAt(at, "expected a record before .%s, got %s", name, describe(v))
			}
			f, ok := m[name]
			if !ok {
				return nil, p.errAt(at+1, "expected a field of %s, got %s", keysOf(m), name)
			}
			v = f
		default:
			return v, nil
		}
	}
	return nil, err
}

func index(p *exprParser, at int, v, idx any) (any, error) {
	switch c := v.(type) {
	case []any:
		i, ok := idx.(int)
		if !ok || i < 0 || i >= len(c) {
			return nil, p.errAt(at, "expected an index in [0, %d), got %s", len(c), describe(idx))
		}
		return c[i], nil
	case map[string]any:
		k, ok := idx.(string)
		if !ok {
			return nil, p.errAt(at, "expected a string key, got %s", describe(idx))
		}
		f, ok := c[k]
		if !ok {
			return nil, p.errAt(at, "expected a key of %s, got %q", keysOf(c), k)
		}
		return f, nil
	}
	return nil, p.errAt(at, "cannot index %s", describe(v))
}

func isIdentStart(c byte) bool { return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

func (p *exprParser) ident() string {
	start := p.pos
	for p.pos < len(p.src) && (isIdentStart(p.src[p.pos]) || p.src[p.pos] >= '0' && p.src[p.pos] <= '9') {
		p.pos++
	}
	return p.src[start:p.pos]
}

func (p *exprParser) primary() (any, error) {
	p.space()
	if p.pos >= len(p.src) {
		return nil, p.errf("expected a value, got the end of the expression")
	}
	start := p.pos
	c := p.src[p.pos]
	switch {
	case c == '(':
		p.pos++
		v, err := p.or()
		if err != nil {
			return nil, err
		}
		if p.op(")") == "" {
			return nil, p.errf("expected )")
		}
		return v, nil
	case c == '"' || c == '\'':
		end := strings.IndexByte(p.src[p.pos+1:], c)
		if end < 0 {
			return nil, p.errf("expected a closing %c", c)
		}
		p.pos += end + 2
		return p.src[start+1 : p.pos-1], nil
	case c >= '0' && c <= '9' || c == '.':
		for p.pos < len(p.src) && (p.src[p.pos] >= '0' && p.src[p.pos] <= '9' || p.src[p.pos] == '.' ||
			p.src[p.pos] == 'e' || p.src[p.pos] == 'E' ||
			(p.src[p.pos] == '-' || p.src[p.pos] == '+') && (p.src[p.pos-1] == 'e' || p.src[p.pos-1] == 'E')) {
			p.pos++
		}
		text := p.src[start:p.pos]
		if n, err := strconv.Atoi(text); err == nil {
			return n, nil
		}
		f, err := strconv.ParseFloat(text, 64)
		if err != nil {
			return nil, p.errAt(start, "expected a number, got %q", text)
		}
		return f, nil
	case isIdentStart(c):
		name := p.ident()
		p.space()
		if p.pos < len(p.src) && p.src[p.pos] == '(' {
			return p.call(start, name)
		}
		switch name {
		case "true":
			return true, nil
		case "false":
			return false, nil
		}
		v, err := p.lookup(name)
		if err != nil {
			return nil, p.errAt(start, "%v", err)
		}
		return v, nil
	}
	return nil, p.errf("expected a value, got %q", p.src[p.pos:])
}

func (p *exprParser) call(start int, name string) (any, error) {
	p.pos++ // (
	nargs := map[string]int{"if": 3, "sqrt": 1, "int": 1, "float": 1, "min": 2, "max": 2}
	want, ok := nargs[name]
	if !ok {
		return nil, p.errAt(start, "expected a function (if, sqrt, int, float, min, max), got %s", name)
	}
	var args []any
	for i := 0; i < want; i++ {
		if i > 0 && p.op(",") == "" {
			return nil, p.errf("expected , (%s takes %d arguments)", name, want)
		}
		// if(c, a, b) evaluates only the branch it takes.
		if name == "if" && i > 0 {
			c, _ := args[0].(bool)
			if (i == 1) != c {
				if err := p.skipArg(); err != nil {
					return nil, err
				}
				args = append(args, nil)
				continue
			}
		}
		v, err := p.or()
		if err != nil {
			return nil, err
		}
		if name == "if" && i == 0 {
			if _, ok := v.(bool); !ok {
				return nil, p.errAt(start, "expected a boolean condition in if, got %s", describe(v))
			}
		}
		args = append(args, v)
	}
	if p.op(")") == "" {
		return nil, p.errf("expected ) (%s takes %d arguments)", name, want)
	}
	switch name {
	case "if":
		if args[0].(bool) {
			return args[1], nil
		}
		return args[2], nil
	case "min", "max":
		if a, ok := args[0].(int); ok {
			if b, ok := args[1].(int); ok {
				if (a < b) == (name == "min") {
					return a, nil
				}
				return b, nil
			}
		}
		a, ok1 := num(args[0])
		b, ok2 := num(args[1])
		if !ok1 || !ok2 {
			return nil, p.errAt(start, "expected numbers in %s", name)
		}
		if name == "min" {
			return math.Min(a, b), nil
		}
		return math.Max(a, b), nil
	}
	x, ok := num(args[0])
	if !ok {
		return nil, p.errAt(start, "expected a number in %s, got %s", name, describe(args[0]))
	}
	switch name {
	case "sqrt":
		if x < 0 {
			return nil, p.errAt(start, "sqrt of a negative number")
		}
		return math.Sqrt(x), nil
	case "int":
		if math.IsNaN(x) || math.Abs(x) > 1<<53 {
			return nil, p.errAt(start, "int of %g is out of range", x)
		}
		return int(x), nil
	}
	return x, nil
}

// skipArg skips an argument without evaluating it, honouring nesting and quotes.
func (p *exprParser) skipArg() error {
	depth := 0
	for p.pos < len(p.src) {
		switch c := p.src[p.pos]; c {
		case '(', '[':
			depth++
		case ')', ']':
			if depth == 0 {
				return nil
			}
			depth--
		case ',':
			if depth == 0 {
				return nil
			}
		case '"', '\'':
			end := strings.IndexByte(p.src[p.pos+1:], c)
			if end < 0 {
				return p.errf("expected a closing %c", c)
			}
			p.pos += end + 1
		}
		p.pos++
	}
	return nil
}

func num(v any) (float64, bool) {
	switch x := v.(type) {
	case int:
		return float64(x), true
	case float64:
		return x, true
	}
	return 0, false
}

func describe(v any) string {
	switch x := v.(type) {
	case int:
		return fmt.Sprintf("int %d", x)
	case float64:
		return fmt.Sprintf("float %g", x)
	case string:
		return fmt.Sprintf("string %q", x)
	case bool:
		return fmt.Sprintf("bool %t", x)
	case sym:
		return "symbolic dimension " + string(x)
	case []any:
		return "a list"
	case map[string]any:
		return "a record"
	case nil:
		return "nothing"
	}
	return fmt.Sprintf("%T", v)
}

func keysOf(m map[string]any) string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return "{" + strings.Join(ks, ", ") + "}"
}
