package jinja

// lagc: render limits. A chat template ships with a downloaded checkpoint
// and is untrusted: it must not overflow the Go stack (a fatal error that
// recover cannot catch), run without end, or allocate without bound. Every
// render carries a budget. Statements and expressions cost one step each;
// builtins cost steps for the items and bytes they walk and are charged,
// before they run, for the bytes they may allocate; nested calls and nested
// evaluation are counted. Exceeding any limit, or cancelling the context,
// aborts the render with an error.

import (
	"context"
	"fmt"
	"math"
	"math/bits"
	"strings"
	"unicode/utf8"
)

// Limits bound one render. A zero field takes DefaultLimits' value.
type Limits struct {
	// Steps bounds evaluation work: one per statement and expression
	// evaluated, plus the items and bytes builtins walk.
	Steps int64
	// Alloc bounds the bytes of strings, lists and dicts the render creates,
	// summed over the render (an upper estimate; garbage is not credited).
	Alloc int64
	// Output bounds the bytes written to the output and to captured blocks
	// (macro bodies, set blocks, caller bodies).
	Output int64
	// Calls bounds nested macro, caller and recursive-loop calls.
	Calls int
	// Nesting bounds nested evaluation of statements and expressions.
	Nesting int
}

// DefaultLimits are generous for chat templates: rendering a conversation
// takes thousands of steps and allocates little more than its text.
func DefaultLimits() Limits {
	return Limits{
		Steps:   20_000_000,
		Alloc:   256 << 20,
		Output:  64 << 20,
		Calls:   256,
		Nesting: 20_000,
	}
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	if l.Steps <= 0 {
		l.Steps = d.Steps
	}
	if l.Alloc <= 0 {
		l.Alloc = d.Alloc
	}
	if l.Output <= 0 {
		l.Output = d.Output
	}
	if l.Calls <= 0 {
		l.Calls = d.Calls
	}
	if l.Nesting <= 0 {
		l.Nesting = d.Nesting
	}
	return l
}

// maxValueDepth bounds the nesting of values that are printed, compared,
// walked or decoded (Python's own recursion limit is 1000 frames).
const maxValueDepth = 1000

// LimitError says which limit a render exceeded.
type LimitError struct {
	Limit string // "steps", "alloc", "output", "calls", "nesting" or "value depth"
	Max   int64
}

func (e *LimitError) Error() string {
	switch e.Limit {
	case "steps":
		return fmt.Sprintf("template exceeded its step limit (%d evaluation steps)", e.Max)
	case "alloc":
		return fmt.Sprintf("template exceeded its allocation limit (%d bytes)", e.Max)
	case "output":
		return fmt.Sprintf("template exceeded its output limit (%d bytes)", e.Max)
	case "calls":
		return fmt.Sprintf("template exceeded its call depth limit (%d nested macro calls)", e.Max)
	case "nesting":
		return fmt.Sprintf("template exceeded its nesting limit (%d nested evaluations)", e.Max)
	default:
		return fmt.Sprintf("template exceeded its %s limit (%d)", e.Limit, e.Max)
	}
}

// abort is the panic payload that unwinds a render when a limit is hit;
// render recovers it. Panicking keeps the checks out of the many helpers
// that have no error result (printValue, Equals).
type abort struct{ err error }

func fail(err error) { panic(abort{err}) }

// recoverAbort turns an abort panic into *err and re-raises anything else.
func recoverAbort(err *error) {
	if r := recover(); r != nil {
		a, ok := r.(abort)
		if !ok {
			panic(r)
		}
		*err = a.err
	}
}

// budget is the state of one render's limits, shared by every evaluator the
// render creates (macro bodies, blocks, recursive loops).
type budget struct {
	ctx       context.Context
	lim       Limits
	steps     int64
	nextCheck int64
	alloc     int64
	output    int64
	calls     int
	nesting   int
}

