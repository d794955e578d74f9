package cuda

import (
	"strings"
	"testing"
)

func baseSpec() KernelSpec {
	return KernelSpec{Name: "axpy", Source: "template <typename T> __global__ void axpy(T* x) {}", DTypes: []DType{F32}}
}

// TestCacheKeyDistinguishesSignature: every part of the signature changes the
// key. The f32/f16 pair is the regression it guards against: a cache keyed
// by name alone ran an f32 kernel on f16 data.
func TestCacheKeyDistinguishesSignature(t *testing.T) {
	base := CacheKey(baseSpec(), "sm_90a", "13.0")
	if base != CacheKey(baseSpec(), "sm_90a", "13.0") {
		t.Fatal("key is not deterministic")
	}
	cases := []struct {
		name  string
		spec  func(*KernelSpec)
		arch  string
		nvrtc string
	}{
		{"f16 instead of f32", func(s *KernelSpec) { s.DTypes = []DType{F16} }, "", ""},
		{"bf16", func(s *KernelSpec) { s.DTypes = []DType{BF16} }, "", ""},
		{"two dtypes", func(s *KernelSpec) { s.DTypes = []DType{F32, F16} }, "", ""},
		{"swapped dtypes", func(s *KernelSpec) { s.DTypes = []DType{F16, F32} }, "", ""},
		{"no dtypes", func(s *KernelSpec) { s.DTypes = nil }, "", ""},
		{"int argument", func(s *KernelSpec) { s.Ints = []int64{128} }, "", ""},
		{"other name", func(s *KernelSpec) { s.Name = "axpy2" }, "", ""},
		{"source", func(s *KernelSpec) { s.Source += " " }, "", ""},
		{"file name", func(s *KernelSpec) { s.File = "other.cu" }, "", ""},
		{"option", func(s *KernelSpec) { s.Options = []string{"-DTILE=64"} }, "", ""},
		{"option split differently", func(s *KernelSpec) { s.Options = []string{"-DA", "-DB"} }, "", ""},
		{"arch", nil, "sm_80", ""},
		{"arch without a", nil, "sm_90", ""},
		{"nvrtc version", nil, "", "12.8"},
	}
	seen := map[string]string{base: "base"}
	for _, c := range cases {
		s := baseSpec()
		if c.spec != nil {
			c.spec(&s)
		}
		arch, nv := "sm_90a", "13.0"
		if c.arch != "" {
			arch = c.arch
		}
		if c.nvrtc != "" {
			nv = c.nvrtc
		}
		k := CacheKey(s, arch, nv)
		if prev, dup := seen[k]; dup {
			t.Errorf("%s: same key as %s", c.name, prev)
		}
		seen[k] = c.name
	}
	// Options joined into one string must not collide with the split form.
	a, b := baseSpec(), baseSpec()
	a.Options = []string{"-DA -DB"}
	b.Options = []string{"-DA", "-DB"}
	if CacheKey(a, "sm_90a", "13.0") == CacheKey(b, "sm_90a", "13.0") {
		t.Error("option lists that differ only in splitting share a key")
	}
}

func TestKeyTextNamesEveryPart(t *testing.T) {
	s := baseSpec()
	s.DTypes = []DType{F16, F32}
	s.Options = []string{"-DX=1"}
	txt := keyText(s, "sm_90a", "13.0")
	for _, want := range []string{"name: axpy", "dtypes: f16,f32", "instantiation: axpy<half_t, float>", "arch: sm_90a", "-DX=1", "source-sha256: ", "nvrtc: 13.0"} {
		if !strings.Contains(txt, want) {
			t.Errorf("key text lacks %q:\n%s", want, txt)
		}
	}
}

func TestNameExpr(t *testing.T) {
	for _, c := range []struct {
		spec KernelSpec
		want string
	}{
		{KernelSpec{Name: "noop"}, "noop"},
		{KernelSpec{Name: "axpy", DTypes: []DType{F32}}, "axpy<float>"},
		{KernelSpec{Name: "cast", DTypes: []DType{BF16, F16}}, "cast<bf16_t, half_t>"},
		{KernelSpec{Name: "gemv", DTypes: []DType{BF16, F32}, Ints: []int64{128, -1}}, "gemv<bf16_t, float, 128, -1>"},
		{KernelSpec{Name: "k", DTypes: []DType{I8, U8, I16, U16, I32, U32, I64, U64, F64}}, "k<signed char, unsigned char, short, unsigned short, int, unsigned int, long long, unsigned long long, double>"},
	} {
		if got := c.spec.NameExpr(); got != c.want {
			t.Errorf("%+v: got %q want %q", c.spec, got, c.want)
		}
	}
}

func TestSpecValidate(t *testing.T) {
	ok := KernelSpec{Name: "k_1", Source: "x"}
	if err := ok.validate(); err != nil {
		t.Fatal(err)
	}
	for _, s := range []KernelSpec{
		{Name: "", Source: "x"},
		{Name: "1k", Source: "x"},
		{Name: "a<b>", Source: "x"},
		{Name: "k", Source: "  "},
		{Name: "k", Source: "x", DTypes: []DType{0}},
		{Name: "k", Source: "x", DTypes: []DType{99}},
		{Name: "k", Source: "x", File: "a\"b.cu"},
	} {
		if err := s.validate(); err == nil {
			t.Errorf("%+v: want an error", s)
		}
	}
}

func TestDTypes(t *testing.T) {
	for _, c := range []struct {
		d    DType
		name string
		size int
	}{{F32, "f32", 4}, {F16, "f16", 2}, {BF16, "bf16", 2}, {I32, "i32", 4}, {I64, "i64", 8}, {U8, "u8", 1}} {
		if c.d.String() != c.name || c.d.Size() != c.size {
			t.Errorf("%d: %s/%d", c.d, c.d, c.d.Size())
		}
		if p, err := ParseDType(c.name); err != nil || p != c.d {
			t.Errorf("ParseDType(%s) = %v, %v", c.name, p, err)
		}
	}
	if _, err := ParseDType("f8"); err == nil {
		t.Error("ParseDType(f8) should fail")
	}
	if DType(0).String() == "" || DType(0).Size() != 0 {
		t.Error("invalid dtype")
	}
}

func TestEmbeddedSources(t *testing.T) {
	files := SourceFiles()
	for _, want := range []string{"prelude.cuh", "bench.cu", "matmul.cu", "step.cu"} {
		found := false
		for _, f := range files {
			found = found || f == want
		}
		if !found {
			t.Errorf("%s not embedded (have %v)", want, files)
		}
	}
	spec, err := EmbeddedSpec("bench.cu", "axpy", F16)
	if err != nil || !strings.Contains(spec.Source, "axpy") || spec.File != "bench.cu" {
		t.Fatalf("EmbeddedSpec: %+v %v", spec, err)
	}
	full := spec.fullSource()
	if !strings.Contains(full, "struct half_t") || !strings.Contains(full, "#line 1 \"bench.cu\"\n") {
		t.Error("full source lacks the prelude or the #line directive")
	}
	if _, err := Source("nope.cu"); err == nil {
		t.Error("Source of a missing file should fail")
	}
}

func TestArch(t *testing.T) {
	for _, c := range []struct {
		maj, min int
		want     string
	}{{9, 0, "sm_90a"}, {8, 6, "sm_86"}, {10, 0, "sm_100a"}, {7, 5, "sm_75"}} {
		if got := archFor(c.maj, c.min); got != c.want {
			t.Errorf("%d.%d: %s want %s", c.maj, c.min, got, c.want)
		}
	}
}
