package tokenizer

import (
	"context"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/dlclark/regexp2/v2"
)

// A stage is one pre-tokenizer of a Sequence: it cuts every piece of text
// into smaller pieces (and may rewrite them, as ByteLevel's prefix space does).
type stage interface {
	apply(ctx context.Context, pieces []string) ([]string, error)
}

// splitBehavior is HF's SplitDelimiterBehavior.
type splitBehavior int

const (
	behaviorRemoved splitBehavior = iota
	behaviorIsolated
	behaviorMergedWithPrevious
	behaviorMergedWithNext
	behaviorContiguous
)

func parseBehavior(s string) (splitBehavior, error) {
	switch s {
	case "Removed":
		return behaviorRemoved, nil
	case "Isolated":
		return behaviorIsolated, nil
	case "MergedWithPrevious":
		return behaviorMergedWithPrevious, nil
	case "MergedWithNext":
		return behaviorMergedWithNext, nil
	case "Contiguous":
		return behaviorContiguous, nil
	}
	return 0, fmt.Errorf("unknown split behavior %q", s)
}

// matcher finds non-overlapping matches in a piece, as byte ranges.
type matcher interface {
	find(ctx context.Context, s string) ([][2]int, error)
}

// regexMatcher runs a pattern with look-around (which Go's regexp lacks)
// through regexp2. Invalid UTF-8 bytes are matched as U+FFFD, one byte each,
// so the byte offsets always cover the original text exactly.
type regexMatcher struct {
	re *regexp2.Regexp
}

// matchTimeout bounds one regex search of a pre-tokenizer: the regex comes
// with the checkpoint, and a backtracking engine can take exponential time
// (`(\w+)+$` on a long line). A search of a real tokenizer's regex takes
// microseconds. A variable so tests can shorten it.
var matchTimeout = time.Second

// ctxCheckEvery is how many matches pass between context checks.
const ctxCheckEvery = 256

func newRegexMatcher(pattern string) (*regexMatcher, error) {
	re, err := regexp2.Compile(pattern, regexp2.None)
	if err != nil {
		return nil, fmt.Errorf("compile pre-tokenizer regex %q: %w", pattern, err)
	}
	re.MatchTimeout = matchTimeout
	return &regexMatcher{re: re}, nil
}

func (m *regexMatcher) find(ctx context.Context, s string) (out [][2]int, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, err = nil, fmt.Errorf("pre-tokenizer regex %q failed: %v", m.re.String(), r)
		}
	}()
	runes := make([]rune, 0, len(s))
	offs := make([]int, 0, len(s)+1)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		runes = append(runes, r)
		offs = append(offs, i)
		i += n
	}
	offs = append(offs, len(s))
	var ctxErr error
	matches := 0
	err = m.re.FindRunesMatches(runes, 0, func(v regexp2.MatchView) bool {
		idx, n, ok := v.GroupRange(0)
		if ok && n > 0 {
			out = append(out, [2]int{offs[idx], offs[idx+n]})
		}
		if matches++; matches%ctxCheckEvery == 0 {
			ctxErr = ctx.Err()
		}
		return ctxErr == nil
	})
	if ctxErr != nil {
		return nil, ctxErr
	}
	if err != nil {
		// regexp2's message quotes the whole input; name its size instead.
		if strings.HasPrefix(err.Error(), "match timeout") {
			return nil, fmt.Errorf("pre-tokenizer regex %#q took longer than %v on a piece of %d bytes (catastrophic backtracking)", m.re.String(), m.re.MatchTimeout, len(s))
		}
		return nil, fmt.Errorf("pre-tokenizer regex %q: %w", m.re.String(), err)
	}
	return out, nil
}

// literalMatcher is Split's String pattern.
type literalMatcher struct{ lit string }

func (m literalMatcher) find(_ context.Context, s string) ([][2]int, error) {
	var out [][2]int
	if m.lit == "" {
		return nil, nil
	}
	for i := 0; i < len(s); {
		j := strings.Index(s[i:], m.lit)
		if j < 0 {
			break
		}
		out = append(out, [2]int{i + j, i + j + len(m.lit)})
		i += j + len(m.lit)
	}
	return out, nil
}

// splitStage is HF's Split pre-tokenizer.
type splitStage struct {
	m        matcher
	behavior splitBehavior
	invert   bool
}

type span struct {
	start, end int
	match      bool
}

func (st *splitStage) apply(ctx context.Context, pieces []string) ([]string, error) {
	out := make([]string, 0, len(pieces))
	for _, p := range pieces {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		ms, err := st.m.find(ctx, p)
		if err != nil {
			return nil, err
		}
		out = appendSplit(out, p, ms, st.behavior, st.invert)
	}
	return out, nil
}

