package ckpt_test

import (
	"math"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"lagc/ckpt"
	"lagc/quant"
)

// TestFixtures opens every transformers-made fixture in testdata/fixtures,
// and converts each to GGUF (f32 and f16) and back.
func TestFixtures(t *testing.T) {
	cfgs, _ := filepath.Glob(filepath.Join("..", "testdata", "fixtures", "*", "config.json"))
	if len(cfgs) == 0 {
		t.Fatal("no fixtures in testdata/fixtures (they are committed: see testdata/README.md)")
	}
	for _, c := range cfgs {
		dir := filepath.Dir(c)
		t.Run(filepath.Base(dir), func(t *testing.T) {
			src, err := ckpt.Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer src.Close()
			for _, dt := range []ckpt.DType{ckpt.F32, ckpt.F16} {
				out := filepath.Join(t.TempDir(), "f.gguf")
				if err := ckpt.WriteGGUFFile(out, src, ckpt.WriteOptions{DType: dt}); err != nil {
					t.Fatalf("%s: %v", dt, err)
				}
				g, err := ckpt.Open(out)
				if err != nil {
					t.Fatalf("%s: %v", dt, err)
				}
				if !reflect.DeepEqual(g.Config(), src.Config()) {
					t.Errorf("%s: config differs after GGUF round trip:\n got %+v\nwant %+v", dt, g.Config(), src.Config())
				}
				for _, ti := range src.Tensors() {
					a, err1 := src.ReadF32(ti.Name)
					b, err2 := g.ReadF32(ti.Name)
					if err1 != nil || err2 != nil {
						t.Fatalf("%s: %v %v", ti.Name, err1, err2)
					}
					for i := range a {
						want := a[i]
						if gi, _ := g.Tensor(ti.Name); gi.DType == ckpt.F16 {
							want = quant.F16ToF32(quant.F32ToF16(want))
						}
						if math.Float32bits(b[i]) != math.Float32bits(want) {
							t.Fatalf("%s %s[%d] = %v, want %v", dt, ti.Name, i, b[i], want)
						}
					}
				}
				g.Close()
			}
		})
	}
}

// TestRealModel opens the checkpoint LAGC_TEST_MODEL names (HF directory or
// GGUF), validates it and reads its small tensors; it skips when unset.
func TestRealModel(t *testing.T) {
	p := os.Getenv("LAGC_TEST_MODEL")
	if p == "" {
		t.Skip("LAGC_TEST_MODEL is not set")
	}
	ck, err := ckpt.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	cfg := ck.Config()
	t.Logf("%s: %s, %d layers, hidden %d, %d experts, %d tensors", p, ck.Format(), cfg.NumLayers, cfg.HiddenSize, cfg.NumExperts, len(ck.Tensors()))
	for _, ti := range ck.Tensors() {
		if len(ti.Shape) != 1 || !ti.DType.Float() {
			continue
		}
		v, err := ck.ReadF32(ti.Name)
		if err != nil {
			t.Fatal(err)
		}
		for i, x := range v {
			if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
				t.Fatalf("%s[%d] = %v", ti.Name, i, x)
			}
		}
	}
}
