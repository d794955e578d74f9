package tokenizer

import (
	"slices"
	"unicode"
	"unicode/utf8"
)

// addedToken is one entry of tokenizer.json's added_tokens (or a GGUF
// control / user-defined token). Added tokens are found in the raw text
// before pre-tokenization, as HF does.
type addedToken struct {
	id         int32
	content    string
	special    bool // skipped by Decode when special tokens are skipped
	lstrip     bool // absorbs whitespace on its left
	rstrip     bool // absorbs whitespace on its right
	singleWord bool // matches only when not inside a word
	normalized bool // matched after normalization (second pass)
}

// addedMatcher finds added tokens in text.
type addedMatcher struct {
	byContent map[string]*addedToken
	n         int
	rev       reversedAC
}

func (m *addedMatcher) add(t *addedToken) {
	if t.content == "" {
		return
	}
	if m.byContent == nil {
		m.byContent = map[string]*addedToken{}
	}
	if _, dup := m.byContent[t.content]; !dup { // the first token with a given content wins
		m.byContent[t.content] = t
		m.rev.add(t)
	}
	m.n++
}

// compile prepares split once every token is added.
func (m *addedMatcher) compile() { m.rev.compile() }

// exact returns the token whose content is s.
func (m *addedMatcher) exact(s string) *addedToken { return m.byContent[s] }

// segment is a piece of input text: an added token (tok != nil) or plain
// text still to be pre-tokenized.
type segment struct {
	text string
	tok  *addedToken
}

// split cuts s at the added tokens it contains, leftmost-longest and without
// overlap like HF's Aho-Corasick matcher, with the lstrip / rstrip /
// single_word rules of tokenizers' AddedVocabulary::find_matches.
func (m *addedMatcher) split(s string, out []segment) []segment {
	if m.n == 0 || s == "" {
		if s != "" {
			out = append(out, segment{text: s})
		}
		return out
	}
	// The longest token starting at each position, found in one pass:
	// trying the trie at every position took time quadratic in the length
	// of a long token that nearly matches a long text.
	starts := m.rev.longestStarts(s)
	startOffset := 0
	for i := 0; i < len(s); {
		for len(starts) > 0 && starts[0].pos < i {
			starts = starts[1:]
		}
		if len(starts) == 0 {
			break
		}
		tok, start := starts[0].tok, starts[0].pos
		stop := start + len(tok.content)
		i = stop // the scan resumes after this match even when it is rejected
		if tok.singleWord {
			if (start > 0 && endsWithWord(s[:start])) || (stop < len(s) && startsWithWord(s[stop:])) {
				continue
			}
		}
		if tok.lstrip {
			ns := start
			for ns > startOffset { // no further: start is clamped to startOffset
				r, n := utf8.DecodeLastRuneInString(s[:ns])
				if !unicode.IsSpace(r) {
					break
				}
				ns -= n
			}
			start = max(ns, startOffset)
		}
		if tok.rstrip {
			for stop < len(s) {
				r, n := utf8.DecodeRuneInString(s[stop:])
				if !unicode.IsSpace(r) {
					break
				}
				stop += n
			}
			i = stop
		}
		if startOffset < start {
			out = append(out, segment{text: s[startOffset:start]})
		}
		out = append(out, segment{text: s[start:stop], tok: tok})
		startOffset = stop
	}
	if startOffset < len(s) {
		out = append(out, segment{text: s[startOffset:]})
	}
	return out
}

func isWordRune(r rune) bool {
	return unicode.IsLetter(r) || unicode.IsNumber(r) || r == '_'
}

func endsWithWord(s string) bool {
	r, _ := utf8.DecodeLastRuneInString(s)
	return isWordRune(r)
}

func startsWithWord(s string) bool {
	r, _ := utf8.DecodeRuneInString(s)
	return isWordRune(r)
}

// reversedAC is an Aho-Corasick automaton over the reversed contents of the
// added tokens. Run over a text from its end, the longest reversed token
// ending at position i is the longest token starting there, so one linear
// pass finds the longest token at every position.
type reversedAC struct {
	nodes []acNode
}

type acNode struct {
	edges   []acEdge // sorted by byte
	fail    int32
	tok     *addedToken // a token's reversed content ends here
	longest *addedToken // the longest token that is a suffix of this state
}

type acEdge struct {
	c  byte
	to int32
}

// child returns the state reached from n on c, or -1.
func (n *acNode) child(c byte) int32 {
	i, ok := slices.BinarySearchFunc(n.edges, c, func(e acEdge, c byte) int { return int(e.c) - int(c) })
	if !ok {
		return -1
	}
	return n.edges[i].to
}

// tokenStart is the longest added token starting at pos.
type tokenStart struct {
	pos int
	tok *addedToken
}

func (a *reversedAC) add(t *addedToken) {
	if len(a.nodes) == 0 {
		a.nodes = []acNode{{}}
	}
	n := int32(0)
	for i := len(t.content) - 1; i >= 0; i-- {
		c := t.content[i]
		next := a.nodes[n].child(c)
		if next < 0 {
			next = int32(len(a.nodes))
			a.nodes = append(a.nodes, acNode{})
			e := a.nodes[n].edges
			at, _ := slices.BinarySearchFunc(e, c, func(e acEdge, c byte) int { return int(e.c) - int(c) })
			a.nodes[n].edges = slices.Insert(e, at, acEdge{c: c, to: next})
		}
		n = next
	}
	a.nodes[n].tok = t
}

// compile sets the failure links and each state's longest token, breadth
// first (a state's failure is shallower than the state).
func (a *reversedAC) compile() {
	if len(a.nodes) == 0 {
		return
	}
	queue := []int32{0}
	for len(queue) > 0 {
		u := queue[0]
		queue = queue[1:]
		for _, e := range a.nodes[u].edges {
			f := int32(0)
			if u != 0 {
				f = a.step(a.nodes[u].fail, e.c)
			}
			v := &a.nodes[e.to]
			v.fail = f
			v.longest = v.tok
			if v.longest == nil {
				v.longest = a.nodes[f].longest
			}
			queue = append(queue, e.to)
		}
	}
}

// step is the automaton's transition from state s on byte c.
func (a *reversedAC) step(s int32, c byte) int32 {
	for {
		if next := a.nodes[s].child(c); next >= 0 {
			return next
		}
		if s == 0 {
			return 0
		}
		s = a.nodes[s].fail
	}
}

// longestStarts lists, in increasing position, the positions of s where an
// added token starts, each with the longest one.
func (a *reversedAC) longestStarts(s string) []tokenStart {
	if len(a.nodes) == 0 {
		return nil
	}
	var out []tokenStart
	state := int32(0)
	for i := len(s) - 1; i >= 0; i-- {
		state = a.step(state, s[i])
		if t := a.nodes[state].longest; t != nil {
			out = append(out, tokenStart{pos: i, tok: t})
		}
	}
	slices.Reverse(out)
	return out
}
