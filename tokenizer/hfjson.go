package tokenizer

import (
	"bytes"
	"encoding/json"
	"fmt"

	"lagc/internal/fsutil"
)

// hfFile is the part of tokenizer.json this package reads.
type hfFile struct {
	AddedTokens []struct {
		ID         int32  `json:"id"`
		Content    string `json:"content"`
		SingleWord bool   `json:"single_word"`
		LStrip     bool   `json:"lstrip"`
		RStrip     bool   `json:"rstrip"`
		Normalized bool   `json:"normalized"`
		Special    bool   `json:"special"`
	} `json:"added_tokens"`
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	PostProcessor json.RawMessage `json:"post_processor"`
	Decoder       json.RawMessage `json:"decoder"`
	Model         struct {
		Type                    string           `json:"type"`
		Vocab                   map[string]int32 `json:"vocab"`
		Merges                  json.RawMessage  `json:"merges"`
		UnkToken                *string          `json:"unk_token"`
		IgnoreMerges            bool             `json:"ignore_merges"`
		ByteFallback            bool             `json:"byte_fallback"`
		ContinuingSubwordPrefix *string          `json:"continuing_subword_prefix"`
		EndOfWordSuffix         *string          `json:"end_of_word_suffix"`
		Dropout                 *float64         `json:"dropout"`
	} `json:"model"`
}

// maxJSONBytes bounds tokenizer.json (real ones are 2-30 MB) and the other
// JSON files of a checkpoint directory read here.
const maxJSONBytes = 512 << 20

