package engine

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"lagc/chat"
	"lagc/ckpt"
	"lagc/tokenizer"
)

// ErrNoTokenizer means the checkpoint ships no tokenizer.
var ErrNoTokenizer = errors.New("the checkpoint has no tokenizer (no tokenizer.json, no tokenizer.ggml.* metadata)")

// LoadTokenizer returns the tokenizer shipped with ck: tokenizer.json in an
// HF directory, or the tokenizer.ggml.* metadata of a GGUF file.
func LoadTokenizer(ck ckpt.Checkpoint) (*tokenizer.Tokenizer, error) {
	if files := ckpt.FilesOf(ck); files != nil {
		if _, err := fs.Stat(files, "tokenizer.json"); errors.Is(err, fs.ErrNotExist) {
			return nil, ErrNoTokenizer
		}
		return tokenizer.LoadHFFS(files, ck.Path())
	}
	if ck.Format() != "gguf" {
		dir := ck.Path()
		if st, err := os.Stat(dir); err == nil && !st.IsDir() {
			dir = filepath.Dir(dir)
		}
		if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); errors.Is(err, os.ErrNotExist) {
			return nil, ErrNoTokenizer
		}
		return tokenizer.LoadHFDir(dir)
	}
	md := ck.Metadata()
	tokens, _ := md["tokenizer.ggml.tokens"].([]string)
	if len(tokens) == 0 {
		return nil, ErrNoTokenizer
	}
	merges, _ := md["tokenizer.ggml.merges"].([]string)
	types, _ := md["tokenizer.ggml.token_type"].([]int32)
	pre, _ := md["tokenizer.ggml.pre"].(string)
	sp := tokenizer.NoSpecial()
	id := func(key string) int32 {
		switch v := md[key].(type) {
		case uint32:
			return int32(v)
		case int32:
			return v
		}
		return tokenizer.NoToken
	}
	sp.BOS, sp.EOS, sp.EOT = id("tokenizer.ggml.bos_token_id"), id("tokenizer.ggml.eos_token_id"), id("tokenizer.ggml.eot_token_id")
	sp.PAD, sp.UNK = id("tokenizer.ggml.padding_token_id"), id("tokenizer.ggml.unknown_token_id")
	sp.AddBOS, _ = md["tokenizer.ggml.add_bos_token"].(bool)
	sp.AddEOS, _ = md["tokenizer.ggml.add_eos_token"].(bool)
	t, err := tokenizer.FromGGUF(tokens, merges, types, pre, sp)
	if err != nil {
		return nil, fmt.Errorf("%s: tokenizer metadata: %w", ck.Path(), err)
	}
	return t, nil
}

// LoadChatTemplate returns the chat template shipped with ck and the
// special-token strings it may refer to.
func LoadChatTemplate(ck ckpt.Checkpoint) (*chat.Template, map[string]string, error) {
	var src string
	special := map[string]string{}
	if ck.Format() == "gguf" {
		src, _ = ck.Metadata()["tokenizer.chat_template"].(string)
		if src == "" {
			return nil, nil, fmt.Errorf("%s has no tokenizer.chat_template", ck.Path())
		}
	} else {
		var s *chat.Sources
		var err error
		if files := ckpt.FilesOf(ck); files != nil {
			s, err = chat.LoadHFFS(files, ck.Path())
		} else {
			s, err = chat.LoadHFDir(ck.Path())
		}
		if err != nil {
			return nil, nil, err
		}
		src, special = s.For(false), s.SpecialTokens
	}
	t, err := chat.Compile(src)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: chat template: %w", ck.Path(), err)
	}
	return t, special, nil
}
