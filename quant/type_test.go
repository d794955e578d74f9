package quant

import (
	"math"
	"strings"
	"testing"
)

// The block sizes of ggml-common.h, computed from the struct fields rather
// than copied from the table they check.
func TestBlockSizes(t *testing.T) {
	const f16, k = 2, QK
	cases := []struct {
		t           Type
		elems, size int
	}{
		{F32, 1, 4}, {F16, 1, 2}, {BF16, 1, 2},
		{Q4_0, 32, f16 + 32/2},
		{Q4_1, 32, 2*f16 + 32/2},
		{Q5_0, 32, f16 + 4 + 32/2},
		{Q5_1, 32, 2*f16 + 4 + 32/2},
		{Q8_0, 32, f16 + 32},
		{Q2_K, k, k/16 + k/4 + 2*f16},
		{Q3_K, k, k/8 + k/4 + 12 + f16},
		{Q4_K, k, 2*f16 + 12 + k/2},
		{Q5_K, k, 2*f16 + 12 + k/8 + k/2},
		{Q6_K, k, k/2 + k/4 + k/16 + f16},
		{IQ4_NL, 32, f16 + 32/2},
		{IQ4_XS, k, f16 + 2 + k/64 + k/2},
	}
	for _, c := range cases {
		if c.t.BlockElems() != c.elems || c.t.BlockBytes() != c.size {
			t.Errorf("%s: block %d elems in %d bytes, want %d in %d", c.t, c.t.BlockElems(), c.t.BlockBytes(), c.elems, c.size)
		}
		if got := c.t.Quantized(); got != (c.elems > 1) {
			t.Errorf("%s: Quantized() = %v", c.t, got)
		}
	}
}

func TestParseType(t *testing.T) {
	for ty := range table {
		got, err := ParseType(strings.ToUpper(ty.String()))
		if err != nil || got != ty {
			t.Errorf("ParseType(%q) = %v, %v; want %v", strings.ToUpper(ty.String()), got, err, ty)
		}
	}
	for s, want := range map[string]Type{"float32": F32, "bfloat16": BF16, " q8_0 ": Q8_0} {
		if got, err := ParseType(s); err != nil || got != want {
			t.Errorf("ParseType(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	_, err := ParseType("q9_9")
	if err == nil || !strings.Contains(err.Error(), `"q9_9"`) || !strings.Contains(err.Error(), "q8_0") {
		t.Errorf("ParseType(q9_9): error %v should name the input and the choices", err)
	}
	if s := Type(99).String(); s != "ggml_type(99)" {
		t.Errorf("Type(99).String() = %q", s)
	}
}

func TestRowBytes(t *testing.T) {
	cases := []struct {
		t    Type
		n    int
		want int64
		err  string
	}{
		{Q8_0, 64, 68, ""},
		{Q4_K, 512, 288, ""},
		{F16, 3, 6, ""},
		{Q8_0, 33, 0, "not a whole number of q8_0 blocks of 32"},
		{Q4_K, 128, 0, "blocks of 256"},
		{Q8_0, -32, 0, "negative"},
		{Type(99), 32, 0, "unknown ggml type 99"},
	}
	for _, c := range cases {
		got, err := c.t.RowBytes(c.n)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s.RowBytes(%d): error %v, want one containing %q", c.t, c.n, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%s.RowBytes(%d) = %d, %v; want %d", c.t, c.n, got, err, c.want)
		}
	}
	if _, err := Q8_0.Bytes(math.MaxInt64 / 32 * 32); err == nil {
		t.Error("Q8_0.Bytes of the largest whole-block count should overflow")
	}
}

func TestConversionSizeErrors(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want string
	}{
		{"short src", Dequantize(Q8_0, make([]float32, 32), make([]byte, 33)), "32 q8_0 elements take 34 bytes, got 33"},
		{"partial block", Dequantize(Q8_0, make([]float32, 31), make([]byte, 34)), "not a whole number"},
		{"unknown", Dequantize(Type(77), nil, nil), "unknown ggml type 77"},
		{"unsupported", Dequantize(IQ1_S, make([]float32, 256), make([]byte, 50)), "iq1_s is not supported"},
		{"quantize long dst", Quantize(Q8_0, make([]byte, 35), make([]float32, 32)), "got 35"},
		{"quantize unsupported", Quantize(TQ1_0, make([]byte, 54), make([]float32, 256)), "cannot produce type tq1_0"},
	}
	for _, c := range cases {
		if c.err == nil || !strings.Contains(c.err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.name, c.err, c.want)
		}
	}
}