func newBudget(ctx context.Context, lim Limits) *budget {
	if ctx == nil {
		ctx = context.Background()
	}
	return &budget{ctx: ctx, lim: lim.withDefaults()}
}

// ctxCheckEvery is how many steps pass between context checks.
const ctxCheckEvery = 1024

func (b *budget) step(n int64) {
	b.steps = satAdd(b.steps, n)
	if b.steps > b.lim.Steps {
		fail(&LimitError{Limit: "steps", Max: b.lim.Steps})
	}
	if b.steps >= b.nextCheck {
		b.nextCheck = b.steps + ctxCheckEvery
		if err := b.ctx.Err(); err != nil {
			fail(fmt.Errorf("render stopped: %w", err))
		}
	}
}

// scan charges the steps for walking n bytes (a step is worth about 128).
func (b *budget) scan(n int) { b.step(int64(n)/128 + 1) }

func (b *budget) allocate(n int64) {
	b.alloc = satAdd(b.alloc, n)
	if b.alloc > b.lim.Alloc {
		fail(&LimitError{Limit: "alloc", Max: b.lim.Alloc})
	}
}

func (b *budget) write(n int) {
	b.output += int64(n)
	if b.output > b.lim.Output {
		fail(&LimitError{Limit: "output", Max: b.lim.Output})
	}
	b.allocate(int64(n))
}

func (b *budget) call() {
	b.calls++
	if b.calls > b.lim.Calls {
		fail(&LimitError{Limit: "calls", Max: int64(b.lim.Calls)})
	}
}

func (b *budget) ret() { b.calls-- }

func (b *budget) push() {
	b.nesting++
	if b.nesting > b.lim.Nesting {
		fail(&LimitError{Limit: "nesting", Max: int64(b.lim.Nesting)})
	}
}

func (b *budget) pop() { b.nesting-- }

// valueDepth fails when a recursive walk of a value goes deeper than
// maxValueDepth.
func valueDepth(depth int) {
	if depth > maxValueDepth {
		fail(&LimitError{Limit: "value depth", Max: maxValueDepth})
	}
}

