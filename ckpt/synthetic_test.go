package ckpt

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"lagc/config"
	"lagc/quant"
)

// TestSyntheticWrite: a synthetic checkpoint streamed into a GGUF (chunk
// by chunk on several cores) reads back as the bytes Raw makes whole, for
// a tensor of several chunks too.
func TestSyntheticWrite(t *testing.T) {
	cfg, err := config.Preset("synthetic-tiny")
	if err != nil {
		t.Fatal(err)
	}
	tensors := []TensorInfo{
		{Name: "a.weight", DType: Q4_K, Shape: []int{3, 512}},
		{Name: "big.weight", DType: Q8_0, Shape: []int{600, 32768}}, // 20 MB: two chunks
		{Name: "attn_norm.weight", DType: F32, Shape: []int{64}},
		{Name: "c.weight", DType: BF16, Shape: []int{5, 7}},
	}
	s, err := Synthetic(cfg, "synthetic:test", tensors, 3)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "s.gguf")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteGGUF(f, s, WriteOptions{KeepDType: true}); err != nil {
		t.Fatal(err)
	}
	f.Close()
	ck, err := OpenUnchecked(p)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	for _, want := range tensors {
		got, ok := ck.Tensor(want.Name)
		if !ok || got.DType != want.DType || len(got.Shape) != len(want.Shape) {
			t.Fatalf("%s: read back as %+v", want.Name, got)
		}
		a, _ := ck.Raw(want.Name)
		b, err := s.Raw(want.Name)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a, b) {
			t.Errorf("%s: streamed bytes differ from Raw", want.Name)
		}
	}
	norm, _ := s.ReadF32("attn_norm.weight")
	for _, v := range norm {
		if v < 0.85 || v > 1.15 {
			t.Fatalf("norm weight %v, want near 1", v)
		}
	}
	if _, err := Synthetic(cfg, "x", []TensorInfo{{Name: "q", DType: quant.Q8_K, Shape: []int{256}}}, 1); err == nil {
		t.Error("a type without random blocks was accepted")
	}
	if _, err := Synthetic(cfg, "x", []TensorInfo{{Name: "q", DType: Q4_K, Shape: []int{2, 100}}}, 1); err == nil {
		t.Error("rows of partial blocks were accepted")
	}
}
