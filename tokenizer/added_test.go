package tokenizer

import (
	"slices"
	"strings"
	"testing"
)

// naiveLongestStarts tries every token at every position: the definition
// the linear matcher must agree with.
func naiveLongestStarts(tokens []*addedToken, s string) []tokenStart {
	var out []tokenStart
	for i := range len(s) {
		var best *addedToken
		for _, t := range tokens {
			if strings.HasPrefix(s[i:], t.content) && (best == nil || len(t.content) > len(best.content)) {
				best = t
			}
		}
		if best != nil {
			out = append(out, tokenStart{pos: i, tok: best})
		}
	}
	return out
}

// FuzzAddedMatching: the reversed Aho-Corasick automaton finds the longest
// token at every position, as trying each token everywhere does.
func FuzzAddedMatching(f *testing.F) {
	f.Add("<a>|<a><b>|<b>|</a>", "x<a><b>y<a</a><a><a>")
	f.Add("aab|ab|b|aaab", "aaaabaab")
	f.Add("a|aa|aaa", "aaaaaaa")
	f.Add("\n|\n\n| \n", " \n\n\n \n")
	f.Fuzz(func(t *testing.T, tokens, text string) {
		var m addedMatcher
		var list []*addedToken
		for i, c := range strings.Split(tokens, "|") {
			if c == "" || m.exact(c) != nil {
				continue
			}
			tok := &addedToken{id: int32(i), content: c}
			m.add(tok)
			list = append(list, tok)
		}
		m.compile()
		got := m.rev.longestStarts(text)
		want := naiveLongestStarts(list, text)
		if !slices.Equal(got, want) {
			t.Fatalf("tokens %q text %q: got %v, want %v", tokens, text, got, want)
		}
	})
}
