package quant

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// Random blocks of every supported type (f16 fields finite, other bytes
// arbitrary) dequantise bitwise as gguf-py's gguf.quants.dequantize does:
// testdata/quant/blocks holds the blocks and the sha256 of each block's
// reference float32 values.
func TestDequantizeRandomBlocks(t *testing.T) {
	dir := filepath.Join("..", "testdata", "quant", "blocks")
	b, err := os.ReadFile(filepath.Join(dir, "reference.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ref map[string][]string
	if err := json.Unmarshal(b, &ref); err != nil {
		t.Fatal(err)
	}
	for _, name := range Names() {
		t.Run(name, func(t *testing.T) {
			want, ok := ref[name]
			if !ok {
				t.Fatalf("no reference blocks for %s", name)
			}
			ty, _ := ParseType(name)
			raw, err := os.ReadFile(filepath.Join(dir, name+".bin"))
			if err != nil {
				t.Fatal(err)
			}
			elems, size := ty.BlockElems(), ty.BlockBytes()
			if elems == 1 { // plain types: 256 values a block
				elems, size = QK, QK*size
			}
			if len(raw) != len(want)*size {
				t.Fatalf("%d bytes for %d blocks of %d", len(raw), len(want), size)
			}
			out := make([]float32, elems)
			buf := make([]byte, 4*elems)
			for i, h := range want {
				if err := Dequantize(ty, out, raw[i*size:(i+1)*size]); err != nil {
					t.Fatal(err)
				}
				quantF32(buf, out)
				if s := sha256.Sum256(buf); hex.EncodeToString(s[:]) != h {
					t.Errorf("block %d dequantises differently from gguf-py: % x", i, raw[i*size:(i+1)*size])
				}
			}
		})
	}
}
