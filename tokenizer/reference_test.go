package tokenizer

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"unicode/utf8"
)

// The fixture and its reference encodings come from HF tokenizers 0.23.2 on
// the H200 machine: testdata/tokenizer/gen_reference.py.
const fixtureDir = "../testdata/tokenizer"

type reference struct {
	Texts     []string `json:"texts"`
	Encodings []struct {
		IDs                []int32  `json:"ids"`
		IDsWithSpecial     []int32  `json:"ids_with_special"`
		PreTokens          []string `json:"pretokens"`
		Decoded            string   `json:"decoded"`
		DecodedSkipSpecial string   `json:"decoded_skip_special"`
	} `json:"encodings"`
	Variant struct {
		LStrip     []string  `json:"lstrip"`
		RStrip     []string  `json:"rstrip"`
		SingleWord []string  `json:"single_word"`
		Texts      []string  `json:"texts"`
		IDs        [][]int32 `json:"ids"`
	} `json:"variant"`
	TransformersDiffs []json.RawMessage `json:"transformers_diffs"`
}

func loadReference(t testing.TB) *reference {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(fixtureDir, "reference.json"))
	if err != nil {
		t.Fatal(err)
	}
	var r reference
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Encodings) != len(r.Texts) || len(r.Texts) < 30 {
		t.Fatalf("reference has %d texts and %d encodings", len(r.Texts), len(r.Encodings))
	}
	return &r
}

