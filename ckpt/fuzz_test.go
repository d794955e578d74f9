package ckpt

import (
	"bytes"
	"encoding/binary"
	"lagc/config"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// stSeed builds a small valid safetensors file.
func stSeed() []byte {
	h := `{"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},"b":{"dtype":"BF16","shape":[3],"data_offsets":[16,22]}}`
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(h)))
	b = append(b, h...)
	return append(b, make([]byte, 22)...)
}

// ggufSeed builds a small valid GGUF file with metadata of several types.
func ggufSeed() []byte {
	var b bytes.Buffer
	kv := []KV{
		{"general.architecture", "laguna"}, {"laguna.block_count", uint32(1)},
		{"laguna.attention.head_count", []int32{2}}, {"x.nested", []any{[]string{"a"}, []uint8{1}}},
		{"x.f", float32(0.5)}, {"x.b", true},
	}
	ts := []GGUFTensor{
		{Name: "token_embd.weight", DType: F32, Shape: []int{2, 3}, Data: make([]byte, 24)},
		{Name: "blk.0.attn_q.weight", DType: F16, Shape: []int{4}, Data: make([]byte, 8)},
		{Name: "q", DType: Q8_0, Shape: []int{32}, Data: make([]byte, 34)},
	}
	if err := EncodeGGUF(&b, kv, ts); err != nil {
		panic(err)
	}
	return b.Bytes()
}

// ggufConfigSeed is the metadata of a small Laguna model without tensors,
// so the fuzzer starts from input that reaches the configuration reader.
func ggufConfigSeed() []byte {
	c := config.Defaults()
	c.VocabSize, c.HiddenSize, c.NumLayers, c.NumHeads, c.NumKVHeads, c.HeadDim = 8, 4, 2, 2, 1, 2
	c.NumExperts, c.NumExpertsPerTok, c.IntermediateSize, c.MoEIntermediateSize, c.SharedExpertSize = 3, 1, 4, 2, 2
	c.LayerTypes = []string{config.FullAttention, config.SlidingAttention}
	c.RopeParameters = map[string]config.Rope{
		config.FullAttention:    {Type: "yarn", Theta: 100, PartialRotaryFactor: 1, Factor: 2, OriginalContext: 4},
		config.SlidingAttention: {Type: "default", Theta: 10, PartialRotaryFactor: 1},
	}
	if err := c.Normalize(); err != nil {
		panic(err)
	}
	kv, err := ConfigMetadata(c)
	if err != nil {
		panic(err)
	}
	var b bytes.Buffer
	if err := EncodeGGUF(&b, kv, nil); err != nil {
		panic(err)
	}
	return b.Bytes()
}

// FuzzSafetensorsHeader checks that no input makes the safetensors parser
// panic, and that whatever it accepts lies inside the file.
func FuzzSafetensorsHeader(f *testing.F) {
	f.Add(stSeed())
	f.Add([]byte{})
	f.Add(binary.LittleEndian.AppendUint64(nil, 2))
	f.Add(append(binary.LittleEndian.AppendUint64(nil, 2), "{}"...))
	f.Fuzz(func(t *testing.T, data []byte) {
		ts, err := parseSafetensors(data)
		if err != nil {
			return
		}
		for _, x := range ts {
			if x.begin < 8 || x.end < x.begin || x.end > int64(len(data)) {
				t.Fatalf("accepted %s with range [%d, %d) in a %d-byte file", x.name, x.begin, x.end, len(data))
			}
			_ = data[x.begin:x.end]
		}
	})
}

// FuzzGGUFHeader checks that no input makes the GGUF parser or the Laguna
// configuration reader panic, and that accepted tensors lie in the file.
func FuzzGGUFHeader(f *testing.F) {
	f.Add(ggufSeed())
	f.Add(ggufConfigSeed())
	f.Add([]byte("GGUF"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		g, err := parseGGUF(data)
		if err != nil {
			return
		}
		shapes := map[string][]int{}
		for _, x := range g.tensors {
			end := g.dataStart + int64(x.offset) + x.size
			if end > int64(len(data)) || end < g.dataStart {
				t.Fatalf("accepted %s ending at %d in a %d-byte file", x.name, end, len(data))
			}
			shapes[canonicalGGUFName(x.name)] = x.shape()
		}
		if cfg, err := configFromGGUF(g.kv, shapes); err == nil {
			_ = cfg.Validate()
		}
	})
}

// TestWriteFuzzSeeds regenerates the committed seed corpus under
// testdata/fuzz when LAGC_WRITE_FUZZ_SEEDS=1; otherwise it checks that
// the seeds are valid input for the parsers.
func TestWriteFuzzSeeds(t *testing.T) {
	seeds := map[string][]byte{
		"FuzzSafetensorsHeader/valid": stSeed(),
		"FuzzGGUFHeader/valid":        ggufSeed(),
		"FuzzGGUFHeader/laguna":       ggufConfigSeed(),
	}
	for name, data := range seeds {
		p := filepath.Join("testdata", "fuzz", name)
		if os.Getenv("LAGC_WRITE_FUZZ_SEEDS") == "1" {
			os.MkdirAll(filepath.Dir(p), 0o755)
			body := "go test fuzz v1\n[]byte(" + strconv.Quote(string(data)) + ")\n"
			if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := parseSafetensors(stSeed()); err != nil {
		t.Errorf("safetensors seed: %v", err)
	}
	g, err := parseGGUF(ggufConfigSeed())
	if err != nil {
		t.Fatalf("GGUF seed: %v", err)
	}
	if _, err := configFromGGUF(g.kv, nil); err != nil {
		t.Errorf("GGUF config seed: %v", err)
	}
}
