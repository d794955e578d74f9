package tokenizer

import (
	"context"
	"slices"
	"testing"
)

// The five behaviors on HF's documented example ("the-final--countdown"
// split on "-", from the tokenizers SplitDelimiterBehavior docs).
func TestSplitBehaviors(t *testing.T) {
	const text = "the-final--countdown"
	tests := []struct {
		behavior string
		invert   bool
		want     []string
	}{
		{"Removed", false, []string{"the", "final", "countdown"}},
		{"Isolated", false, []string{"the", "-", "final", "-", "-", "countdown"}},
		{"MergedWithPrevious", false, []string{"the-", "final-", "-", "countdown"}},
		{"MergedWithNext", false, []string{"the", "-final", "-", "-countdown"}},
		{"Contiguous", false, []string{"the", "-", "final", "--", "countdown"}},
		// Inverted on a word pattern, the gaps (dashes) count as the matches,
		// so Removed drops them again.
		{"Removed", true, []string{"the", "final", "countdown"}},
		{"MergedWithPrevious", true, []string{"the-", "final--", "countdown"}},
	}
	for _, tc := range tests {
		b, err := parseBehavior(tc.behavior)
		if err != nil {
			t.Fatal(err)
		}
		st := &splitStage{m: literalMatcher{lit: "-"}, behavior: b, invert: tc.invert}
		if tc.invert {
			rm, err := newRegexMatcher(`[a-z]+`)
			if err != nil {
				t.Fatal(err)
			}
			st.m = rm
		}
		got, err := st.apply(context.Background(), []string{text})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s invert=%v: got %q, want %q", tc.behavior, tc.invert, got, tc.want)
		}
	}
	if _, err := parseBehavior("Sideways"); err == nil {
		t.Error("unknown behavior accepted")
	}
}

// Laguna's first split on its own: each run of line breaks (\n or \r\n)
// starts a piece that runs up to the next run.
func TestLagunaNewlineSplit(t *testing.T) {
	stages, err := presetStages("laguna")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		in   string
		want []string
	}{
		{"a\nb", []string{"a", "\nb"}},
		{"a\r\n\r\nb\n", []string{"a", "\r\n\r\nb", "\n"}},
		{"x\ry", []string{"x\ry"}},
		{"\n\n  y", []string{"\n\n  y"}},
		{"", nil},
	}
	for _, tc := range tests {
		got, err := stages[0].apply(context.Background(), []string{tc.in})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%q: got %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestAddedTokenMatching(t *testing.T) {
	var m addedMatcher
	for i, c := range []string{"<a>", "<a><b>", "<b>", "</a>"} {
		m.add(&addedToken{id: int32(i), content: c})
	}
	m.compile()
	type seg struct {
		text string
		id   int32
	}
	tests := []struct {
		in   string
		want []seg
	}{
		{"x<a><b>y", []seg{{"x", -1}, {"<a><b>", 1}, {"y", -1}}}, // longest wins
		{"<a><a>", []seg{{"<a>", 0}, {"<a>", 0}}},
		{"<a</a>", []seg{{"<a", -1}, {"</a>", 3}}},
		{"plain", []seg{{"plain", -1}}},
	}
	for _, tc := range tests {
		var got []seg
		for _, s := range m.split(tc.in, nil) {
			id := int32(-1)
			if s.tok != nil {
				id = s.tok.id
			}
			got = append(got, seg{s.text, id})
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%q: got %v, want %v", tc.in, got, tc.want)
		}
	}
}