func fixtureJSON(t testing.TB) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(fixtureDir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func loadFixture(t testing.TB) *Tokenizer {
	t.Helper()
	tk, err := LoadHFJSON(filepath.Join(fixtureDir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

// checkEncodings compares tk against every reference encoding.
func checkEncodings(t *testing.T, tk *Tokenizer, ref *reference, withSpecial bool) {
	t.Helper()
	for i, text := range ref.Texts {
		want := ref.Encodings[i]
		got := tk.Encode(text, false)
		if !slices.Equal(got, want.IDs) {
			t.Errorf("text %d %q:\n got  %v\n want %v", i, clip(text), got, want.IDs)
		}
		if withSpecial {
			if got := tk.Encode(text, true); !slices.Equal(got, want.IDsWithSpecial) {
				t.Errorf("text %d %q with special tokens:\n got  %v\n want %v", i, clip(text), got, want.IDsWithSpecial)
			}
		}
	}
}

func clip(s string) string {
	if len(s) > 60 {
		return s[:60] + "..."
	}
	return s
}

func TestReferenceEncodings(t *testing.T) {
	ref := loadReference(t)
	if len(ref.TransformersDiffs) != 0 {
		t.Fatalf("the reference itself records %d transformers/tokenizers differences", len(ref.TransformersDiffs))
	}
	checkEncodings(t, loadFixture(t), ref, true)
}

// checkPreTokens compares tk's pre-tokenizer with HF's pre_tokenize_str,
// which sees the whole text (added tokens included) and maps to byte level.
// The small fixture vocabulary cannot show every pre-tokenizer difference in
// the ids (it has few merges across digits, say), so the pieces are checked.
func checkPreTokens(t *testing.T, tk *Tokenizer, ref *reference) {
	t.Helper()
	for i, text := range ref.Texts {
		pieces := []string{text}
		for _, st := range tk.stages {
			var err error
			if pieces, err = st.apply(context.Background(), pieces); err != nil {
				t.Fatal(err)
			}
		}
		got := make([]string, len(pieces))
		for j, p := range pieces {
			got[j] = byteLevelString(p)
		}
		if !slices.Equal(got, ref.Encodings[i].PreTokens) {
			t.Errorf("text %d %q pre-tokens:\n got  %q\n want %q", i, clip(text), got, ref.Encodings[i].PreTokens)
		}
	}
}

func TestReferencePreTokens(t *testing.T) {
	checkPreTokens(t, loadFixture(t), loadReference(t))
}

func TestReferenceDecode(t *testing.T) {
	ref := loadReference(t)
	tk := loadFixture(t)
	for i, text := range ref.Texts {
		ids := ref.Encodings[i].IDs
		if got := tk.Decode(ids); got != ref.Encodings[i].Decoded || got != text {
			t.Errorf("text %d: decode = %q, HF %q, input %q", i, got, ref.Encodings[i].Decoded, text)
		}
		if got := tk.DecodeWith(ids, DecodeOptions{SkipSpecial: true}); got != ref.Encodings[i].DecodedSkipSpecial {
			t.Errorf("text %d: decode skipping special = %q, HF %q", i, got, ref.Encodings[i].DecodedSkipSpecial)
		}
	}
}

// The fixture stores merges as pairs; the older "a b" string form must give
// the same tokenizer.
func TestMergesStringForm(t *testing.T) {
	var doc map[string]any
	if err := json.Unmarshal(fixtureJSON(t), &doc); err != nil {
		t.Fatal(err)
	}
	model := doc["model"].(map[string]any)
	pairs := model["merges"].([]any)
	strs := make([]string, len(pairs))
	for i, p := range pairs {
		pr := p.([]any)
		strs[i] = pr[0].(string) + " " + pr[1].(string)
	}
	model["merges"] = strs
	data, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	tk, err := FromHFJSON(data)
	if err != nil {
		t.Fatal(err)
	}
	checkEncodings(t, tk, loadReference(t), true)
}

// lstrip / rstrip / single_word, checked against HF on a modified fixture.
func TestReferenceAddedTokenFlags(t *testing.T) {
	ref := loadReference(t)
	var doc map[string]any
	if err := json.Unmarshal(fixtureJSON(t), &doc); err != nil {
		t.Fatal(err)
	}
	for _, a := range doc["added_tokens"].([]any) {
		at := a.(map[string]any)
		c := at["content"].(string)
		at["lstrip"] = slices.Contains(ref.Variant.LStrip, c)
		at["rstrip"] = slices.Contains(ref.Variant.RStrip, c)
		at["single_word"] = slices.Contains(ref.Variant.SingleWord, c)
	}
	data, _ := json.Marshal(doc)
	tk, err := FromHFJSON(data)
	if err != nil {
		t.Fatal(err)
	}
	if len(ref.Variant.Texts) == 0 {
		t.Fatal("no variant texts in reference")
	}
	for i, text := range ref.Variant.Texts {
		if got := tk.Encode(text, false); !slices.Equal(got, ref.Variant.IDs[i]) {
			t.Errorf("variant %q:\n got  %v\n want %v", text, got, ref.Variant.IDs[i])
		}
	}
}

// ggufFromFixture rebuilds the fixture as GGUF metadata would carry it.
func ggufFromFixture(t testing.TB) (tokens, merges []string, types []int32) {
	t.Helper()
	var f hfFile
	if err := json.Unmarshal(fixtureJSON(t), &f); err != nil {
		t.Fatal(err)
	}
	pairs, err := parseMerges(f.Model.Merges)
	if err != nil {
		t.Fatal(err)
	}
	tokens = make([]string, len(f.Model.Vocab))
	types = make([]int32, len(f.Model.Vocab))
	for s, id := range f.Model.Vocab {
		tokens[id] = s
		types[id] = TypeNormal
	}
	for _, a := range f.AddedTokens {
		tokens[a.ID] = a.Content
		types[a.ID] = TypeUserDefined
		if a.Special {
			types[a.ID] = TypeControl
		}
	}
	for _, p := range pairs {
		merges = append(merges, p[0]+" "+p[1])
	}
	return tokens, merges, types
}

func TestGGUFMatchesReference(t *testing.T) {
	tokens, merges, types := ggufFromFixture(t)
	sp := NoSpecial()
	sp.BOS, sp.EOS, sp.PAD, sp.UNK, sp.EOT = 2, 2, 9, 0, 24
	sp.AddBOS = true
	tk, err := FromGGUF(tokens, merges, types, "laguna", sp)
	if err != nil {
		t.Fatal(err)
	}
	ref := loadReference(t)
	checkEncodings(t, tk, ref, true)
	checkPreTokens(t, tk, ref)
	for i := range ref.Texts {
		if got := tk.DecodeWith(ref.Encodings[i].IDs, DecodeOptions{SkipSpecial: true}); got != ref.Encodings[i].DecodedSkipSpecial {
			t.Errorf("text %d: decode skipping special = %q, HF %q", i, got, ref.Encodings[i].DecodedSkipSpecial)
		}
	}
	if !tk.IsEOG(2) || !tk.IsEOG(24) || tk.IsEOG(23) {
		t.Errorf("EOG = %v, want 2 and 24", tk.EOG)
	}
}

func TestGGUFErrors(t *testing.T) {
	tokens, merges, types := ggufFromFixture(t)
	tests := []struct {
		name   string
		mod    func(tok, mer []string, ty []int32, sp *Special) ([]string, []string, []int32, string)
		substr string
	}{
		{"empty", func(tok, mer []string, ty []int32, sp *Special) ([]string, []string, []int32, string) {
			return nil, nil, nil, "laguna"
		}, "empty"},
		{"types length", func(tok, mer []string, ty []int32, sp *Special) ([]string, []string, []int32, string) {
			return tok, mer, ty[:3], "laguna"
		}, "token_type"},
		{"unknown pre", func(tok, mer []string, ty []int32, sp *Special) ([]string, []string, []int32, string) {
			return tok, mer, ty, "no-such-pre"
		}, "unsupported pre-tokenizer"},
		{"bad merge", func(tok, mer []string, ty []int32, sp *Special) ([]string, []string, []int32, string) {
			return tok, append([]string{"nospace"}, mer...), ty, "laguna"
		}, "merges[0]"},
		{"merge result missing", func(tok, mer []string, ty []int32, sp *Special) ([]string, []string, []int32, string) {
			return tok, append([]string{"〈|UNK|〉 〈|UNK|〉"}, mer...), ty, "laguna"
		}, "not in vocabulary"},
		{"eos out of range", func(tok, mer []string, ty []int32, sp *Special) ([]string, []string, []int32, string) {
			sp.EOS = int32(len(tok))
			return tok, mer, ty, "laguna"
		}, "eos token id"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sp := NoSpecial()
			tok, mer, ty, pre := tc.mod(slices.Clone(tokens), slices.Clone(merges), slices.Clone(types), &sp)
			_, err := FromGGUF(tok, mer, ty, pre, sp)
			if err == nil || !strings.Contains(err.Error(), tc.substr) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.substr)
			}
		})
	}
}

func TestStreamDecoderMatchesDecode(t *testing.T) {
	ref := loadReference(t)
	tk := loadFixture(t)
	held := 0
	for i := range ref.Texts {
		for _, skip := range []bool{false, true} {
			d := tk.NewStreamDecoder(skip)
			var got string
			for _, id := range ref.Encodings[i].IDs {
				s := d.Add(id)
				if !utf8.ValidString(s) {
					t.Fatalf("text %d: stream emitted invalid UTF-8 %q", i, s)
				}
				if s == "" && len(d.pending) > 0 {
					held++
				}
				got += s
			}
			got += d.Flush()
			want := tk.DecodeWith(ref.Encodings[i].IDs, DecodeOptions{SkipSpecial: skip})
			if got != want {
				t.Errorf("text %d skip=%v: stream %q, decode %q", i, skip, got, want)
			}
		}
	}
	if held == 0 {
		t.Fatal("no token ever ended inside a character; the test texts do not exercise hold-back")
	}
}

func TestStreamDecoderInvalidBytes(t *testing.T) {
	tk := loadFixture(t)
	// 0xE2 0x82 are the first two bytes of "€"; 0xFF is never valid.
	ids := tk.Encode("a\xe2\x82", false)
	d := tk.NewStreamDecoder(false)
	var out string
	for _, id := range ids {
		out += d.Add(id)
	}
	if out != "a" {
		t.Fatalf("before flush = %q, want %q (incomplete character held back)", out, "a")
	}
	if got := d.Flush(); got != "\uFFFD\uFFFD" {
		t.Fatalf("flush = %q, want two U+FFFD", got)
	}
	d = tk.NewStreamDecoder(false)
	out = ""
	for _, id := range tk.Encode("x\xffy", false) {
		out += d.Add(id)
	}
	if out+d.Flush() != "x\uFFFDy" {
		t.Fatalf("invalid byte: got %q", out)
	}
	if got := tk.Decode(tk.Encode("x\xffy", false)); got != "x\xffy" {
		t.Fatalf("Decode must stay byte-exact, got %q", got)
	}
}

func TestLoadHFDir(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("tokenizer.json", string(fixtureJSON(t)))
	write("tokenizer_config.json", `{"bos_token": "〈|EOS|〉", "eos_token": {"content": "〈|EOS|〉"}, "pad_token": "〈|PAD|〉", "unk_token": "〈|UNK|〉"}`)
	write("generation_config.json", `{"eos_token_id": [2, 24]}`)
	tk, err := LoadHFDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if tk.BOS != 2 || tk.EOS != 2 || tk.PAD != 9 || tk.UNK != 0 {
		t.Errorf("special ids bos=%d eos=%d pad=%d unk=%d", tk.BOS, tk.EOS, tk.PAD, tk.UNK)
	}
	eog := slices.Clone(tk.EOG)
	sort.Slice(eog, func(i, j int) bool { return eog[i] < eog[j] })
	if !slices.Equal(eog, []int32{2, 24}) {
		t.Errorf("EOG = %v, want [2 24]", tk.EOG)
	}
	write("tokenizer_config.json", `{"eos_token": "<no such token>"}`)
	if _, err := LoadHFDir(dir); err == nil {
		t.Error("unknown eos_token accepted")
	}
	write("tokenizer_config.json", `{`)
	if _, err := LoadHFDir(dir); err == nil {
		t.Error("broken tokenizer_config.json accepted")
	}
}

// TestPostProcessorLen: an add-special encode is the prefix, the plain
// encode and the suffix, of the lengths PostProcessorLen gives.
func TestPostProcessorLen(t *testing.T) {
	tk, err := FromHFJSON(fixtureJSON(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, pp := range [][2][]int32{{nil, nil}, {{2}, nil}, {{2, 5}, {24}}} {
		tk.SetPostProcessor(pp[0], pp[1])
		pre, suf := tk.PostProcessorLen()
		plain, full := tk.Encode("func main() {}", false), tk.Encode("func main() {}", true)
		if pre != len(pp[0]) || suf != len(pp[1]) || len(full) != pre+len(plain)+suf || !slices.Equal(full[pre:len(full)-suf], plain) {
			t.Errorf("post-processor %v: lengths %d, %d; %v around %v", pp, pre, suf, full, plain)
		}
	}
}
