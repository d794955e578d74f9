package ckpt_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"lagc/ckpt"
	"lagc/ckpt/ckpttest"
	"lagc/tokenizer"
)

// TestTokenizerMetadata embeds testdata/tokenizer's BPE vocabulary in a GGUF
// and checks that the tokenizer built from the GGUF keys encodes the test
// texts exactly as the one built from tokenizer.json.
func TestTokenizerMetadata(t *testing.T) {
	tj, err := os.ReadFile(filepath.Join("..", "testdata", "tokenizer", "tokenizer.json"))
	if err != nil {
		t.Fatal("committed testdata/tokenizer/tokenizer.json:", err)
	}
	var texts []string
	b, err := os.ReadFile(filepath.Join("..", "testdata", "tokenizer", "texts.json"))
	if err != nil || json.Unmarshal(b, &texts) != nil {
		t.Fatalf("texts.json: %v", err)
	}
	dir := t.TempDir()
	cfg := ckpttest.TinyConfig()
	cfg.VocabSize = 1540 // 1536 tokens plus unused ids, which become [PADn]
	if _, err := ckpttest.WriteHF(dir, cfg, ckpttest.Options{}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), tj, 0o644); err != nil {
		t.Fatal(err)
	}
	src, err := ckpt.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	extra, err := ckpt.TokenizerMetadata(src)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "m.gguf")
	if err := ckpt.WriteGGUFFile(out, src, ckpt.WriteOptions{DType: ckpt.F16, Extra: extra}); err != nil {
		t.Fatal(err)
	}
	g, err := ckpt.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	md := g.Metadata()
	toks, _ := md["tokenizer.ggml.tokens"].([]string)
	merges, _ := md["tokenizer.ggml.merges"].([]string)
	types, _ := md["tokenizer.ggml.token_type"].([]int32)
	pre, _ := md["tokenizer.ggml.pre"].(string)
	if len(toks) != 1540 || toks[1539] != "[PAD1539]" || pre != "laguna" {
		t.Fatalf("%d tokens, last %q, pre %q", len(toks), toks[len(toks)-1], pre)
	}
	sp := tokenizer.NoSpecial()
	sp.BOS, sp.EOS = 2, 2
	fromGGUF, err := tokenizer.FromGGUF(toks, merges, types, pre, sp)
	if err != nil {
		t.Fatal(err)
	}
	fromHF, err := tokenizer.FromHFJSON(tj)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range texts {
		a, b := fromGGUF.Encode(s, false), fromHF.Encode(s, false)
		if !slices.Equal(a, b) {
			t.Errorf("%q: GGUF tokenizer %v, tokenizer.json %v", s, a, b)
		}
	}
	// GGUF -> GGUF keeps the vocabulary.
	again, err := ckpt.TokenizerMetadata(g)
	if err != nil || len(again) != len(extra) {
		t.Errorf("copied %d tokenizer keys (err %v), want %d", len(again), err, len(extra))
	}
}
