// Package stopseq finds stop strings and other markers in text that
// arrives in pieces (a stream of decoded tokens): what can be passed on at
// once, and what must be held back because it may be the start of one.
package stopseq

import "strings"

// Matcher ends streamed text at the first of its stop strings, holding back
// a tail that may be the start of one. The stop string itself is never
// returned (as in OpenAI's API and `lagc run --stop`).
type Matcher struct {
	stops   []string
	pending string
	stopped bool
}

// New returns a Matcher of stops (none: text passes through).
func New(stops []string) *Matcher { return &Matcher{stops: stops} }

// Add consumes text and returns what is certain to precede any stop, and
// whether a stop string is complete (the text after it is dropped, and
// every later Add returns nothing).
func (m *Matcher) Add(text string) (out string, hit bool) {
	if m.stopped {
		return "", true
	}
	if len(m.stops) == 0 {
		return text, false
	}
	m.pending += text
	if i, _ := First(m.pending, m.stops); i >= 0 {
		out, m.pending, m.stopped = m.pending[:i], "", true
		return out, true
	}
	n := len(m.pending) - Partial(m.pending, m.stops)
	out, m.pending = m.pending[:n], m.pending[n:]
	return out, false
}

// Flush returns the held-back tail at the end of generation.
func (m *Matcher) Flush() string {
	out := m.pending
	m.pending = ""
	return out
}

// Stopped reports whether a stop string was found.
func (m *Matcher) Stopped() bool { return m.stopped }

// First returns the earliest index in s of any of markers, and which (-1
// and "" if none occurs).
func First(s string, markers []string) (int, string) {
	best, which := -1, ""
	for _, m := range markers {
		if i := strings.Index(s, m); i >= 0 && (best < 0 || i < best) {
			best, which = i, m
		}
	}
	return best, which
}

// Partial returns the length of the longest tail of s that is a proper
// prefix of one of markers: what must be held back.
func Partial(s string, markers []string) int {
	n := 0
	for _, m := range markers {
		for k := min(len(s), len(m)-1); k > n; k-- {
			if strings.HasSuffix(s, m[:k]) {
				n = k
				break
			}
		}
	}
	return n
}
