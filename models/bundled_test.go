package models

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"io/fs"
	"lagc/config"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
)

var bundledRequired = []string{
	"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
	"chat_template.jinja", "golden.json",
}

// TestBundledFilesMatchSource: the embedded files are exactly models/tiny
// (go:embed silently skips names starting with '.' or '_'), all required
// files are there, and the bundle stays small.
func TestBundledFilesMatchSource(t *testing.T) {
	onDisk := map[string][]byte{}
	err := filepath.WalkDir("tiny", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel("tiny", p)
		onDisk[filepath.ToSlash(rel)] = data
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	embedded := map[string][]byte{}
	total := 0
	err = fs.WalkDir(BundledFS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := fs.ReadFile(BundledFS(), p)
		embedded[p] = data
		total += len(data)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(onDisk) != len(embedded) {
		t.Errorf("models/tiny has %d files, the binary embeds %d (%v vs %v)", len(onDisk), len(embedded), keys(onDisk), keys(embedded))
	}
	for name, data := range onDisk {
		if !bytes.Equal(embedded[name], data) {
			t.Errorf("embedded %s differs from models/tiny/%s", name, name)
		}
	}
	for _, name := range bundledRequired {
		if _, ok := embedded[name]; !ok {
			t.Errorf("bundled model lacks %s", name)
		}
	}
	if total > 8<<20 {
		t.Errorf("bundled model is %d bytes; keep it under 8 MiB", total)
	}
}

// TestBundledConfig: config.json parses as a Laguna with the structure the
// bundle is meant to exercise, and model.safetensors holds the tensors it implies.
func TestBundledConfig(t *testing.T) {
	raw, err := fs.ReadFile(BundledFS(), "config.json")
	if err != nil {
		t.Fatal(err)
	}
	c, err := config.ParseHFConfig(raw)
	if err != nil {
		t.Fatal(err)
	}
	full, sliding, moe := 0, 0, 0
	heads := map[int]bool{}
	for l := 0; l < c.NumLayers; l++ {
		if c.IsSliding(l) {
			sliding++
		} else {
			full++
		}
		if c.IsMoE(l) {
			moe++
		}
		heads[c.Heads(l)] = true
	}
	if full == 0 || sliding == 0 || c.IsMoE(0) || moe != c.NumLayers-1 || len(heads) < 2 ||
		c.SlidingWindow != 64 || c.NumExperts != 8 || c.NumExpertsPerTok != 2 || c.SharedExpertSize == 0 ||
		c.Rope(0).Type != "yarn" || c.NumKVHeads >= c.NumHeads || c.Gating != config.GatingPerHead {
		t.Errorf("bundled config lost part of the Laguna structure: %+v", c)
	}
	if c.BOSTokenID != 2 || len(c.EOSTokenIDs) == 0 || c.EOSTokenIDs[0] != 2 {
		t.Errorf("bos %d eos %v, want 2 and [2 ...]", c.BOSTokenID, c.EOSTokenIDs)
	}

	st, err := fs.ReadFile(BundledFS(), "model.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	if len(st) < 8 {
		t.Fatal("model.safetensors is truncated")
	}
	n := binary.LittleEndian.Uint64(st[:8])
	if n > uint64(len(st)-8) {
		t.Fatalf("model.safetensors header length %d exceeds the file", n)
	}
	var header map[string]struct {
		DType string `json:"dtype"`
		Shape []int  `json:"shape"`
	}
	if err := json.Unmarshal(st[8:8+n], &header); err != nil {
		t.Fatal(err)
	}
	want := map[string][]int{
		"model.embed_tokens.weight":                          {c.VocabSize, c.HiddenSize},
		"lm_head.weight":                                     {c.VocabSize, c.HiddenSize},
		"model.layers.0.self_attn.q_proj.weight":             {c.Heads(0) * c.HeadDim, c.HiddenSize},
		"model.layers.1.self_attn.g_proj.weight":             {c.Heads(1), c.HiddenSize},
		"model.layers.0.mlp.gate_proj.weight":                {c.IntermediateSize, c.HiddenSize},
		"model.layers.1.mlp.gate.weight":                     {c.NumExperts, c.HiddenSize},
		"model.layers.1.mlp.experts.e_score_correction_bias": {c.NumExperts},
	}
	for name, shape := range want {
		h, ok := header[name]
		if !ok {
			t.Errorf("model.safetensors has no %s", name)
			continue
		}
		if h.DType != "BF16" || !equalInts(h.Shape, shape) {
			t.Errorf("%s: %s %v, want BF16 %v", name, h.DType, h.Shape, shape)
		}
	}
}

// TestBundledGolden: golden.json is consistent with itself and the config
// (the CPU engine's agreement with it is tested with the engine).
func TestBundledGolden(t *testing.T) {
	raw, err := fs.ReadFile(BundledFS(), "golden.json")
	if err != nil {
		t.Fatal(err)
	}
	var g struct {
		Prompts []struct {
			Name       string    `json:"name"`
			PromptIDs  []int     `json:"prompt_ids"`
			LastLogits []float64 `json:"last_logits"`
			Greedy     []int     `json:"greedy"`
			Gaps       []float64 `json:"greedy_gaps"`
		} `json:"prompts"`
	}
	if err := json.Unmarshal(raw, &g); err != nil {
		t.Fatal(err)
	}
	if len(g.Prompts) < 3 {
		t.Fatalf("golden.json has %d prompts, want at least 3", len(g.Prompts))
	}
	for _, p := range g.Prompts {
		if len(p.LastLogits) != 4096 || len(p.Greedy) != 32 || len(p.Gaps) != 32 || len(p.PromptIDs) == 0 || p.PromptIDs[0] != 2 {
			t.Errorf("%s: %d logits, %d greedy, %d gaps, prompt %v", p.Name, len(p.LastLogits), len(p.Greedy), len(p.Gaps), p.PromptIDs)
			continue
		}
		best := 0
		for i, v := range p.LastLogits {
			if v > p.LastLogits[best] {
				best = i
			}
		}
		if best != p.Greedy[0] {
			t.Errorf("%s: argmax of last_logits is %d, greedy starts with %d", p.Name, best, p.Greedy[0])
		}
	}
}

func TestExtractBundled(t *testing.T) {
	root := t.TempDir()
	t.Setenv(EnvCacheDir, root)
	dir, err := ExtractBundled()
	if err != nil {
		t.Fatal(err)
	}
	hash, err := BundledHash()
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(root, "bundled", hash[:16]); dir != want {
		t.Fatalf("extracted to %s, want %s", dir, want)
	}
	checkExtracted(t, dir)

	// A second call reuses the files: same inode, no temporary left behind.
	before, err := os.Stat(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	dir2, err := ExtractBundled()
	if err != nil || dir2 != dir {
		t.Fatalf("second extraction: %q, %v; want %q", dir2, err, dir)
	}
	after, err := os.Stat(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(before, after) || !after.ModTime().Equal(before.ModTime()) {
		t.Error("second extraction rewrote files that were intact")
	}
	checkOnlyEntry(t, filepath.Join(root, "bundled"), hash[:16])
}

func TestExtractBundledRepairs(t *testing.T) {
	cases := []struct {
		name   string
		damage func(dir string) error
	}{
		{"flipped byte", func(dir string) error {
			p := filepath.Join(dir, "model.safetensors")
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			data[len(data)/2] ^= 0x40
			return os.WriteFile(p, data, 0o644)
		}},
		{"truncated", func(dir string) error { return os.Truncate(filepath.Join(dir, "tokenizer.json"), 10) }},
		{"extended", func(dir string) error {
			f, err := os.OpenFile(filepath.Join(dir, "config.json"), os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			_, err = f.WriteString(" ")
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			return err
		}},
		{"missing file", func(dir string) error { return os.Remove(filepath.Join(dir, "golden.json")) }},
		{"directory is a file", func(dir string) error {
			if err := os.RemoveAll(dir); err != nil {
				return err
			}
			return os.WriteFile(dir, []byte("x"), 0o644)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			dir, err := ExtractBundledTo(root)
			if err != nil {
				t.Fatal(err)
			}
			if err := tc.damage(dir); err != nil {
				t.Fatal(err)
			}
			idx, _ := bundledOnce()
			if idx.verify(dir) == nil {
				t.Fatal("verify did not notice the damage")
			}
			dir2, err := ExtractBundledTo(root)
			if err != nil || dir2 != dir {
				t.Fatalf("re-extraction: %q, %v; want %q", dir2, err, dir)
			}
			checkExtracted(t, dir)
			hash, _ := BundledHash()
			checkOnlyEntry(t, filepath.Join(root, "bundled"), hash[:16])
		})
	}
}

func TestExtractBundledConcurrent(t *testing.T) {
	root := t.TempDir()
	const n = 4
	dirs, errs := make([]string, n), make([]error, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			dirs[i], errs[i] = ExtractBundledTo(root)
		}(i)
	}
	wg.Wait()
	for i := 0; i < n; i++ {
		if errs[i] != nil || dirs[i] != dirs[0] {
			t.Fatalf("caller %d: %q, %v (caller 0: %q)", i, dirs[i], errs[i], dirs[0])
		}
	}
	checkExtracted(t, dirs[0])
	hash, _ := BundledHash()
	checkOnlyEntry(t, filepath.Join(root, "bundled"), hash[:16])
}

func TestCacheRootDefault(t *testing.T) {
	t.Setenv(EnvCacheDir, "")
	t.Setenv("XDG_CACHE_HOME", t.TempDir()) // where os.UserCacheDir looks on Linux and BSDs
	base, err := os.UserCacheDir()
	if err != nil {
		t.Skip("no user cache directory here:", err)
	}
	root, err := CacheRoot()
	if err != nil || root != filepath.Join(base, "lagc") {
		t.Errorf("CacheRoot() = %q, %v; want %q", root, err, filepath.Join(base, "lagc"))
	}
}

// checkExtracted compares every extracted file with the embedded one.
func checkExtracted(t *testing.T, dir string) {
	t.Helper()
	err := fs.WalkDir(BundledFS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		want, err := fs.ReadFile(BundledFS(), p)
		if err != nil {
			return err
		}
		got, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(p)))
		if err != nil {
			return err
		}
		if !bytes.Equal(got, want) {
			t.Errorf("extracted %s differs from the embedded file", p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// checkOnlyEntry fails if parent holds anything but the extraction directory
// (leftover temporary or moved-aside directories).
func checkOnlyEntry(t *testing.T, parent, name string) {
	t.Helper()
	ents, err := os.ReadDir(parent)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if len(names) != 1 || names[0] != name || !ents[0].IsDir() {
		t.Errorf("%s holds %v, want only the directory %s", parent, names, name)
	}
}

func keys(m map[string][]byte) string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return strings.Join(ks, ",")
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestOpenBundledUnwritableCache: where the cache cannot be written (here
// its root is a file, which stops root too), the bundled model is read from
// the binary's own copy, with the same tensors; where it can, the cache is
// used and no reason is given.
func TestOpenBundledUnwritableCache(t *testing.T) {
	file := filepath.Join(t.TempDir(), "not-a-dir")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv(EnvCacheDir, file)
	mem, cacheErr, err := OpenBundled()
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	if cacheErr == nil || mem.Path() != BundledName {
		t.Fatalf("cache error %v, path %q; want an error and %q", cacheErr, mem.Path(), BundledName)
	}
	t.Setenv(EnvCacheDir, t.TempDir())
	disk, cacheErr, err := OpenBundled()
	if err != nil || cacheErr != nil {
		t.Fatalf("writable cache: %v, %v", cacheErr, err)
	}
	defer disk.Close()
	if len(disk.Tensors()) != len(mem.Tensors()) {
		t.Fatalf("%d tensors from the cache, %d from memory", len(disk.Tensors()), len(mem.Tensors()))
	}
}
