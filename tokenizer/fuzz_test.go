package tokenizer

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzFromHFJSON: the tokenizer.json parser must reject bad input with an
// error, never panic, and whatever it accepts must encode without panicking.
func FuzzFromHFJSON(f *testing.F) {
	f.Add(fixtureJSON(f))
	f.Add([]byte(`{"model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":["a b"]}}`))
	f.Add([]byte(`{"model":{"vocab":{"a":0,"b":1,"ab":2},"merges":[["a","b"]]},"added_tokens":[{"id":3,"content":"<x>","special":true}]}`))
	f.Add([]byte(`{"model":{"vocab":{"a":0}},"pre_tokenizer":{"type":"Split","pattern":{"Regex":"(?!"},"behavior":"Isolated"}}`))
	f.Add([]byte(`{"model":{"vocab":{"a":0}},"pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"ByteLevel","add_prefix_space":true}]}}`))
	f.Add([]byte(`{"model":{"vocab":{"a":2000000000}}}`))
	f.Add([]byte(`{"model":{"vocab":{"a":-1}}}`))
	f.Add([]byte(`{"model":{"vocab":{"a":0},"merges":["a"]}}`))
	f.Add([]byte(`{"model":{"vocab":{"a":0}},"post_processor":{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"<s>"}}]}}`))
	f.Add([]byte(`{"model":{"vocab":{"a":0}},"normalizer":{"type":"NFC"}}`))
	f.Add([]byte(`not json`))
	f.Fuzz(func(t *testing.T, data []byte) {
		tk, err := FromHFJSON(data)
		if err != nil {
			return
		}
		ids := tk.Encode("hello 〈|EOS|〉 wörld\n\t12", true)
		_ = tk.Decode(ids)
	})
}

// FuzzRoundTrip: any bytes encode and decode back exactly with the fixture,
// and the stream decoder yields the same text with each invalid byte as U+FFFD.
func FuzzRoundTrip(f *testing.F) {
	tk := loadFixture(f)
	for _, s := range []string{"", "hello", "〈|EOS|〉x</assistant>", "日本語 🦀", "\xff\xfe", "a\xe2\x82", "\r\n\r\n  \t", "'S 'ſ 123"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ids := tk.Encode(s, false)
		if got := tk.Decode(ids); got != s {
			t.Fatalf("Decode(Encode(%q)) = %q", s, got)
		}
		d := tk.NewStreamDecoder(false)
		var sb strings.Builder
		for _, id := range ids {
			out := d.Add(id)
			if !utf8.ValidString(out) {
				t.Fatalf("stream emitted invalid UTF-8 %q", out)
			}
			sb.WriteString(out)
		}
		sb.WriteString(d.Flush())
		var want strings.Builder
		for _, r := range s { // ranging replaces each invalid byte with U+FFFD
			want.WriteRune(r)
		}
		if sb.String() != want.String() {
			t.Fatalf("stream of %q = %q, want %q", s, sb.String(), want.String())
		}
	})
}

// FuzzFromGGUF: merges and pre-tokenizer names straight from a file.
func FuzzFromGGUF(f *testing.F) {
	f.Add("a b\nab c", "laguna")
	f.Add("a", "gpt2")
	f.Add("a b\na b", "qwen2")
	f.Add("x y", "llama-bpe")
	f.Add("", "???")
	f.Fuzz(func(t *testing.T, merges, pre string) {
		tokens := []string{"〈|EOS|〉", "a", "b", "c", "ab", "abc", "Ġ", "Ċ"}
		types := []int32{TypeControl, 1, 1, 1, 1, 1, 1, 1}
		sp := NoSpecial()
		sp.BOS, sp.AddBOS = 0, true
		tk, err := FromGGUF(tokens, strings.Split(merges, "\n"), types, pre, sp)
		if err != nil {
			return
		}
		ids := tk.Encode("abc a\n〈|EOS|〉c", true)
		if ids[0] != 0 {
			t.Fatalf("BOS missing: %v", ids)
		}
		_ = tk.Decode(ids)
	})
}
