// Package tokenizer implements byte-level BPE tokenizers as used by Laguna
// (and GPT-2, Llama 3, Qwen 2): loaded from a Hugging Face tokenizer.json or
// from GGUF vocabulary metadata, with the reference's pre-tokenizer regexes
// (run by regexp2, since they need look-ahead), added/special tokens matched
// before pre-tokenization, merges applied by rank, exact byte-level decoding
// and a streaming decoder that emits only complete UTF-8.
package tokenizer

import (
	"context"
	"fmt"
	"slices"
)

// NoToken marks an absent special token id.
const NoToken int32 = -1

// maxVocab bounds token ids so a corrupt file cannot make us allocate
// gigabytes (Laguna has 100352 ids).
const (
	maxVocab = 1 << 22
	maxIDGap = 1 << 16
	// maxAddedBytes bounds the added tokens' contents (real tokenizers have
	// tens of kilobytes), and with them the matcher's memory.
	maxAddedBytes = 4 << 20
)

// Tokenizer encodes text to token ids and back. It is safe for concurrent use.
type Tokenizer struct {
	model  *bpeModel
	stages []stage // pre-tokenizer Sequence; empty: the whole text is one piece

	rawAdded  addedMatcher // added tokens matched on the raw text (normalized=false)
	normAdded addedMatcher // added tokens with normalized=true (second pass)

	tokens  []string // id -> token text (byte-level form for vocabulary tokens)
	bytes   [][]byte // id -> bytes it decodes to
	special []bool   // id -> skipped by DecodeOptions.SkipSpecial
	valid   []bool   // id -> the id names a token

	prefix, suffix []int32 // post-processor ids for add-special encodes

	// Special ids (NoToken when absent). EOG lists every id that ends
	// generation (EOS, end-of-turn tokens such as Laguna's </assistant>).
	BOS, EOS, PAD, UNK int32
	EOG                []int32
	// Pre names the pre-tokenizer ("laguna", "hf-json", ...), for messages.
	Pre string
}

// build finishes a tokenizer once the vocabulary and added tokens are known.
func build(model *bpeModel, stages []stage, added []*addedToken) (*Tokenizer, error) {
	t := &Tokenizer{model: model, stages: stages, BOS: NoToken, EOS: NoToken, PAD: NoToken, UNK: NoToken}
	size := 0
	for _, id := range model.vocab {
		size = max(size, int(id)+1)
	}
	for _, a := range added {
		size = max(size, int(a.id)+1)
	}
	// Ids are dense in real vocabularies; a far-off id means a corrupt file
	// and must not make us allocate for it.
	if size > maxVocab || size > len(model.vocab)+len(added)+maxIDGap {
		return nil, fmt.Errorf("token id %d is implausibly large for %d tokens", size-1, len(model.vocab)+len(added))
	}
	addedBytes := 0
	for _, a := range added {
		addedBytes += len(a.content)
	}
	if addedBytes > maxAddedBytes {
		return nil, fmt.Errorf("added tokens hold %d bytes, more than the %d allowed", addedBytes, maxAddedBytes)
	}
	t.tokens = make([]string, size)
	t.bytes = make([][]byte, size)
	t.special = make([]bool, size)
	t.valid = make([]bool, size)
	for s, id := range model.vocab {
		if id < 0 {
			return nil, fmt.Errorf("token %q has negative id %d", s, id)
		}
		t.tokens[id] = s
		t.bytes[id] = byteLevelDecode(s)
		t.valid[id] = true
	}
	for _, a := range added {
		if a.id < 0 {
			return nil, fmt.Errorf("added token %q has negative id %d", a.content, a.id)
		}
		t.tokens[a.id] = a.content
		t.bytes[a.id] = byteLevelDecode(a.content)
		t.special[a.id] = a.special
		t.valid[a.id] = true
		if a.normalized {
			t.normAdded.add(a)
		} else {
			t.rawAdded.add(a)
		}
	}
	t.rawAdded.compile()
	t.normAdded.compile()
	if model.unk >= 0 && int(model.unk) >= size {
		return nil, fmt.Errorf("unk id %d outside vocabulary of %d", model.unk, size)
	}
	return t, nil
}

// VocabSize is one more than the largest token id.
func (t *Tokenizer) VocabSize() int { return len(t.tokens) }

// Token returns the stored text of id (byte-level form for vocabulary tokens).
func (t *Tokenizer) Token(id int32) (string, bool) {
	if id < 0 || int(id) >= len(t.tokens) || !t.valid[id] {
		return "", false
	}
	return t.tokens[id], true
}

// TokenBytes returns the bytes id decodes to (nil for an unknown id).
func (t *Tokenizer) TokenBytes(id int32) []byte {
	if id < 0 || int(id) >= len(t.bytes) || !t.valid[id] {
		return nil
	}
	return t.bytes[id]
}

