package server

import (
	"encoding/json"
	"lagc/internal/stopseq"
	"reflect"
	"strings"
	"testing"
)

func parseAll(inReasoning, calls bool, pieces []string) replyDelta {
	schemas := map[string]map[string]string{"get_weather": {"city": "string", "days": "integer", "code": "string"}}
	p := newReplyParser(inReasoning, calls, schemas)
	var all replyDelta
	add := func(d replyDelta) {
		all.Reasoning += d.Reasoning
		all.Content += d.Content
		all.Calls = append(all.Calls, d.Calls...)
	}
	for _, s := range pieces {
		add(p.Add(s))
	}
	add(p.Finish())
	return all
}

func TestReplyParser(t *testing.T) {
	weather := parsedCall{"get_weather", `{"city":"Paris","days":3}`}
	for _, tc := range []struct {
		name        string
		inReasoning bool
		calls       bool
		text        string
		want        replyDelta
	}{
		{"reasoning then answer", true, false, "I think.</think>The answer.", replyDelta{Reasoning: "I think.", Content: "The answer."}},
		{"no reasoning section", false, false, "Plain answer.", replyDelta{Content: "Plain answer."}},
		{"reasoning never closed", true, false, "still thinking", replyDelta{Reasoning: "still thinking"}},
		{"model opens reasoning itself", false, false, " <think>hmm</think>ok", replyDelta{Reasoning: "hmm", Content: "ok"}},
		{"think later is content", false, false, "a <think>b", replyDelta{Content: "a <think>b"}},
		{"tool call", true, true, "r</think>\n\n<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value><arg_key>days</arg_key><arg_value>3</arg_value></tool_call>",
			replyDelta{Reasoning: "r", Calls: []parsedCall{weather}}},
		{"content and two calls", false, true, "Checking.\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call>\n<tool_call>now</tool_call>\n",
			replyDelta{Content: "Checking.", Calls: []parsedCall{weather, {"now", "{}"}}}},
		{"string typed by the schema stays a string", false, true, "<tool_call>get_weather<arg_key>code</arg_key><arg_value>007</arg_value></tool_call>",
			replyDelta{Calls: []parsedCall{{"get_weather", `{"code":"007"}`}}}},
		{"JSON values of unknown tools", false, true, `<tool_call>f<arg_key>a</arg_key><arg_value>{"x": [1, 2]}</arg_value><arg_key>b</arg_key><arg_value>true</arg_value><arg_key>c</arg_key><arg_value>not json</arg_value></tool_call>`,
			replyDelta{Calls: []parsedCall{{"f", `{"a":{"x":[1,2]},"b":true,"c":"not json"}`}}}},
		{"calls not parsed without tools", false, false, "<tool_call>f</tool_call>", replyDelta{Content: "<tool_call>f</tool_call>"}},
		{"malformed call kept as text", false, true, "<tool_call>f<arg_key>a</arg_key>oops</tool_call>", replyDelta{Content: "<tool_call>f<arg_key>a</arg_key>oops</tool_call>"}},
		{"unfinished call kept as text", false, true, "x <tool_call>f<arg_key>a", replyDelta{Content: "x<tool_call>f<arg_key>a"}},
		{"a partial marker at the end is text", false, true, "a <tool_ca", replyDelta{Content: "a <tool_ca"}},
		{"only whitespace", false, false, "\n", replyDelta{}},
		{"whitespace around the answer", true, false, "r</think>\n\n  Answer \n", replyDelta{Reasoning: "r", Content: "Answer \n"}},
		{"multibyte whitespace after reasoning", true, false, "r</think>\u00a0\u3000Answer\u00a0", replyDelta{Reasoning: "r", Content: "Answer\u00a0"}},
		{"multibyte whitespace before a call", false, true, "x\u3000<tool_call>now</tool_call>", replyDelta{Content: "x", Calls: []parsedCall{{"now", "{}"}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			whole := parseAll(tc.inReasoning, tc.calls, []string{tc.text})
			if !reflect.DeepEqual(whole, tc.want) {
				t.Fatalf("got %+v\nwant %+v", whole, tc.want)
			}
			// Byte by byte gives the same.
			var bytes []string
			for i := range len(tc.text) {
				bytes = append(bytes, tc.text[i:i+1])
			}
			if got := parseAll(tc.inReasoning, tc.calls, bytes); !reflect.DeepEqual(got, whole) {
				t.Fatalf("byte by byte %+v\nwhole %+v", got, whole)
			}
		})
	}
}

// FuzzReplyParser: any text, split anywhere, parses as the whole does;
// nothing is lost (every byte of the text is in the reasoning, the content
// or a call, apart from markup); arguments are JSON objects.
func FuzzReplyParser(f *testing.F) {
	f.Add("a</think>b<tool_call>f<arg_key>k</arg_key><arg_value>1</arg_value></tool_call>", 3, true)
	f.Add("<think><tool_call></tool_call></think>", 1, false)
	f.Add("<tool_call>x<arg_key></arg_key><arg_value></arg_value>", 5, true)
	f.Fuzz(func(t *testing.T, text string, step int, inReasoning bool) {
		if step <= 0 || step > 64 {
			step = 1
		}
		var pieces []string
		for i := 0; i < len(text); i += step {
			pieces = append(pieces, text[i:min(i+step, len(text))])
		}
		whole := parseAll(inReasoning, true, []string{text})
		if got := parseAll(inReasoning, true, pieces); !reflect.DeepEqual(got, whole) {
			t.Fatalf("in pieces of %d: %+v\nwhole %+v", step, got, whole)
		}
		for _, c := range whole.Calls {
			var obj map[string]any
			if err := json.Unmarshal([]byte(c.Arguments), &obj); err != nil {
				t.Fatalf("call %s: arguments %q are not a JSON object: %v", c.Name, c.Arguments, err)
			}
		}
		if len(whole.Reasoning)+len(whole.Content) > len(text) {
			t.Fatalf("more text out (%d) than in (%d)", len(whole.Reasoning)+len(whole.Content), len(text))
		}
		markup := strings.Contains(text, thinkOpen) || strings.Contains(text, thinkClose) || strings.Contains(text, callOpen)
		if !markup && !inReasoning && strings.TrimSpace(whole.Content) != strings.TrimSpace(text) {
			t.Fatalf("text without markup changed: %q -> %q", text, whole.Content)
		}
	})
}

func TestStopMatcher(t *testing.T) {
	for _, tc := range []struct {
		stops []string
		text  string
		want  string
		hit   bool
	}{
		{nil, "abc", "abc", false},
		{[]string{"\n\n"}, "line\n\nnext", "line", true},
		{[]string{"END", "x"}, "abxEND", "ab", true},
		{[]string{"END"}, "the EN", "the EN", false},
		{[]string{"ab", "b"}, "cab", "c", true},
		{[]string{"é!"}, "caféé!", "café", true},
	} {
		for _, step := range []int{1, 2, 100} {
			m := stopseq.New(tc.stops)
			var out string
			hit := false
			for i := 0; i < len(tc.text) && !hit; i += step {
				var s string
				s, hit = m.Add(tc.text[i:min(i+step, len(tc.text))])
				out += s
			}
			if !hit {
				out += m.Flush()
			}
			if out != tc.want || hit != tc.hit {
				t.Errorf("stops %q, %q in steps of %d: %q hit=%v, want %q hit=%v", tc.stops, tc.text, step, out, hit, tc.want, tc.hit)
			}
		}
	}
}

// FuzzStopMatcher: the text before the first stop, however it is split.
func FuzzStopMatcher(f *testing.F) {
	f.Add("hello world", "wor", 2)
	f.Fuzz(func(t *testing.T, text, stop string, step int) {
		if stop == "" || step <= 0 || step > 32 {
			return
		}
		want, _, found := strings.Cut(text, stop)
		m := stopseq.New([]string{stop})
		var out string
		hit := false
		for i := 0; i < len(text) && !hit; i += step {
			var s string
			s, hit = m.Add(text[i:min(i+step, len(text))])
			out += s
		}
		if !hit {
			out += m.Flush()
		}
		if out != want || hit != found {
			t.Fatalf("%q stop %q step %d: %q hit=%v, want %q hit=%v", text, stop, step, out, hit, want, found)
		}
	})
}
