package server

import "strings"

// stopMatcher ends streamed text at the first of the stop strings, holding
// back a tail that may be the start of one. The stop string itself is not
// returned, as in OpenAI's API.
type stopMatcher struct {
	stops   []string
	pending string
}

// Add consumes text and returns what is certain to precede any stop, and
// whether a stop string was found (the text after it is dropped).
func (m *stopMatcher) Add(text string) (out string, hit bool) {
	if len(m.stops) == 0 {
		return text, false
	}
	m.pending += text
	best := -1
	for _, s := range m.stops {
		if i := strings.Index(m.pending, s); i >= 0 && (best < 0 || i < best) {
			best = i
		}
	}
	if best >= 0 {
		out, m.pending = m.pending[:best], ""
		return out, true
	}
	n := len(m.pending) - maxPartial(m.pending, m.stops)
	out, m.pending = m.pending[:n], m.pending[n:]
	return out, false
}

// Flush returns the held-back tail at the end of generation.
func (m *stopMatcher) Flush() string {
	out := m.pending
	m.pending = ""
	return out
}
