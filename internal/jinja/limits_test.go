package jinja

import (
	"context"
	"errors"
	"sort"
	"strings"
	"testing"
)

// TestEveryBuiltinHasACost: a builtin without an entry would be charged as
// a scalar, which is wrong for anything that walks or builds.
func TestEveryBuiltinHasACost(t *testing.T) {
	s := newScope(nil)
	registerFilters(s)
	registerGlobals(s)
	var missing []string
	for name, v := range s.vars {
		c := v.AsCallable()
		if !c.builtin {
			t.Errorf("%s is not marked builtin", name)
		}
		if _, ok := builtinCosts[c.Name]; !ok {
			missing = append(missing, c.Name)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("no cost entry for %v", missing)
	}
}

// TestLimits: each template exceeds one limit through one builtin or
// operator, at a size where the limit is the only thing that stops it.
func TestLimits(t *testing.T) {
	small := Limits{Steps: 100_000, Alloc: 1 << 20, Output: 1 << 16, Calls: 16, Nesting: 500}
	big := `{% set s = "a" * 100000 %}`
	tests := []struct {
		name, src, limit string
	}{
		{"loop", `{% for i in range(20000) %}{% if i and i and i and i and i %}{% endif %}{% endfor %}`, "steps"},
		{"range", `{{ range(100000) | length }}`, "alloc"},
		{"range near 2^63", `{{ range(-9223372036854775807, 9223372036854775807, 2) | length }}`, "alloc"},
		{"string repeat", `{{ "ab" * 1000000 }}`, "alloc"},
		{"list repeat", `{{ ([1, 2] * 100000) | length }}`, "alloc"},
		{"concat", big + `{% for i in range(20) %}{% set s = s ~ s %}{% endfor %}`, "alloc"},
		{"plus", big + `{% for i in range(20) %}{% set s = s + s %}{% endfor %}`, "alloc"},
		{"format operator width", `{{ "%999999d%999999d" % (1, 2) }}`, "alloc"},
		{"format method", big + `{{ "{0}{0}{0}{0}{0}{0}{0}{0}{0}{0}{0}{0}".format(s) | length }}`, "alloc"},
		{"replace method", `{{ ("a" * 2000).replace("a", "b" * 1000) | length }}`, "alloc"},
		{"replace filter", `{{ ("a" * 2000) | replace("a", "b" * 1000) | length }}`, "alloc"},
		{"split", big + `{{ (s | join(" ")).split(" ") | length }}`, "alloc"},
		{"indent", `{{ ("\n" * 1000) | indent(2000) | length }}`, "alloc"},
		{"escape", big + `{{ (s * 2) | replace("a", "<") | escape | length }}`, "alloc"},
		{"join", big + `{% set l = [s, s, s, s, s, s, s, s, s, s, s] %}{{ l | join | length }}`, "alloc"},
		{"tojson", big + `{% set l = [s, s] %}{{ l | tojson | length }}`, "alloc"},
		{"tojson indent", `{% set l = [[[[1]]]] %}{{ l | tojson(indent=100000) | length }}`, "alloc"},
		{"string filter", big + `{% set l = [s, s] %}{{ l | string | length }}`, "alloc"},
		{"print list", big + `{% set l = [s, s] %}{{ l }}`, "alloc"},
		{"list of string", big + `{{ s | list | length }}`, "alloc"},
		{"map filter", big + `{% set l = [s, s, s] %}{{ l | map("tojson") | list | length }}`, "alloc"},
		{"batch fill", `{{ [1] | batch(100000, 0) | list | length }}`, "alloc"},
		{"iterate string", big + `{% for c in s %}{% endfor %}`, "alloc"},
		{"unique", `{% set l = range(3000) | list %}{{ l | unique | list | length }}`, "steps"},
		{"sort", `{% set l = [[[1]]] * 10000 %}{{ l | sort | length }}`, "steps"},
		{"compare", `{% set l = [1] * 20000 %}{% for i in range(100) %}{{ l == l }}{% endfor %}`, "steps"},
		{"in", `{% set l = [[1]] * 20000 %}{% for i in range(100) %}{{ [2] in l }}{% endfor %}`, "steps"},
		{"loop.changed", `{% set l = [[1]] * 20000 %}{% for i in range(100) %}{{ loop.changed(l) }}{% endfor %}`, "steps"},
		{"output", `{% for i in range(100) %}{{ "a" * 1000 }}{% endfor %}`, "output"},
		{"macro recursion", `{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}`, "calls"},
		{"caller recursion", `{% macro f() %}{% call f() %}x{% endcall %}{% endmacro %}{{ f() }}`, "calls"},
		{"recursive loop", `{% set l = [[1]] %}{% for x in l recursive %}{{ loop(l) }}{% endfor %}`, "calls"},
		{"concatenation chain", `{{ 'a'` + strings.Repeat(` ~ 'a'`, 1000) + ` }}`, "nesting"},
		{"deep list", `{% set ns = namespace(x=1) %}{% for i in range(1100) %}{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x | length }}{{ ns.x == ns.x }}`, "value depth"},
		{"self-containing lists", `{% set a = [] %}{% set b = [] %}{% set _ = a.append(a) %}{% set _ = b.append(b) %}{{ a < b }}`, "value depth"},
		{"fromjson depth", `{{ ("[" * 1100 ~ "]" * 1100) | fromjson }}`, "value depth"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tmpl, err := Compile(tc.src)
			if err != nil {
				t.Fatal(err)
			}
			lim := small
			if tc.limit == "steps" {
				lim.Alloc = 1 << 30 // loops allocate a scope per iteration
			}
			out, err := tmpl.RenderContext(context.Background(), nil, lim)
			var le *LimitError
			if !errors.As(err, &le) || le.Limit != tc.limit {
				t.Fatalf("got %v (%d bytes of output), want the %s limit", err, len(out), tc.limit)
			}
		})
	}
}

