package tokenizer

import (
	"fmt"
	"slices"
)

// GGUF token types (tokenizer.ggml.token_type), as llama.cpp defines them.
const (
	TypeNormal      int32 = 1
	TypeUnknown     int32 = 2
	TypeControl     int32 = 3
	TypeUserDefined int32 = 4
	TypeUnused      int32 = 5
	TypeByte        int32 = 6
)

// Special holds the special-token metadata of a GGUF vocabulary. Ids are
// NoToken (-1) when absent: start from NoSpecial() so that a field left unset
// does not silently mean token 0.
type Special struct {
	BOS, EOS, EOT, PAD, UNK int32
	EOG                     []int32 // further end-of-generation ids
	AddBOS, AddEOS          bool    // tokenizer.ggml.add_bos_token / add_eos_token
}

// NoSpecial returns a Special with every id absent.
func NoSpecial() Special {
	return Special{BOS: NoToken, EOS: NoToken, EOT: NoToken, PAD: NoToken, UNK: NoToken}
}

// FromGGUF builds a tokenizer from GGUF metadata values: tokens
// (tokenizer.ggml.tokens, byte-level form, index = id), merges
// (tokenizer.ggml.merges, "a b"), types (tokenizer.ggml.token_type; may be
// nil), pre (tokenizer.ggml.pre, e.g. "laguna") and the special ids.
// Control and user-defined tokens are matched in text before
// pre-tokenization, as llama.cpp does with special-token parsing on; control
// and unknown tokens count as special when decoding.
func FromGGUF(tokens, merges []string, types []int32, pre string, sp Special) (*Tokenizer, error) {
	if len(tokens) == 0 {
		return nil, fmt.Errorf("gguf vocabulary is empty")
	}
	if types != nil && len(types) != len(tokens) {
		return nil, fmt.Errorf("gguf token_type has %d entries for %d tokens", len(types), len(tokens))
	}
	if len(tokens) > maxVocab {
		return nil, fmt.Errorf("gguf vocabulary of %d tokens is implausibly large", len(tokens))
	}
	stages, err := presetStages(pre)
	if err != nil {
		return nil, fmt.Errorf("gguf tokenizer.ggml.pre: %w", err)
	}
	vocab := make(map[string]int32, len(tokens))
	var added []*addedToken
	for i, tok := range tokens {
		typ := TypeNormal
		if types != nil {
			typ = types[i]
		}
		switch typ {
		case TypeControl, TypeUserDefined, TypeUnknown:
			added = append(added, &addedToken{id: int32(i), content: tok, special: typ != TypeUserDefined})
		}
		if _, dup := vocab[tok]; !dup {
			vocab[tok] = int32(i)
		}
	}
	pairs := make([][2]string, len(merges))
	for i, m := range merges {
		pr, err := parseMergeString(m)
		if err != nil {
			return nil, fmt.Errorf("gguf merges[%d]: %w", i, err)
		}
		pairs[i] = pr
	}
	n := int32(len(tokens))
	for name, id := range map[string]int32{"bos": sp.BOS, "eos": sp.EOS, "eot": sp.EOT, "pad": sp.PAD, "unk": sp.UNK} {
		if id < NoToken || id >= n {
			return nil, fmt.Errorf("gguf %s token id %d outside vocabulary of %d", name, id, n)
		}
	}
	for _, id := range sp.EOG {
		if id < 0 || id >= n {
			return nil, fmt.Errorf("gguf end-of-generation id %d outside vocabulary of %d", id, n)
		}
	}
	model, err := newBPE(vocab, pairs, NoToken, false)
	if err != nil {
		return nil, fmt.Errorf("gguf vocabulary: %w", err)
	}
	t, err := build(model, stages, added)
	if err != nil {
		return nil, fmt.Errorf("gguf vocabulary: %w", err)
	}
	t.Pre = pre
	t.BOS, t.EOS, t.PAD, t.UNK = sp.BOS, sp.EOS, sp.PAD, sp.UNK
	for _, id := range append([]int32{sp.EOS, sp.EOT}, sp.EOG...) {
		if id >= 0 && !slices.Contains(t.EOG, id) {
			t.EOG = append(t.EOG, id)
		}
	}
	var prefix, suffix []int32
	if sp.AddBOS && sp.BOS >= 0 {
		prefix = []int32{sp.BOS}
	}
	if sp.AddEOS && sp.EOS >= 0 {
		suffix = []int32{sp.EOS}
	}
	t.SetPostProcessor(prefix, suffix)
	return t, nil
}