// LoadHFJSON reads a tokenizer.json file.
func LoadHFJSON(path string) (*Tokenizer, error) {
	data, err := fsutil.ReadFile(path, maxJSONBytes)
	if err != nil {
		return nil, fmt.Errorf("read tokenizer: %w", err)
	}
	t, err := FromHFJSON(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// FromHFJSON builds a tokenizer from the contents of an HF tokenizer.json
// holding a byte-level BPE model. Parts it cannot reproduce exactly (other
// models, normalizers or pre-tokenizers) are reported as errors rather than
// approximated.
func FromHFJSON(data []byte) (*Tokenizer, error) {
	var f hfFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("parse tokenizer.json: %w", err)
	}
	m := &f.Model
	if m.Type != "" && m.Type != "BPE" {
		return nil, fmt.Errorf("tokenizer model %q is not supported (only byte-level BPE)", m.Type)
	}
	if m.Vocab == nil {
		return nil, fmt.Errorf("tokenizer.json has no model.vocab")
	}
	if m.ByteFallback {
		return nil, fmt.Errorf("BPE byte_fallback is not supported")
	}
	if (m.ContinuingSubwordPrefix != nil && *m.ContinuingSubwordPrefix != "") ||
		(m.EndOfWordSuffix != nil && *m.EndOfWordSuffix != "") {
		return nil, fmt.Errorf("BPE subword prefixes/suffixes are not supported")
	}
	if m.Dropout != nil && *m.Dropout != 0 {
		return nil, fmt.Errorf("BPE dropout is not supported")
	}
	if err := checkNormalizer(f.Normalizer); err != nil {
		return nil, err
	}
	if err := checkDecoder(f.Decoder); err != nil {
		return nil, err
	}
	merges, err := parseMerges(m.Merges)
	if err != nil {
		return nil, err
	}
	unk := NoToken
	if m.UnkToken != nil {
		id, ok := m.Vocab[*m.UnkToken]
		if !ok {
			return nil, fmt.Errorf("unk_token %q not in vocabulary", *m.UnkToken)
		}
		unk = id
	}
	model, err := newBPE(m.Vocab, merges, unk, m.IgnoreMerges)
	if err != nil {
		return nil, fmt.Errorf("tokenizer.json: %w", err)
	}
	stages, err := parsePreTokenizer(f.PreTokenizer, 0)
	if err != nil {
		return nil, err
	}
	added := make([]*addedToken, 0, len(f.AddedTokens))
	for _, a := range f.AddedTokens {
		added = append(added, &addedToken{id: a.ID, content: a.Content, special: a.Special,
			lstrip: a.LStrip, rstrip: a.RStrip, singleWord: a.SingleWord, normalized: a.Normalized})
	}
	t, err := build(model, stages, added)
	if err != nil {
		return nil, fmt.Errorf("tokenizer.json: %w", err)
	}
	t.Pre = "hf-json"
	t.UNK = unk
	prefix, suffix, err := parsePostProcessor(f.PostProcessor, t, 0)
	if err != nil {
		return nil, err
	}
	t.SetPostProcessor(prefix, suffix)
	if len(prefix) == 1 {
		t.BOS = prefix[0]
	}
	return t, nil
}

func isNull(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || bytes.Equal(raw, []byte("null"))
}

func parseMerges(raw json.RawMessage) ([][2]string, error) {
	if isNull(raw) {
		return nil, nil
	}
	var strs []string
	if err := json.Unmarshal(raw, &strs); err == nil {
		out := make([][2]string, len(strs))
		for i, s := range strs {
			pr, err := parseMergeString(s)
			if err != nil {
				return nil, fmt.Errorf("model.merges[%d]: %w", i, err)
			}
			out[i] = pr
		}
		return out, nil
	}
	var pairs [][]string
	if err := json.Unmarshal(raw, &pairs); err != nil {
		return nil, fmt.Errorf("model.merges is neither [\"a b\"] nor [[\"a\",\"b\"]]: %w", err)
	}
	out := make([][2]string, len(pairs))
	for i, p := range pairs {
		if len(p) != 2 {
			return nil, fmt.Errorf("model.merges[%d] has %d parts, want 2", i, len(p))
		}
		out[i] = [2]string{p[0], p[1]}
	}
	return out, nil
}

func checkNormalizer(raw json.RawMessage) error {
	if isNull(raw) {
		return nil
	}
	var n struct {
		Type        string            `json:"type"`
		Normalizers []json.RawMessage `json:"normalizers"`
	}
	if err := json.Unmarshal(raw, &n); err != nil {
		return fmt.Errorf("parse normalizer: %w", err)
	}
	if n.Type == "Sequence" {
		for _, sub := range n.Normalizers {
			if err := checkNormalizer(sub); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("normalizer %q is not supported", n.Type)
}

func checkDecoder(raw json.RawMessage) error {
	if isNull(raw) {
		return nil
	}
	var d struct {
		Type     string            `json:"type"`
		Decoders []json.RawMessage `json:"decoders"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		return fmt.Errorf("parse decoder: %w", err)
	}
	switch d.Type {
	case "ByteLevel":
		return nil
	case "Sequence":
		for _, sub := range d.Decoders {
			if err := checkDecoder(sub); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("decoder %q is not supported (byte-level BPE decodes with ByteLevel)", d.Type)
}

const maxNesting = 8

func parsePreTokenizer(raw json.RawMessage, depth int) ([]stage, error) {
	if isNull(raw) {
		return nil, nil
	}
	if depth > maxNesting {
		return nil, fmt.Errorf("pre_tokenizer nested too deeply")
	}
	var p struct {
		Type          string            `json:"type"`
		PreTokenizers []json.RawMessage `json:"pretokenizers"`
		Pattern       struct {
			Regex  *string `json:"Regex"`
			String *string `json:"String"`
		} `json:"pattern"`
		Behavior       string `json:"behavior"`
		Invert         bool   `json:"invert"`
		AddPrefixSpace bool   `json:"add_prefix_space"`
		UseRegex       *bool  `json:"use_regex"`
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, fmt.Errorf("parse pre_tokenizer: %w", err)
	}
	switch p.Type {
	case "Sequence":
		var out []stage
		for i, sub := range p.PreTokenizers {
			st, err := parsePreTokenizer(sub, depth+1)
			if err != nil {
				return nil, fmt.Errorf("pre_tokenizer sequence[%d]: %w", i, err)
			}
			out = append(out, st...)
		}
		return out, nil
	case "Split":
		b, err := parseBehavior(p.Behavior)
		if err != nil {
			return nil, fmt.Errorf("pre_tokenizer Split: %w", err)
		}
		var m matcher
		switch {
		case p.Pattern.Regex != nil:
			rm, err := newRegexMatcher(*p.Pattern.Regex)
			if err != nil {
				return nil, err
			}
			m = rm
		case p.Pattern.String != nil:
			m = literalMatcher{lit: *p.Pattern.String}
		default:
			return nil, fmt.Errorf("pre_tokenizer Split has no Regex or String pattern")
		}
		return []stage{&splitStage{m: m, behavior: b, invert: p.Invert}}, nil
	case "ByteLevel":
		useRegex := p.UseRegex == nil || *p.UseRegex // HF's default is true
		st, err := newByteLevelStage(p.AddPrefixSpace, useRegex)
		if err != nil {
			return nil, err
		}
		return []stage{st}, nil
	}
	return nil, fmt.Errorf("pre_tokenizer %q is not supported", p.Type)
}

// parsePostProcessor returns the ids a single-sequence encode with special
// tokens puts before and after the text.
func parsePostProcessor(raw json.RawMessage, t *Tokenizer, depth int) (prefix, suffix []int32, err error) {
	if isNull(raw) {
		return nil, nil, nil
	}
	if depth > maxNesting {
		return nil, nil, fmt.Errorf("post_processor nested too deeply")
	}
	var p struct {
		Type       string            `json:"type"`
		Processors []json.RawMessage `json:"processors"`
		Single     []struct {
			SpecialToken *struct {
				ID string `json:"id"`
			} `json:"SpecialToken"`
			Sequence *struct {
				ID string `json:"id"`
			} `json:"Sequence"`
		} `json:"single"`
		SpecialTokens map[string]struct {
			IDs []int32 `json:"ids"`
		} `json:"special_tokens"`
		Cls []json.RawMessage `json:"cls"`
		Sep []json.RawMessage `json:"sep"`
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, nil, fmt.Errorf("parse post_processor: %w", err)
	}
	switch p.Type {
	case "ByteLevel":
		return nil, nil, nil
	case "Sequence":
		for i, sub := range p.Processors {
			pre, suf, err := parsePostProcessor(sub, t, depth+1)
			if err != nil {
				return nil, nil, fmt.Errorf("post_processor sequence[%d]: %w", i, err)
			}
			// A later processor wraps the output of the earlier ones.
			prefix = append(pre, prefix...)
			suffix = append(suffix, suf...)
		}
		return prefix, suffix, nil
	case "TemplateProcessing":
		seen := false
		for _, piece := range p.Single {
			switch {
			case piece.Sequence != nil:
				if seen {
					return nil, nil, fmt.Errorf("post_processor template has two sequences")
				}
				seen = true
			case piece.SpecialToken != nil:
				st, ok := p.SpecialTokens[piece.SpecialToken.ID]
				if !ok {
					return nil, nil, fmt.Errorf("post_processor template names unknown special token %q", piece.SpecialToken.ID)
				}
				if seen {
					suffix = append(suffix, st.IDs...)
				} else {
					prefix = append(prefix, st.IDs...)
				}
			}
		}
		return prefix, suffix, nil
	case "BertProcessing", "RobertaProcessing":
		cls, err := tokenPairID(p.Cls)
		if err != nil {
			return nil, nil, fmt.Errorf("post_processor cls: %w", err)
		}
		sep, err := tokenPairID(p.Sep)
		if err != nil {
			return nil, nil, fmt.Errorf("post_processor sep: %w", err)
		}
		return []int32{cls}, []int32{sep}, nil
	}
	return nil, nil, fmt.Errorf("post_processor %q is not supported", p.Type)
}

// tokenPairID reads the id of a ["token", id] pair.
func tokenPairID(pair []json.RawMessage) (int32, error) {
	if len(pair) != 2 {
		return 0, fmt.Errorf("want [token, id], got %d elements", len(pair))
	}
	var id int32
	if err := json.Unmarshal(pair[1], &id); err != nil {
		return 0, fmt.Errorf("token id: %w", err)
	}
	return id, nil
}
