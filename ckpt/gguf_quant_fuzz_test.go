package ckpt

import (
	"bytes"
	"testing"

	"lagc/quant"
)

// ggufQuantSeed is a GGUF file holding one small tensor of every type lagc
// reads, filled with bytes that are not all zero.
func ggufQuantSeed() []byte {
	var ts []GGUFTensor
	for _, name := range quant.Names() {
		t, _ := quant.ParseType(name)
		shape := []int{2, 256}
		n, _ := t.RowBytes(512)
		data := make([]byte, n)
		for i := range data {
			data[i] = byte(i*7 + 3)
		}
		ts = append(ts, GGUFTensor{Name: "t." + name, DType: t, Shape: shape, Data: data})
	}
	var b bytes.Buffer
	if err := EncodeGGUF(&b, []KV{{"general.architecture", "laguna"}}, ts); err != nil {
		panic(err)
	}
	return b.Bytes()
}

// FuzzGGUFQuantised checks that whatever quantised tensor infos the GGUF
// parser accepts (any type number, dimensions, offsets) describe whole
// blocks inside the file, so reading them with package quant can neither
// panic nor fail on sizes. Run it with -fuzzminimizetime 5s: minimising a
// new input from this 8.8 KB seed otherwise takes up to the default 60 s.
func FuzzGGUFQuantised(f *testing.F) {
	f.Add(ggufQuantSeed())
	f.Fuzz(func(t *testing.T, data []byte) {
		g, err := parseGGUF(data)
		if err != nil {
			return
		}
		for _, x := range g.tensors {
			shape := x.shape()
			n, err := numElements(shape)
			if err != nil {
				t.Fatalf("accepted %s with shape %v: %v", x.name, shape, err)
			}
			if err := checkRows(shape, x.typ); err != nil {
				t.Fatalf("accepted %s (%s %v): %v", x.name, x.typ, shape, err)
			}
			if want, err := x.typ.Bytes(n); err != nil || want != x.size {
				t.Fatalf("accepted %s (%s %v) of %d bytes; quant says %d, %v", x.name, x.typ, shape, x.size, want, err)
			}
			if !x.typ.Supported() || n > 1<<16 {
				continue
			}
			start := g.dataStart + int64(x.offset)
			dst := make([]float32, n)
			if err := quant.Dequantize(x.typ, dst, data[start:start+x.size]); err != nil {
				t.Fatalf("%s (%s %v): %v", x.name, x.typ, shape, err)
			}
		}
	})
}