// ID looks up a token by its stored text (an added token's content, or a
// vocabulary entry in byte-level form).
func (t *Tokenizer) ID(token string) (int32, bool) {
	if tok := t.rawAdded.exact(token); tok != nil {
		return tok.id, true
	}
	if tok := t.normAdded.exact(token); tok != nil {
		return tok.id, true
	}
	id, ok := t.model.vocab[token]
	return id, ok
}

// IsSpecial reports whether id is a special token (skipped by SkipSpecial).
func (t *Tokenizer) IsSpecial(id int32) bool {
	return id >= 0 && int(id) < len(t.special) && t.special[id]
}

// IsEOG reports whether id ends generation.
func (t *Tokenizer) IsEOG(id int32) bool {
	return slices.Contains(t.EOG, id) || (t.EOS >= 0 && id == t.EOS)
}

// SetPostProcessor sets the ids an add-special encode puts around the text
// (for example a BOS prefix).
func (t *Tokenizer) SetPostProcessor(prefix, suffix []int32) {
	t.prefix = slices.Clone(prefix)
	t.suffix = slices.Clone(suffix)
}

// PostProcessorLen returns how many ids an add-special encode puts before
// and after the text.
func (t *Tokenizer) PostProcessorLen() (prefix, suffix int) { return len(t.prefix), len(t.suffix) }

// Encode tokenizes text. With addSpecial the post-processor's ids (such as
// Laguna's leading 〈|EOS|〉) are added, like HF's add_special_tokens=True.
// Any bytes, valid UTF-8 or not, are accepted: Decode(Encode(x)) == x.
// Should a pre-tokenizer regex fail (a search longer than a second), the
// rest of the text is encoded without regex splitting, so no input is lost
// and at most one search times out; EncodeContext reports the failure.
func (t *Tokenizer) Encode(text string, addSpecial bool) []int32 {
	ids, _ := t.encode(context.Background(), text, addSpecial, false)
	return ids
}

// EncodeContext is Encode that returns a pre-tokenizer regex's failure as an
// error and stops with ctx's error when ctx is done.
func (t *Tokenizer) EncodeContext(ctx context.Context, text string, addSpecial bool) ([]int32, error) {
	return t.encode(ctx, text, addSpecial, true)
}

func (t *Tokenizer) encode(ctx context.Context, text string, addSpecial, strict bool) ([]int32, error) {
	var ids []int32
	if addSpecial {
		ids = append(ids, t.prefix...)
	}
	segs := t.rawAdded.split(text, nil)
	if t.normAdded.n > 0 {
		var second []segment
		for _, s := range segs {
			if s.tok != nil {
				second = append(second, s)
				continue
			}
			second = t.normAdded.split(s.text, second)
		}
		segs = second
	}
	regexOK := true
	for _, s := range segs {
		if s.tok != nil {
			ids = append(ids, s.tok.id)
			continue
		}
		var err error
		ids, err = t.encodePlain(ctx, s.text, ids, regexOK)
		if err != nil {
			if strict {
				return nil, err
			}
			regexOK = false
		}
	}
	if addSpecial {
		ids = append(ids, t.suffix...)
	}
	return ids, nil
}

// encodePlain pre-tokenizes (unless split is false) and BPE-encodes text
// that holds no added token. When a stage fails, the pieces split so far are
// encoded and the error returned.
func (t *Tokenizer) encodePlain(ctx context.Context, text string, ids []int32, split bool) ([]int32, error) {
	pieces := []string{text}
	var err error
	for _, st := range t.stages {
		if !split {
			break
		}
		var next []string
		if next, err = st.apply(ctx, pieces); err != nil {
			break
		}
		pieces = next
	}
	for i, p := range pieces {
		if i%ctxCheckEvery == 0 && ctx.Err() != nil {
			return ids, ctx.Err()
		}
		ids = t.model.encodeWord(byteLevelString(p), ids)
	}
	return ids, err
}

// DecodeOptions tunes Decode.
type DecodeOptions struct {
	SkipSpecial bool // leave out special tokens, like skip_special_tokens=True
}

// Decode turns ids back into text: the exact bytes that were encoded (which
// need not be valid UTF-8 when a slice ends inside a character). Unknown ids
// are skipped, as HF does.
func (t *Tokenizer) Decode(ids []int32) string {
	return t.DecodeWith(ids, DecodeOptions{})
}

// DecodeWith is Decode with options.
func (t *Tokenizer) DecodeWith(ids []int32, opt DecodeOptions) string {
	var buf []byte
	for _, id := range ids {
		buf = t.appendToken(buf, id, opt.SkipSpecial)
	}
	return string(buf)
}

func (t *Tokenizer) appendToken(buf []byte, id int32, skipSpecial bool) []byte {
	if id < 0 || int(id) >= len(t.bytes) || !t.valid[id] {
		return buf
	}
	if skipSpecial && t.special[id] {
		return buf
	}
	return append(buf, t.bytes[id]...)
}
