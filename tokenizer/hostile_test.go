package tokenizer

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

const hostileDir = "../testdata/hostile/tokenizer"

func loadHostile(t *testing.T, name string) *Tokenizer {
	t.Helper()
	tk, err := LoadHFJSON(filepath.Join(hostileDir, name))
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

// TestCatastrophicRegex: a Split regex with exponential backtracking on
// the text hung encoding. Each search now times out: EncodeContext reports
// it, Encode keeps the text unsplit, and only one search times out per call
// however many pieces the text has.
func TestCatastrophicRegex(t *testing.T) {
	defer func(d time.Duration) { matchTimeout = d }(matchTimeout)
	matchTimeout = 50 * time.Millisecond
	tk := loadHostile(t, "catastrophic_regex.json")
	line := strings.Repeat("a", 40) + "!"
	text := strings.Repeat(line+"\n", 20)

	_, err := tk.EncodeContext(context.Background(), text, false)
	if err == nil || !strings.Contains(err.Error(), "catastrophic backtracking") || !strings.Contains(err.Error(), `(\w+)+$`) {
		t.Fatalf("EncodeContext: %v, want a regex timeout naming the pattern", err)
	}
	ids := tk.Encode(text, false)
	if got := tk.Decode(ids); got != strings.ReplaceAll(text, "\n", "") {
		// "\n" has no id in this vocabulary; everything else must survive.
		t.Errorf("Encode lost text: %q", got)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := tk.EncodeContext(ctx, text, false); !errors.Is(err, context.Canceled) {
		t.Errorf("canceled EncodeContext: %v, want context.Canceled", err)
	}
}

// TestLongAddedToken: a 60 kB added token against a 60 kB line that almost
// matches it took time quadratic in their length.
func TestLongAddedToken(t *testing.T) {
	tk := loadHostile(t, "long_added_token.json")
	text := strings.Repeat("a", 60000)
	ids, err := tk.EncodeContext(context.Background(), text, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != 60000 || slices.ContainsFunc(ids, func(id int32) bool { return id != 0 }) {
		t.Errorf("%d ids, want 60000 of id 0", len(ids))
	}
	ids = tk.Encode(text+"b", false)
	if !slices.Equal(ids, []int32{2}) {
		t.Errorf("the token itself: %v, want [2]", ids)
	}
}

// TestLstripWhitespaceToken: an lstrip token that is itself whitespace,
// repeated, made every match walk back over all the text before it.
func TestLstripWhitespaceToken(t *testing.T) {
	tk := loadHostile(t, "lstrip_whitespace.json")
	ids := tk.Encode(strings.Repeat("\n", 200000), false)
	if len(ids) != 200000 || slices.ContainsFunc(ids, func(id int32) bool { return id != 2 }) {
		t.Errorf("%d ids, want 200000 of id 2", len(ids))
	}
}

// TestAddedBytesBound: the added tokens' total size is bounded.
func TestAddedBytesBound(t *testing.T) {
	big := strings.Repeat("x", maxAddedBytes/2+1)
	data := `{"model":{"vocab":{"a":0}},"added_tokens":[{"id":1,"content":"` + big + `1"},{"id":2,"content":"` + big + `2"}]}`
	if _, err := FromHFJSON([]byte(data)); err == nil || !strings.Contains(err.Error(), "more than the") {
		t.Errorf("oversized added tokens: %v", err)
	}
}