func satAdd(a, b int64) int64 {
	if b > 0 && a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

func satMul(a, b int64) int64 {
	if a <= 0 || b <= 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi != 0 || lo > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(lo)
}

// Sizes used for estimates: a Value in a slice, and the overhead of a
// list, dict entry, scope or closure.
const (
	valueBytes = 32
	entryBytes = 64
	frameBytes = 256
)

// weight is what walking a value found: its nodes, an upper bound of the
// bytes printing it (repr or JSON) produces, and its depth.
type weight struct {
	nodes, bytes int64
	depth        int
}

// weigh walks v, charging a step per node, and bounds its printed size.
// Strings count six bytes per byte (JSON's \u00XX); cycles count once.
func (b *budget) weigh(v Value) weight {
	var w weight
	ancestors := map[any]bool{}
	var walk func(v Value, depth int)
	walk = func(v Value, depth int) {
		valueDepth(depth)
		w.nodes++
		w.depth = max(w.depth, depth)
		b.step(1)
		switch v.kind {
		case KindString:
			w.bytes = satAdd(w.bytes, satMul(int64(len(v.AsString())), 6)+2)
		case KindList:
			l := v.AsList()
			if ancestors[l] {
				w.bytes += 5
				return
			}
			ancestors[l] = true
			w.bytes += 2
			for _, item := range l.Items {
				w.bytes = satAdd(w.bytes, 2)
				walk(item, depth+1)
			}
			delete(ancestors, l)
		case KindDict:
			d := v.AsDict()
			if ancestors[d] {
				w.bytes += 5
				return
			}
			ancestors[d] = true
			w.bytes += 2
			for _, key := range d.Keys {
				w.bytes = satAdd(w.bytes, satMul(int64(len(key)), 6)+6)
				walk(d.Data[key], depth+1)
			}
			delete(ancestors, d)
		default:
			w.bytes += 32 // numbers, None, booleans, <callable name>
		}
		if w.bytes > b.lim.Alloc {
			fail(&LimitError{Limit: "alloc", Max: b.lim.Alloc})
		}
	}
	walk(v, 0)
	return w
}

// printed charges what printValue(v) allocates and returns the length it
// may have: strings print as themselves, containers as their repr.
func (b *budget) printed(v Value) int64 {
	switch v.kind {
	case KindString:
		return int64(len(v.AsString()))
	case KindList, KindDict:
		w := b.weigh(v)
		b.allocate(w.bytes)
		return w.bytes
	}
	return 32
}

// deep charges the steps of comparing or searching v (Equals, sort).
func (b *budget) deep(v Value) int64 {
	switch v.kind {
	case KindList, KindDict:
		return b.weigh(v).nodes
	case KindString:
		b.scan(len(v.AsString()))
	}
	return 1
}

// items charges iterableItems(v), which turns a string into one value per
// character and a dict into its keys, and returns the number of items.
func (b *budget) items(v Value) int64 {
	switch v.kind {
	case KindList:
		n := int64(v.AsList().Len())
		b.step(n/32 + 1)
		return n
	case KindDict:
		n := int64(v.AsDict().Len())
		b.step(n/32 + 1)
		b.allocate(satMul(n, valueBytes))
		return n
	case KindString:
		s := v.AsString()
		b.scan(len(s))
		b.allocate(satMul(int64(len(s)), 48))
		return int64(utf8.RuneCountInString(s))
	}
	return 0
}

// shallow is the size charged for a builtin's result.
func shallow(v Value) int64 {
	switch v.kind {
	case KindString:
		return int64(len(v.AsString()))
	case KindList:
		return satMul(int64(v.AsList().Len()), valueBytes)
	case KindDict:
		return satMul(int64(v.AsDict().Len()), entryBytes)
	}
	return 0
}

// replaced is the length of strings.Replace(s, old, new, n).
func replaced(b *budget, s, old, new string, n int) int64 {
	b.scan(len(s))
	count := int64(strings.Count(s, old))
	if n >= 0 && int64(n) < count {
		count = int64(n)
	}
	grow := int64(len(new)) - int64(len(old))
	if grow <= 0 {
		return int64(len(s))
	}
	return satAdd(int64(len(s)), satMul(count, grow))
}

// widthArg is the byte length of an indent or padding argument: a string
// is itself, a number that many spaces.
func widthArg(v Value) int64 {
	if v.IsString() {
		return int64(len(v.AsString()))
	}
	if v.IsNone() || v.IsUndefined() {
		return 0
	}
	return max(toInt64(v), 0)
}

// costFunc charges a builtin's cost before it runs.
type costFunc func(b *budget, args []Value, kwargs map[string]Value)

// arg returns args[i], or Undefined.
func arg(args []Value, i int) Value {
	if i < len(args) {
		return args[i]
	}
	return Undefined()
}

// printedArgs charges printing every argument but the first (separators,
// attribute names, test arguments).
func printedArgs(b *budget, args []Value, kwargs map[string]Value) {
	for _, a := range args[min(1, len(args)):] {
		b.printed(a)
	}
	for _, a := range kwargs {
		b.printed(a)
	}
}

// textCost charges a filter that prints its input and makes a string at most
// factor times as long.
func textCost(factor int64) costFunc {
	return func(b *budget, args []Value, kwargs map[string]Value) {
		printedArgs(b, args, kwargs)
		n := b.printed(arg(args, 0))
		b.scan(int(min(n, math.MaxInt32)))
		b.allocate(satMul(n, factor))
	}
}

// listCost charges a filter that walks its input's items once and makes a
// list of at most as many.
func listCost(b *budget, args []Value, kwargs map[string]Value) {
	printedArgs(b, args, kwargs)
	n := b.items(arg(args, 0))
	b.allocate(satMul(n, valueBytes))
}

// compareCost charges a filter that compares or tests every item (sort,
// min, select): each comparison may walk an item whole.
func compareCost(b *budget, args []Value, kwargs map[string]Value) {
	listCost(b, args, kwargs)
	n := b.deep(arg(args, 0))
	b.step(satMul(n, int64(bits.Len64(uint64(n))+1)))
}

func scalarCost(b *budget, args []Value, kwargs map[string]Value) {
	printedArgs(b, args, kwargs)
	if v := arg(args, 0); v.IsString() {
		b.scan(len(v.AsString()))
	}
}

// builtinCosts has an entry for every filter and global function, found by
// the name they are registered under (a test keeps it complete).
var builtinCosts map[string]costFunc

func init() {
	builtinCosts = map[string]costFunc{
		"tojson":     tojsonCost,
		"fromjson":   fromjsonCost,
		"from_json":  fromjsonCost,
		"items":      itemsCost,
		"dictsort":   itemsCost,
		"join":       joinCost,
		"default":    scalarCost,
		"d":          scalarCost,
		"trim":       textCost(1),
		"lower":      textCost(2),
		"upper":      textCost(2),
		"title":      textCost(6),
		"capitalize": textCost(6),
		"escape":     textCost(12),
		"e":          textCost(12),
		"string":     textCost(1),
		"wordcount":  textCost(8),
		"int":        textCost(1),
		"float":      textCost(1),
		"safe":       scalarCost,
		"round":      scalarCost,
		"abs":        scalarCost,
		"length":     scalarCost,
		"count":      scalarCost,
		"first":      listCost,
		"last":       listCost,
		"list":       listCost,
		"reverse":    reverseCost,
		"sort":       compareCost,
		"max":        compareCost,
		"min":        compareCost,
		"select":     compareCost,
		"reject":     compareCost,
		"selectattr": compareCost,
		"rejectattr": compareCost,
		"sum":        compareCost,
		"unique":     uniqueCost,
		"replace":    replaceCost,
		"indent":     indentCost,
		"batch":      batchCost,
		"map":        mapCost,

		"namespace":       scalarCost,
		"dict":            scalarCost,
		"joiner":          scalarCost,
		"cycler":          scalarCost,
		"raise_exception": textCost(1),
		"strftime_now":    textCost(16),
		"range":           rangeCost,
	}
}

func tojsonCost(b *budget, args []Value, kwargs map[string]Value) {
	w := b.weigh(arg(args, 0))
	pad := widthArg(builtinArgument(args, kwargs, 2, "indent", None()))
	perNode := satAdd(satMul(pad, int64(w.depth+1)), 2)
	if seps := builtinArgument(args, kwargs, 3, "separators", None()); seps.IsList() {
		for _, s := range seps.AsList().Items {
			perNode = satAdd(perNode, b.printed(s))
		}
	}
	size := satAdd(w.bytes, satMul(w.nodes, perNode))
	if builtinArgument(args, kwargs, 1, "ensure_ascii", NewBool(false)).IsTruthy() {
		size = satMul(size, 4)
	}
	b.allocate(size)
}

func fromjsonCost(b *budget, args []Value, kwargs map[string]Value) {
	if v := arg(args, 0); v.IsString() {
		b.scan(len(v.AsString()))
		b.allocate(satMul(int64(len(v.AsString())), 48))
	}
}

func itemsCost(b *budget, args []Value, kwargs map[string]Value) {
	if v := arg(args, 0); v.IsDict() {
		n := int64(v.AsDict().Len())
		b.step(satMul(n, int64(bits.Len64(uint64(n))+1)))
		b.allocate(satMul(n, 4*valueBytes))
	}
}

func joinCost(b *budget, args []Value, kwargs map[string]Value) {
	printedArgs(b, args, kwargs)
	sep := int64(0)
	if len(args) > 1 {
		sep = b.printed(args[1])
	}
	if s, ok := kwargs["d"]; ok {
		sep = b.printed(s)
	}
	v := arg(args, 0)
	n := b.items(v)
	size := satMul(n, sep)
	_, attr := kwargs["attribute"]
	switch {
	case v.IsList() && !attr && len(args) < 3:
		for _, item := range v.AsList().Items {
			size = satAdd(size, b.printed(item))
		}
	case v.IsList() || v.IsDict():
		size = satAdd(size, b.weigh(v).bytes)
	default:
		size = satAdd(size, satMul(n, 4))
	}
	b.allocate(satMul(size, 2))
}

func reverseCost(b *budget, args []Value, kwargs map[string]Value) {
	v := arg(args, 0)
	if v.IsString() {
		b.scan(len(v.AsString()))
		b.allocate(satMul(int64(len(v.AsString())), 6))
		return
	}
	listCost(b, args, kwargs)
}

func uniqueCost(b *budget, args []Value, kwargs map[string]Value) {
	listCost(b, args, kwargs)
	n := b.items(arg(args, 0))
	b.step(satMul(b.deep(arg(args, 0)), n)) // each item is compared with those kept
}

func replaceCost(b *budget, args []Value, kwargs map[string]Value) {
	printedArgs(b, args, kwargs)
	count := -1
	if len(args) > 3 {
		count = int(toInt64(args[3]))
	}
	if c, ok := kwargs["count"]; ok {
		count = int(toInt64(c))
	}
	v := arg(args, 0)
	if !v.IsString() {
		n := b.printed(v)
		newLen := b.printed(arg(args, 2))
		b.allocate(satMul(satAdd(n, 1), satAdd(newLen, 1)))
		return
	}
	b.allocate(replaced(b, v.AsString(), printValue(arg(args, 1)), printValue(arg(args, 2)), count))
}

func indentCost(b *budget, args []Value, kwargs map[string]Value) {
	printedArgs(b, args, kwargs)
	n := b.printed(arg(args, 0))
	pad := widthArg(builtinArgument(args, kwargs, 1, "width", NewInt(4)))
	lines := int64(1)
	if v := arg(args, 0); v.IsString() {
		s := v.AsString()
		b.scan(len(s))
		for _, r := range s {
			switch r {
			case '\n', '\r', '\v', '\f', '\x1c', '\x1d', '\x1e', '\u0085', '\u2028', '\u2029':
				lines++
			}
		}
	} else {
		lines = satAdd(n, 1)
	}
	b.allocate(satAdd(satMul(n, 3), satMul(lines, satAdd(pad, entryBytes))))
}

func batchCost(b *budget, args []Value, kwargs map[string]Value) {
	printedArgs(b, args, kwargs)
	n := b.items(arg(args, 0))
	line := toInt64(builtinArgument(args, kwargs, 1, "linecount", NewInt(0)))
	if line <= 0 {
		return
	}
	total := n
	if fill := builtinArgument(args, kwargs, 2, "fill_with", None()); !fill.IsNone() && n > 0 {
		total = satMul((n+line-1)/line, line)
	}
	b.allocate(satAdd(satMul(total, valueBytes), satMul(n/line+1, entryBytes)))
	b.step(total/32 + 1)
}

// mapCost charges map(attribute=...) like a list filter, and map("filter",
// ...) as that filter applied to every item.
func mapCost(b *budget, args []Value, kwargs map[string]Value) {
	listCost(b, args, kwargs)
	if _, ok := kwargs["attribute"]; ok || len(args) < 2 {
		return
	}
	name := printValue(args[1])
	cost, ok := builtinCosts[name]
	if !ok || name == "map" {
		return
	}
	v := arg(args, 0)
	if !v.IsList() {
		return
	}
	for _, item := range v.AsList().Items {
		cost(b, append([]Value{item}, args[2:]...), kwargs)
	}
}

func rangeCost(b *budget, args []Value, kwargs map[string]Value) {
	var start, stop, step int64 = 0, 0, 1
	switch len(args) {
	case 1:
		stop = toInt64(args[0])
	case 2:
		start, stop = toInt64(args[0]), toInt64(args[1])
	case 3:
		start, stop, step = toInt64(args[0]), toInt64(args[1]), toInt64(args[2])
	}
	var n uint64
	switch {
	case step > 0 && stop > start:
		n = (uint64(stop-start)-1)/uint64(step) + 1
	case step < 0 && stop < start:
		n = (uint64(start-stop)-1)/uint64(-step) + 1
	}
	count := int64(min(n, math.MaxInt64))
	b.allocate(satMul(count, valueBytes))
	b.step(count/16 + 1)
}

// binary charges a binary operator before it runs.
func (b *budget) binary(op string, l, r Value) {
	switch op {
	case "+":
		if l.IsString() || r.IsString() {
			b.allocate(satAdd(b.printed(l), b.printed(r)))
		} else if l.IsList() && r.IsList() {
			n := int64(l.AsList().Len() + r.AsList().Len())
			b.step(n/32 + 1)
			b.allocate(satMul(n, valueBytes))
		}
	case "~":
		b.allocate(satAdd(b.printed(l), b.printed(r)))
	case "*":
		seq, count := l, r
		if (l.IsInt() || l.IsBool()) && (r.IsString() || r.IsList()) {
			seq, count = r, l
		}
		if (seq.IsString() || seq.IsList()) && (count.IsInt() || count.IsBool()) {
			size := satMul(max(toInt64(count), 0), shallow(seq))
			b.allocate(size)
			b.step(size/128 + 1)
		}
	case "%":
		if l.IsString() {
			b.allocate(formatBound(b, l.AsString(), r))
		}
	case "==", "!=", "<", ">", "<=", ">=":
		if l.IsList() || l.IsDict() || r.IsList() || r.IsDict() {
			b.step(min(b.deep(l), b.deep(r)))
		} else if l.IsString() && r.IsString() {
			b.scan(min(len(l.AsString()), len(r.AsString())))
		}
	case "in", "not in":
		b.deep(r)
		if l.IsString() {
			b.scan(len(l.AsString()))
		}
	}
}

// fmtMaxWidth is the largest width or precision fmt accepts.
const fmtMaxWidth = 1_000_000

// formatBound bounds the length of format % args: the format, each verb's
// width and precision, and the printed arguments.
func formatBound(b *budget, format string, args Value) int64 {
	b.scan(len(format))
	size := int64(len(format))
	for i := 0; i < len(format); i++ {
		if format[i] != '%' {
			continue
		}
		size += 32
		for i++; i < len(format) && strings.IndexByte("#0- +0123456789.*hlL", format[i]) >= 0; i++ {
			switch c := format[i]; {
			case c == '*':
				size += fmtMaxWidth
			case c >= '1' && c <= '9':
				n := int64(0)
				for ; i < len(format) && format[i] >= '0' && format[i] <= '9'; i++ {
					n = min(n*10+int64(format[i]-'0'), fmtMaxWidth)
				}
				i--
				size += n
			}
		}
	}
	if args.IsList() && args.AsList().tuple {
		for _, a := range args.AsList().Items {
			size = satAdd(size, b.printed(a))
		}
	} else {
		size = satAdd(size, b.printed(args))
	}
	return size
}

// test charges a test (is ...) before it runs.
func (b *budget) test(name string, v Value, args []Value) {
	b.deep(v)
	for _, a := range args {
		b.deep(a)
	}
	if (name == "upper" || name == "lower") && v.IsString() {
		b.allocate(satMul(int64(len(v.AsString())), 2))
	}
}

// shortRepr is a value's repr cut to 80 bytes, for error messages.
func shortRepr(v Value) string {
	switch v.kind {
	case KindList:
		return fmt.Sprintf("list of %d items", v.AsList().Len())
	case KindDict:
		return fmt.Sprintf("dict of %d keys", v.AsDict().Len())
	}
	s := v.String()
	if len(s) > 80 {
		s = s[:80] + "..."
	}
	return s
}
