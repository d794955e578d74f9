package ckpt_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"lagc/ckpt"
	"lagc/ckpt/ckpttest"
	"lagc/quant"
)

var quantF32Out = flag.String("quant-f32", "", "write the f32 GGUF the quantised fixtures are made from to this path")

// TestWriteQuantF32 writes the source of testdata/quant when asked to
// (testdata/quant/make.sh does): go test ./ckpt -run TestWriteQuantF32 -quant-f32 PATH
func TestWriteQuantF32(t *testing.T) {
	if *quantF32Out == "" {
		t.Skip("only with -quant-f32 PATH")
	}
	kv, ts, err := ckpttest.QuantF32()
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(*quantF32Out)
	if err != nil {
		t.Fatal(err)
	}
	if err := ckpt.EncodeGGUF(f, kv, ts); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

const quantDir = "../testdata/quant"

// quantFixtures lists the committed llama-quantize outputs; the file name
// without .gguf is the recipe they were made with.
func quantFixtures(t *testing.T) []string {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(quantDir, "*.gguf"))
	if len(files) < 11 {
		t.Fatalf("%d quantised fixtures in %s, want 11 (they are committed: see its README.md)", len(files), quantDir)
	}
	return files
}

type tensorRef struct {
	Type   string `json:"type"`
	SHA256 string `json:"sha256"`
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func sha256F32(f []float32) string {
	raw := make([]byte, 4*len(f))
	if err := quant.Quantize(quant.F32, raw, f); err != nil {
		panic(err)
	}
	s := sha256.Sum256(raw)
	return hex.EncodeToString(s[:])
}

// Every tensor of every llama-quantize fixture opens, validates and
// dequantises bitwise as gguf-py's gguf.quants.dequantize does.
func TestQuantFixturesDequantize(t *testing.T) {
	var ref map[string]map[string]tensorRef
	readJSON(t, filepath.Join(quantDir, "reference.json"), &ref)
	for _, path := range quantFixtures(t) {
		t.Run(filepath.Base(path), func(t *testing.T) {
			want := ref[filepath.Base(path)]
			ck, err := ckpt.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer ck.Close()
			if len(ck.Tensors()) != len(want) {
				t.Errorf("%d tensors, reference has %d", len(ck.Tensors()), len(want))
			}
			for _, ti := range ck.Tensors() {
				w, ok := want[ti.Name]
				if !ok {
					t.Errorf("%s: not in the reference", ti.Name)
					continue
				}
				if ti.DType.String() != w.Type {
					t.Errorf("%s: type %s, reference %s", ti.Name, ti.DType, w.Type)
				}
				f, err := ck.ReadF32(ti.Name)
				if err != nil {
					t.Errorf("%s: %v", ti.Name, err)
					continue
				}
				if got := sha256F32(f); got != w.SHA256 {
					t.Errorf("%s (%s): dequantised values differ from gguf-py's", ti.Name, ti.DType)
				}
			}
		})
	}
}

// Converting the fixtures' f32 source with lagc's recipe of the same name
// picks the same type for every tensor and writes the same blocks as
// llama-quantize.
func TestQuantFixturesQuantize(t *testing.T) {
	kv, ts, err := ckpttest.QuantF32()
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := ckpt.EncodeGGUF(&b, kv, ts); err != nil {
		t.Fatal(err)
	}
	srcPath := filepath.Join(t.TempDir(), "f32.gguf")
	if err := os.WriteFile(srcPath, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	src, err := ckpt.Open(srcPath)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	for _, path := range quantFixtures(t) {
		name := strings.TrimSuffix(filepath.Base(path), ".gguf")
		t.Run(name, func(t *testing.T) {
			r, err := fixtureRecipe(name, path)
			if err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(t.TempDir(), name+".gguf")
			if err := ckpt.WriteGGUFFile(out, src, ckpt.WriteOptions{Recipe: r}); err != nil {
				t.Fatal(err)
			}
			ours, err := ckpt.Open(out)
			if err != nil {
				t.Fatal(err)
			}
			defer ours.Close()
			ref, err := ckpt.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer ref.Close()
			for _, want := range ref.Tensors() {
				got, ok := ours.Tensor(want.Name)
				if !ok || got.DType != want.DType {
					t.Errorf("%s: lagc writes %s, llama-quantize %s", want.Name, got.DType, want.DType)
					continue
				}
				a, _ := ours.Raw(want.Name)
				w, _ := ref.Raw(want.Name)
				if i := firstBlockDiff(a, w, want.DType.BlockBytes()); i >= 0 {
					t.Errorf("%s (%s): block %d differs from llama-quantize's", want.Name, want.DType, i)
				}
			}
			if ft, _ := ours.Metadata()["general.file_type"].(uint32); ft != ref.Metadata()["general.file_type"] {
				t.Errorf("general.file_type %d, llama-quantize %v", ft, ref.Metadata()["general.file_type"])
			}
		})
	}
}

// fixtureRecipe is the recipe a fixture was made with: lagc's of its name,
// or for NAME-llama (llama-quantize's own mixture, which lagc does not
// write) each tensor in the type the file holds, so that the blocks of
// every type it chose are compared.
func fixtureRecipe(name, path string) (*ckpt.Recipe, error) {
	if !strings.HasSuffix(name, "-llama") {
		return ckpt.ParseRecipe(name)
	}
	ck, err := ckpt.Open(path)
	if err != nil {
		return nil, err
	}
	defer ck.Close()
	ft, _ := ck.Metadata()["general.file_type"].(uint32)
	r := &ckpt.Recipe{Name: name, Base: ckpt.F32, FileType: ft}
	for _, ti := range ck.Tensors() {
		r.Rules = append(r.Rules, ckpt.TypeRule{Pattern: regexp.MustCompile("^" + regexp.QuoteMeta(ti.Name) + "$"), Type: ti.DType})
	}
	return r, nil
}

// firstBlockDiff returns the index of the first block of n bytes where a
// and b differ, or -1.
func firstBlockDiff(a, b []byte, n int) int {
	if len(a) != len(b) {
		return 0
	}
	for i := 0; i < len(a); i += n {
		if !bytes.Equal(a[i:i+n], b[i:i+n]) {
			return i / n
		}
	}
	return -1
}

// On the bundled model, whose rows are 64, 128, 192 and 512 wide, the
// recipes fall back where llama-quantize does.
func TestRecipeFallbacksMatchLlamaQuantize(t *testing.T) {
	var want map[string]map[string]string
	readJSON(t, filepath.Join(quantDir, "tiny_types.json"), &want)
	ck, err := ckpt.Open("../models/tiny")
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	if len(want) != 6 {
		t.Fatalf("tiny_types.json has %d files, want 6", len(want))
	}
	for file, types := range want {
		r, err := ckpt.ParseRecipe(strings.TrimSuffix(strings.TrimPrefix(file, "tiny_"), ".gguf"))
		if err != nil {
			t.Fatal(err)
		}
		for _, ti := range ck.Tensors() {
			if got := r.TypeFor(ti); got.String() != types[ti.Name] {
				t.Errorf("%s, %s %v: lagc picks %s, llama-quantize %s", r.Name, ti.Name, ti.Shape, got, types[ti.Name])
			}
		}
	}
}