// TestWithinLimits: the same constructs at ordinary sizes render, under
// the same small limits.
func TestWithinLimits(t *testing.T) {
	small := Limits{Steps: 100_000, Alloc: 4 << 20, Output: 1 << 16, Calls: 16, Nesting: 500}
	tests := []struct{ src, want string }{
		{`{% set l = [] %}{% for i in range(3000) %}{% set _ = l.append(i) %}{% endfor %}{{ l | length }}`, "3000"},
		{`{{ range(5) | join(",") }}`, "0,1,2,3,4"},
		{`{{ "ab" * 3 }}{{ [1] * 2 }}`, "ababab[1, 1]"},
		{`{{ "%5d|%-3s|" % (42, "x") }}`, "   42|x  |"},
		{`{{ "{0}-{1}".format("a", "b") }}`, "a-b"},
		{`{{ "a.b.c".replace(".", "::") }}{{ "a b" | replace(" ", "_") }}`, "a::b::ca_b"},
		{`{{ "x\ny" | indent(2, first=true) }}`, "  x\n  y"},
		{`{{ {"a": [1, "b"]} | tojson(indent=1) }}`, "{\n \"a\": [\n  1,\n  \"b\"\n ]\n}"},
		{`{{ [3, 1, 2] | sort | list }}{{ [1, 1, 2] | unique | list }}`, "[1, 2, 3][1, 2]"},
		{`{{ [1, 2, 3] | batch(2, 0) | list }}`, "[[1, 2], [3, 0]]"},
		{`{% macro f(n) %}{% if n %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(10) }}`, "10987654321"},
		{`{{ ("[" * 100 ~ "]" * 100) | fromjson | length }}`, "1"},
		{`{% for c in "héllo" %}{{ c }}.{% endfor %}{{ "héllo" | length }}`, "h.é.l.l.o.5"},
	}
	for _, tc := range tests {
		tmpl, err := Compile(tc.src)
		if err != nil {
			t.Fatalf("%s: %v", tc.src, err)
		}
		got, err := tmpl.RenderContext(context.Background(), nil, small)
		if err != nil || got != tc.want {
			t.Errorf("%s: got %q, %v; want %q", tc.src, got, err, tc.want)
		}
	}
}

func TestRenderCanceled(t *testing.T) {
	tmpl, err := Compile(`{% for i in range(100000) %}{{ i }}{% endfor %}`)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := tmpl.RenderContext(ctx, nil, Limits{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
}

func TestParseNesting(t *testing.T) {
	for _, src := range []string{
		"{{ " + strings.Repeat("(", 300) + "1" + strings.Repeat(")", 300) + " }}",
		"{{ " + strings.Repeat("[", 300) + strings.Repeat("]", 300) + " }}",
		"{{ " + strings.Repeat("not ", 300) + "1 }}",
		"{{ " + strings.Repeat("-", 300) + "1 }}",
		"{{ " + strings.Repeat("f(", 300) + strings.Repeat(")", 300) + " }}",
		strings.Repeat("{% if 1 %}", 300) + strings.Repeat("{% endif %}", 300),
	} {
		if _, err := Compile(src); err == nil || !strings.Contains(err.Error(), "nested deeper than") {
			t.Errorf("%.40s...: %v", src, err)
		}
	}
	if _, err := Compile("{{ " + strings.Repeat("(", 200) + "1" + strings.Repeat(")", 200) + " }}"); err != nil {
		t.Errorf("200 parentheses: %v", err)
	}
}
