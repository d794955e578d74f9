package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"

	"lagc/internal/fsutil"
)

// LoadHFDir loads the tokenizer of an HF checkpoint directory:
// tokenizer.json, plus the special tokens named in tokenizer_config.json and
// the end-of-generation ids of generation_config.json / config.json (Laguna
// lists two there: 〈|EOS|〉 and </assistant>). Only tokenizer.json is required.
func LoadHFDir(dir string) (*Tokenizer, error) { return LoadHFFS(fsutil.DirFS(dir), dir) }

// LoadHFFS is LoadHFDir for a checkpoint directory at the root of fsys (a
// model embedded in the binary); dir names it in messages.
func LoadHFFS(fsys fs.FS, dir string) (*Tokenizer, error) {
	data, err := fsutil.ReadFileFS(fsys, "tokenizer.json", filepath.Join(dir, "tokenizer.json"), maxJSONBytes)
	if err != nil {
		return nil, fmt.Errorf("read tokenizer: %w", err)
	}
	t, err := FromHFJSON(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, "tokenizer.json"), err)
	}
	var cfg struct {
		BOS         json.RawMessage `json:"bos_token"`
		EOS         json.RawMessage `json:"eos_token"`
		PAD         json.RawMessage `json:"pad_token"`
		UNK         json.RawMessage `json:"unk_token"`
		AddBOSToken *bool           `json:"add_bos_token"`
	}
	found, err := readJSON(fsys, dir, "tokenizer_config.json", &cfg)
	if err != nil {
		return nil, err
	}
	if found {
		for _, f := range []struct {
			raw json.RawMessage
			dst *int32
		}{{cfg.BOS, &t.BOS}, {cfg.EOS, &t.EOS}, {cfg.PAD, &t.PAD}, {cfg.UNK, &t.UNK}} {
			name := tokenContent(f.raw)
			if name == "" {
				continue
			}
			id, ok := t.ID(name)
			if !ok {
				return nil, fmt.Errorf("%s: token %q is not in the vocabulary", filepath.Join(dir, "tokenizer_config.json"), name)
			}
			*f.dst = id
		}
		// An explicit add_bos_token=false (with no post-processor prefix)
		// leaves encodes alone; true without a post-processor adds BOS.
		if cfg.AddBOSToken != nil && *cfg.AddBOSToken && len(t.prefix) == 0 && t.BOS >= 0 {
			t.prefix = []int32{t.BOS}
		}
	}
	for _, name := range []string{"generation_config.json", "config.json"} {
		var gc struct {
			EOS json.RawMessage `json:"eos_token_id"`
		}
		ok, err := readJSON(fsys, dir, name, &gc)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		ids, err := intOrList(gc.EOS)
		if err != nil {
			return nil, fmt.Errorf("%s: eos_token_id: %w", filepath.Join(dir, name), err)
		}
		for _, id := range ids {
			if !slices.Contains(t.EOG, id) {
				t.EOG = append(t.EOG, id)
			}
		}
	}
	if t.EOS >= 0 && !slices.Contains(t.EOG, t.EOS) {
		t.EOG = append(t.EOG, t.EOS)
	}
	return t, nil
}

// readJSON decodes the file name of fsys (dir in messages) into v; a
// missing file is not an error.
func readJSON(fsys fs.FS, dir, name string, v any) (bool, error) {
	path := filepath.Join(dir, name)
	data, err := fsutil.ReadFileFS(fsys, name, path, maxJSONBytes)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read %s: %w", path, err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		return false, fmt.Errorf("parse %s: %w", path, err)
	}
	return true, nil
}

// tokenContent reads a special-token entry of tokenizer_config.json, which
// is either a string or an object with a "content" field.
func tokenContent(raw json.RawMessage) string {
	if isNull(raw) {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var obj struct {
		Content string `json:"content"`
	}
	if json.Unmarshal(raw, &obj) == nil {
		return obj.Content
	}
	return ""
}

func intOrList(raw json.RawMessage) ([]int32, error) {
	if isNull(raw) {
		return nil, nil
	}
	var one int32
	if json.Unmarshal(raw, &one) == nil {
		return []int32{one}, nil
	}
	var many []int32
	if err := json.Unmarshal(raw, &many); err != nil {
		return nil, fmt.Errorf("want an id or a list of ids: %w", err)
	}
	return many, nil
}
