package lower

import (
	"strings"
	"testing"

	"lagc/quant"
)

// TestCublasLtChoice: with CublasLt, MatMul puts the plain bf16 GEMMs of
// CublasLtMinRows rows or more on cuBLASLt, the quantised ones after
// their bf16 copy too, and keeps everything else where it was.
func TestCublasLtChoice(t *testing.T) {
	arena, w := Ptr{BaseArena, 0}, Ptr{BaseWeights, 0}
	y := Ptr{BaseArena, 1 << 28}
	for _, c := range []struct {
		name    string
		a       MatMulArgs
		want    string // kernel of the GEMM launch (the last)
		wantErr string
	}{
		{"qkvg bf16 T=2048", MatMulArgs{T: 2048, N: 11336, K: 3072}, CublasLtGEMM, ""},
		{"o_proj accumulate", MatMulArgs{T: 2048, N: 3072, K: 9216, Accumulate: true}, CublasLtGEMM, ""},
		{"f32 out", MatMulArgs{T: 1024, N: 3072, K: 1024, YType: "f32"}, CublasLtGEMM, ""},
		{"under CublasLtMinRows", MatMulArgs{T: CublasLtMinRows - 1, N: 3072, K: 1024}, "gemm_wgmma", ""},
		{"router at CublasLtMinRows", MatMulArgs{T: CublasLtMinRows, N: 256, K: 3072, YType: "f32"}, CublasLtGEMM, ""},
		{"swiglu", MatMulArgs{T: 2048, N: 1024, K: 3072, SwiGLU: true}, "gemm_wgmma", ""},
		{"f32 x", MatMulArgs{T: 2048, N: 1024, K: 3072, XType: "f32", WType: "f32"}, "gemm_simple", ""},
		{"N not 8-aligned", MatMulArgs{T: 2048, N: 1020, K: 3072}, "gemm_wgmma", ""},
		{"off", MatMulArgs{T: 2048, N: 3072, K: 1024, CublasLt: false}, "gemm_wgmma", ""},
		{"sm_80", MatMulArgs{T: 2048, N: 3072, K: 1024, CC: 80}, "gemm_bf16", ""},
		{"q8_0 through the bf16 copy", MatMulArgs{T: 2048, N: 3072, K: 9216, WType: quant.Q8_0.String()}, CublasLtGEMM, ""},
		{"q8_0 in registers", MatMulArgs{T: 256, N: 3072, K: 1024, WType: quant.Q8_0.String()}, "gemm_wgmma_q", ""},
	} {
		a := c.a
		a.X, a.W, a.Y, a.SMs = arena, w, y, 132
		if a.XType == "" {
			a.XType = "bf16"
		}
		if a.WType == "" {
			a.WType = "bf16"
		}
		if a.YType == "" {
			a.YType = "bf16"
		}
		if a.CC == 0 {
			a.CC = 90
		}
		a.CublasLt = c.name != "off"
		var ls []Launch
		var err error
		if _, q := QuantType(a.WType); q {
			ls, err = quantMatMul(nil, a, a.N, 0)
		} else {
			var l Launch
			l, err = MatMul(a)
			ls = []Launch{l}
		}
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		got := ls[len(ls)-1]
		if !strings.HasPrefix(got.Kernel, c.want) {
			t.Errorf("%s: %s, want %s", c.name, got.Kernel, c.want)
		}
		if got.Kernel == CublasLtGEMM {
			s := got.String()
			acc := "i32 0)"
			if a.Accumulate {
				acc = "i32 1)"
			}
			if !strings.HasPrefix(s, CublasLtGEMM+"<"+a.YType+"> (") || !strings.HasSuffix(s, acc) {
				t.Errorf("%s: %s", c.name, s)
			}
		}
	}
}

// TestCublasLtLaunchChecks: the builder refuses what cuBLASLt is not
// planned for.
func TestCublasLtLaunchChecks(t *testing.T) {
	ok := MatMulArgs{T: 2048, N: 3072, K: 1024, X: Ptr{BaseArena, 0}, W: Ptr{BaseWeights, 0}, Y: Ptr{BaseArena, 1 << 28},
		XType: "bf16", WType: "bf16", YType: "bf16", CC: 90, CublasLt: true}
	if _, err := CublasLtLaunch(ok); err != nil {
		t.Fatal(err)
	}
	for name, mod := range map[string]func(*MatMulArgs){
		"not enabled": func(a *MatMulArgs) { a.CublasLt = false },
		"few rows":    func(a *MatMulArgs) { a.T = 8 },
		"swiglu":      func(a *MatMulArgs) { a.SwiGLU = true },
		"f32 w":       func(a *MatMulArgs) { a.WType = "f32" },
		"unaligned y": func(a *MatMulArgs) { a.Y = a.Y.At(2) },
		"null x":      func(a *MatMulArgs) { a.X = Ptr{} },
	} {
		a := ok
		mod(&a)
		if _, err := CublasLtLaunch(a); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