// appendSplit mirrors tokenizers' NormalizedString::split: the matches and
// the gaps between them become spans, which the behavior then merges.
func appendSplit(out []string, s string, ms [][2]int, b splitBehavior, invert bool) []string {
	if s == "" {
		return out
	}
	spans := make([]span, 0, 2*len(ms)+1)
	prev := 0
	for _, m := range ms {
		if m[0] > prev {
			spans = append(spans, span{prev, m[0], invert})
		}
		spans = append(spans, span{m[0], m[1], !invert})
		prev = m[1]
	}
	if prev < len(s) {
		spans = append(spans, span{prev, len(s), invert})
	}
	var merged []span // match now means "remove"
	switch b {
	case behaviorIsolated:
		for _, sp := range spans {
			merged = append(merged, span{sp.start, sp.end, false})
		}
	case behaviorRemoved:
		merged = spans
	case behaviorContiguous:
		prevMatch := false
		for _, sp := range spans {
			if sp.match == prevMatch && len(merged) > 0 {
				merged[len(merged)-1].end = sp.end
			} else {
				merged = append(merged, span{sp.start, sp.end, false})
			}
			prevMatch = sp.match
		}
	case behaviorMergedWithPrevious:
		prevMatch := false
		for _, sp := range spans {
			if sp.match && !prevMatch && len(merged) > 0 {
				merged[len(merged)-1].end = sp.end
			} else {
				merged = append(merged, span{sp.start, sp.end, false})
			}
			prevMatch = sp.match
		}
	case behaviorMergedWithNext:
		prevMatch := false
		rev := make([]span, 0, len(spans))
		for i := len(spans) - 1; i >= 0; i-- {
			sp := spans[i]
			if sp.match && !prevMatch && len(rev) > 0 {
				rev[len(rev)-1].start = sp.start
			} else {
				rev = append(rev, span{sp.start, sp.end, false})
			}
			prevMatch = sp.match
		}
		for i := len(rev) - 1; i >= 0; i-- {
			merged = append(merged, rev[i])
		}
	}
	for _, sp := range merged {
		if !sp.match && sp.end > sp.start {
			out = append(out, s[sp.start:sp.end])
		}
	}
	return out
}

// gpt2Pattern is the regex ByteLevel applies when use_regex is true.
const gpt2Pattern = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`

// byteLevelStage is HF's ByteLevel pre-tokenizer. The byte-to-alphabet
// mapping itself happens just before BPE; here only the optional prefix space
// and GPT-2 regex split apply.
type byteLevelStage struct {
	addPrefixSpace bool
	split          *splitStage // nil unless use_regex
}

func (st *byteLevelStage) apply(ctx context.Context, pieces []string) ([]string, error) {
	if st.addPrefixSpace {
		for i, p := range pieces {
			if len(p) == 0 || p[0] != ' ' {
				pieces[i] = " " + p
			}
		}
	}
	if st.split == nil {
		return pieces, nil
	}
	return st.split.apply(ctx, pieces)
}

func newByteLevelStage(addPrefixSpace, useRegex bool) (*byteLevelStage, error) {
	st := &byteLevelStage{addPrefixSpace: addPrefixSpace}
	if useRegex {
		m, err := newRegexMatcher(gpt2Pattern)
		if err != nil {
			return nil, err
		}
		st.split = &splitStage{m: m, behavior: behaviorIsolated}
	}
	return st, nil
}

// Pre-tokenizer regexes of the families FromGGUF knows by their
// tokenizer.ggml.pre name.
const (
	// Laguna's first Split: each run of line breaks starts a new piece.
	lagunaNewlinePattern = `(?:\r?\n)+(?!\r?\n)`
	// Laguna's second Split (Qwen 2's regex: cl100k with a single \p{N}).
	lagunaPattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	llama3Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// presetStages returns the pre-tokenizer for a GGUF tokenizer.ggml.pre name.
func presetStages(pre string) ([]stage, error) {
	regexSplit := func(pattern string, b splitBehavior) (stage, error) {
		m, err := newRegexMatcher(pattern)
		if err != nil {
			return nil, err
		}
		return &splitStage{m: m, behavior: b}, nil
	}
	var patterns []string
	var behaviors []splitBehavior
	switch pre {
	case "laguna":
		patterns = []string{lagunaNewlinePattern, lagunaPattern}
		behaviors = []splitBehavior{behaviorMergedWithNext, behaviorIsolated}
	case "qwen2":
		patterns = []string{lagunaPattern}
		behaviors = []splitBehavior{behaviorIsolated}
	case "llama-bpe", "llama3":
		patterns = []string{llama3Pattern}
		behaviors = []splitBehavior{behaviorIsolated}
	case "gpt2", "gpt-2", "default", "":
		patterns = []string{gpt2Pattern}
		behaviors = []splitBehavior{behaviorIsolated}
	default:
		return nil, fmt.Errorf("unsupported pre-tokenizer %q (known: laguna, qwen2, llama-bpe, gpt2)", pre)
	}
	stages := make([]stage, 0, len(patterns))
	for i, p := range patterns {
		st, err := regexSplit(p, behaviors[i])
		if err != nil {
			return nil, err
		}
		stages = append(stages, st)
	}
	return stages, nil
}
