package ckpt

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestHostileFiles: crafted files the parsers accepted (overlapping
// tensors, garbage after a safetensors header) or described with a wrapped
// byte range (an offset near 2^64).
func TestHostileFiles(t *testing.T) {
	tests := []struct {
		file string
		want []string
	}{
		{"overlapping.gguf", []string{"tensor b.weight: its bytes [160, 224) overlap those of tensor a.weight [128, 192)"}},
		{"offset_near_2_64.gguf", []string{"tensor a.weight: its bytes [18446744073709551648, 18446744073709551712) (offset 18446744073709551584 in the data section) lie past the end of the file (128 bytes)"}},
		{"trailing_garbage.safetensors", []string{"header has 17 bytes after its JSON object (at byte 62 of the 79-byte header)"}},
		{"overlapping.safetensors", []string{"tensor b.weight: its bytes [139, 155) overlap those of tensor a.weight [131, 147)"}},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("..", "testdata", "hostile", "ckpt", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			if strings.HasSuffix(tc.file, ".gguf") {
				_, err = parseGGUF(data)
			} else {
				_, err = parseSafetensors(data)
			}
			for _, w := range tc.want {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("got %v, want an error with %q", err, w)
				}
			}
		})
	}
}

func TestSafetensorsHeaderPadding(t *testing.T) {
	hdr := `{"a.weight":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}` + "   \n\t "
	data := append(le64(uint64(len(hdr))), hdr...)
	data = append(data, 0, 0, 0, 0)
	if _, err := parseSafetensors(data); err != nil {
		t.Errorf("a header padded with white space: %v", err)
	}
}

func le64(v uint64) []byte {
	b := make([]byte, 8)
	for i := range b {
		b[i] = byte(v >> (8 * i))
	}
	return b
}
