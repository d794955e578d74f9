package ckpt

import (
	"encoding/json"
	"errors"
	"fmt"
	"lagc/tokenizer"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"lagc/internal/fsutil"
)

// GGUF token types, as llama.cpp numbers them.
const (
	tokNormal      int32 = 1
	tokControl     int32 = 3
	tokUserDefined int32 = 4
	tokUnused      int32 = 5
)

// TokenizerMetadata returns the tokenizer of ck as GGUF metadata in
// llama.cpp's form (tokenizer.ggml.model "gpt2", pre "laguna", tokens,
// token_type, merges, and the chat template when there is one), so a
// converted file carries its vocabulary. For an HF directory it reads
// tokenizer.json; for a GGUF file it copies the tokenizer keys. It returns
// nil when there is no tokenizer. The special-token ids are not included:
// ConfigMetadata writes them from the model configuration.
func TokenizerMetadata(ck Checkpoint) ([]KV, error) {
	if ck.Format() == "gguf" {
		var out []KV
		md := ck.Metadata()
		keys := make([]string, 0, len(md))
		for k := range md {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if !strings.HasPrefix(k, "tokenizer.") || strings.HasSuffix(k, "_token_id") {
				continue
			}
			out = append(out, KV{k, md[k]})
		}
		return out, nil
	}
	return hfTokenizerMetadata(ck.Path(), ck.Config().VocabSize)
}

// HFTokenizerMetadata is the tokenizer.json (and chat template) in dir as
// GGUF metadata, its ids padded to vocabSize as TokenizerMetadata pads an
// HF checkpoint's: for a file of synthetic weights (lagc convert
// --synthetic --tokenizer), so that it can be served. Unlike a
// checkpoint's, a missing tokenizer.json is an error.
func HFTokenizerMetadata(dir string, vocabSize int) ([]KV, error) {
	kv, err := hfTokenizerMetadata(dir, vocabSize)
	if err == nil && kv == nil {
		err = fmt.Errorf("%s: no tokenizer.json", dir)
	}
	return kv, err
}

// maxSideFileBytes bounds the tokenizer files read beside a checkpoint.
const maxSideFileBytes = 512 << 20

func hfTokenizerMetadata(dir string, vocabSize int) ([]KV, error) {
	path := filepath.Join(dir, "tokenizer.json")
	data, err := fsutil.ReadFile(path, maxSideFileBytes)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var tj struct {
		Model struct {
			Type   string            `json:"type"`
			Vocab  map[string]int    `json:"vocab"`
			Merges []json.RawMessage `json:"merges"`
		} `json:"model"`
		Added []struct {
			ID      int    `json:"id"`
			Content string `json:"content"`
			Special bool   `json:"special"`
		} `json:"added_tokens"`
	}
	if err := json.Unmarshal(data, &tj); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if tj.Model.Type != "BPE" {
		return nil, fmt.Errorf("%s: model type %q: lagc embeds byte-level BPE vocabularies only", path, tj.Model.Type)
	}
	tokens := make([]string, vocabSize)
	types := make([]int32, vocabSize)
	set := func(id int, tok string, typ int32) error {
		if id < 0 || id >= vocabSize {
			return fmt.Errorf("%s: token %q has id %d, outside vocab_size %d", path, tok, id, vocabSize)
		}
		tokens[id], types[id] = tok, typ
		return nil
	}
	for tok, id := range tj.Model.Vocab {
		if err := set(id, tok, tokNormal); err != nil {
			return nil, err
		}
	}
	for _, a := range tj.Added {
		typ := tokUserDefined
		if a.Special {
			typ = tokControl
		}
		if err := set(a.ID, a.Content, typ); err != nil {
			return nil, err
		}
	}
	for i := range tokens {
		if types[i] == 0 { // ids the tokenizer does not use, as llama.cpp pads them
			tokens[i], types[i] = fmt.Sprintf("[PAD%d]", i), tokUnused
		}
	}
	merges := make([]string, len(tj.Model.Merges))
	for i, raw := range tj.Model.Merges {
		var s string
		var pair []string
		switch {
		case json.Unmarshal(raw, &s) == nil:
			merges[i] = s
		case json.Unmarshal(raw, &pair) == nil && len(pair) == 2:
			merges[i] = pair[0] + " " + pair[1]
		default:
			return nil, fmt.Errorf("%s: merges[%d] = %s: want \"a b\" or [\"a\", \"b\"]", path, i, raw)
		}
	}
	kv := []KV{
		{"tokenizer.ggml.model", "gpt2"},
		{"tokenizer.ggml.pre", "laguna"},
		{"tokenizer.ggml.tokens", tokens},
		{"tokenizer.ggml.token_type", types},
		{"tokenizer.ggml.merges", merges},
	}
	// Whether encoding adds bos/eos comes from tokenizer.json's post-processor;
	// llama.cpp's keys for it are add_bos_token / add_eos_token.
	if tok, err := tokenizer.FromHFJSON(data); err == nil {
		plain, with := tok.Encode("a", false), tok.Encode("a", true)
		addBOS := len(with) > len(plain) && (len(plain) == 0 || with[0] != plain[0])
		addEOS := len(with) > len(plain) && (len(plain) == 0 || with[len(with)-1] != plain[len(plain)-1])
		kv = append(kv, KV{"tokenizer.ggml.add_bos_token", addBOS}, KV{"tokenizer.ggml.add_eos_token", addEOS})
	}
	if tmpl, err := chatTemplate(dir); err != nil {
		return nil, err
	} else if tmpl != "" {
		kv = append(kv, KV{"tokenizer.chat_template", tmpl})
	}
	return kv, nil
}

// chatTemplate reads chat_template.jinja, else tokenizer_config.json's
// chat_template string; "" when neither exists.
func chatTemplate(dir string) (string, error) {
	if b, err := fsutil.ReadFile(filepath.Join(dir, "chat_template.jinja"), maxSideFileBytes); err == nil {
		return string(b), nil
	}
	b, err := fsutil.ReadFile(filepath.Join(dir, "tokenizer_config.json"), maxSideFileBytes)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	var tc struct {
		ChatTemplate json.RawMessage `json:"chat_template"`
	}
	if err := json.Unmarshal(b, &tc); err != nil {
		return "", fmt.Errorf("tokenizer_config.json: %w", err)
	}
	var s string
	if json.Unmarshal(tc.ChatTemplate, &s) == nil && !strings.Contains(s, "{% include") {
		return s, nil
	}
	return "", nil
}
