package chat

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sort"

	"lagc/internal/fsutil"
)

// maxConfigBytes bounds tokenizer_config.json (some list every added token).
const maxConfigBytes = 64 << 20

// Sources are the chat templates and special-token strings a checkpoint
// ships.
type Sources struct {
	// Default is the template to use ("default" when several are named).
	Default string
	// Named holds every template by name when tokenizer_config.json lists
	// several (transformers picks "tool_use", if present, when tools are given).
	Named map[string]string
	// SpecialTokens are the bos_token, eos_token, ... strings of
	// tokenizer_config.json, for Options.SpecialTokens.
	SpecialTokens map[string]string
}

// For returns the template transformers would use, given whether tools are
// passed.
func (s *Sources) For(withTools bool) string {
	if withTools {
		if t, ok := s.Named["tool_use"]; ok {
			return t
		}
	}
	return s.Default
}

// LoadHFDir reads an HF checkpoint directory's chat template:
// chat_template.jinja if present (transformers writes it there since 4.43),
// otherwise tokenizer_config.json's chat_template. It is an error if neither
// has one.
func LoadHFDir(dir string) (*Sources, error) { return LoadHFFS(fsutil.DirFS(dir), dir) }

// LoadHFFS is LoadHFDir for a checkpoint directory at the root of fsys (a
// model embedded in the binary); dir names it in messages.
func LoadHFFS(fsys fs.FS, dir string) (*Sources, error) {
	s := &Sources{SpecialTokens: map[string]string{}}
	cfgPath := filepath.Join(dir, "tokenizer_config.json")
	data, err := fsutil.ReadFileFS(fsys, "tokenizer_config.json", cfgPath, maxConfigBytes)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("read %s: %w", cfgPath, err)
	default:
		if err := s.parseTokenizerConfig(data); err != nil {
			return nil, fmt.Errorf("%s: %w", cfgPath, err)
		}
	}
	jinjaPath := filepath.Join(dir, "chat_template.jinja")
	data, err = fsutil.ReadFileFS(fsys, "chat_template.jinja", jinjaPath, MaxTemplateBytes)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("read %s: %w", jinjaPath, err)
	default:
		s.Default = string(data)
	}
	if s.Default == "" {
		return nil, fmt.Errorf("%s has no chat template (neither chat_template.jinja nor tokenizer_config.json's chat_template)", dir)
	}
	return s, nil
}

var specialKeys = []string{"bos_token", "eos_token", "pad_token", "unk_token", "sep_token", "cls_token", "mask_token"}

func (s *Sources) parseTokenizerConfig(data []byte) error {
	var cfg map[string]json.RawMessage
	if err := json.Unmarshal(data, &cfg); err != nil {
		return fmt.Errorf("parse: %w", err)
	}
	for _, k := range specialKeys {
		if v := tokenContent(cfg[k]); v != "" {
			s.SpecialTokens[k] = v
		}
	}
	raw, ok := cfg["chat_template"]
	if !ok || string(raw) == "null" {
		return nil
	}
	var one string
	if err := json.Unmarshal(raw, &one); err == nil {
		s.Default = one
		return nil
	}
	var named []struct {
		Name     string `json:"name"`
		Template string `json:"template"`
	}
	if err := json.Unmarshal(raw, &named); err != nil {
		return fmt.Errorf("chat_template is neither a string nor a list of {name, template}: %w", err)
	}
	s.Named = make(map[string]string, len(named))
	for _, n := range named {
		s.Named[n.Name] = n.Template
	}
	if t, ok := s.Named["default"]; ok {
		s.Default = t
	} else if len(named) > 0 {
		return fmt.Errorf("chat_template lists %s but no \"default\"", names(s.Named))
	}
	return nil
}

func names(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, fmt.Sprintf("%q", k))
	}
	sort.Strings(keys)
	return fmt.Sprint(keys)
}

// tokenContent reads a special-token entry: a string or {"content": ...}.
func tokenContent(raw json.RawMessage) string {
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
