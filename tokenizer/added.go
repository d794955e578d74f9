package tokenizer

import (
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

// trieNode is a byte trie over added-token contents.
type trieNode struct {
	next map[byte]*trieNode
	tok  *addedToken // a token ends here
}

type addedMatcher struct {
	root trieNode
	n    int
}

func (m *addedMatcher) add(t *addedToken) {
	if t.content == "" {
		return
	}
	n := &m.root
	for i := 0; i < len(t.content); i++ {
		if n.next == nil {
			n.next = make(map[byte]*trieNode)
		}
		c := n.next[t.content[i]]
		if c == nil {
			c = &trieNode{}
			n.next[t.content[i]] = c
		}
		n = c
	}
	if n.tok == nil { // the first token with a given content wins
		n.tok = t
	}
	m.n++
}

// longestAt returns the longest token matching s at position i.
func (m *addedMatcher) longestAt(s string, i int) (*addedToken, int) {
	n := &m.root
	var best *addedToken
	end := 0
	for j := i; j < len(s) && n.next != nil; j++ {
		n = n.next[s[j]]
		if n == nil {
			break
		}
		if n.tok != nil {
			best, end = n.tok, j+1
		}
	}
	return best, end
}

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
	startOffset := 0
	for i := 0; i < len(s); {
		tok, stop := m.longestAt(s, i)
		if tok == nil {
			i++
			continue
		}
		start := i
		i = stop // the scan resumes after this match even when it is rejected
		if tok.singleWord {
			if (start > 0 && endsWithWord(s[:start])) || (stop < len(s) && startsWithWord(s[stop:])) {
				continue
			}
		}
		if tok.lstrip {
			ns := start
			for ns > 0 {
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
