package lower

import (
	"strconv"
	"strings"
	"testing"

	"lagc/quant"
)

// TestPrefetchL2: before a decode attention (and the qk_norm_rope right
// before it) goes one l2_prefetch of exactly the weight rows of the GEMVs
// after it: level 1 the first (a quantised one), level 2 each up to the
// routed experts; none where no GEMV follows.
func TestPrefetchL2(t *testing.T) {
	oProj, err := QGEMV(QGEMVArgs{T: 1, K: 9216, N: 3072, XQ: Ptr{BaseWorkspace, 0}, W: Ptr{BaseWeights, 4096}, WType: quant.Q8_0,
		WRows: 3072, Y: Ptr{BaseArena, 0}, YType: "bf16", Accumulate: true})
	if err != nil {
		t.Fatal(err)
	}
	shared, err := QGEMV(QGEMVArgs{T: 1, K: 3072, N: 1024, XQ: Ptr{BaseWorkspace, 0}, W: Ptr{BaseWeights, 1 << 30}, WType: quant.Q8_0,
		WRows: 2048, Y: Ptr{BaseArena, 0}, YType: "bf16", SwiGLU: true})
	if err != nil {
		t.Fatal(err)
	}
	router, err := MatMul(MatMulArgs{T: 1, K: 3072, N: 256, X: Ptr{BaseArena, 0}, W: Ptr{BaseWeights, 2 << 30}, Y: Ptr{BaseArena, 1 << 20},
		XType: "bf16", WType: "bf16", YType: "f32", SMs: 132})
	if err != nil {
		t.Fatal(err)
	}
	n, err := RMSNormQ8X("bf16", "bf16", Ptr{BaseArena, 1 << 20}, Ptr{BaseArena, 0}, Ptr{BaseWeights, 3 << 30}, Ptr{BaseWorkspace, 1 << 20}, 1, 3072, 1e-6)
	if err != nil {
		t.Fatal(err)
	}
	oProjNorm, err := QGEMVNorm(oProj, n, Ptr{BaseSync, 0}) // gemvnorm: o_proj with the norm after it
	if err != nil {
		t.Fatal(err)
	}
	attn := Launch{Kernel: "attn_decode"}
	rope := Launch{Kernel: "qk_norm_rope"}
	experts := Launch{Kernel: "moe_gateup_qgemv"}
	rbO, _ := quant.Q8_0.RowBytes(9216)
	rbS, _ := quant.Q8_0.RowBytes(3072)
	oSpan := "weights+4096, i64 " + strconv.FormatInt(3072*rbO, 10)
	rSpan := "weights+2147483648, i64 " + strconv.FormatInt(256*3072*2, 10)
	sSpan := "weights+1073741824, i64 " + strconv.FormatInt(2048*rbS, 10)
	none := "null, i64 0"
	for _, c := range []struct {
		name  string
		level int
		steps [][]Launch
		want  string // kernels after, joined
		spans string // the prefetch's arguments
	}{
		{"rope and attention", 1, [][]Launch{{rope}, {attn}, {oProj}}, "l2_prefetch qk_norm_rope attn_decode qgemv", oSpan + ", " + none + ", " + none + ", " + none},
		{"attention alone", 1, [][]Launch{{attn, oProj, router}}, "l2_prefetch attn_decode qgemv gemv", oSpan + ", " + none + ", " + none + ", " + none},
		{"level 2", 2, [][]Launch{{attn, oProj}, {router, shared, experts, oProj}}, "l2_prefetch attn_decode qgemv gemv qgemv moe_gateup_qgemv qgemv",
			oSpan + ", " + rSpan + ", " + sSpan + ", " + none},
		{"the GEMV ending in a norm", 1, [][]Launch{{attn, oProjNorm}}, "l2_prefetch attn_decode qgemv_norm", oSpan + ", " + none + ", " + none + ", " + none},
		{"level 1, a float GEMV first", 1, [][]Launch{{attn}, {router, oProj}}, "attn_decode gemv qgemv", ""},
		{"no GEMV after", 2, [][]Launch{{oProj, attn}}, "qgemv attn_decode", ""},
	} {
		prefetchL2(c.steps, c.level)
		var got []string
		for _, ls := range c.steps {
			for _, l := range ls {
				got = append(got, l.Kernel)
				if l.Kernel == "l2_prefetch" {
					if s := l.String(); !strings.Contains(s, "("+c.spans+")") {
						t.Errorf("%s: %s, want (%s)", c.name, s, c.spans)
					}
				}
			}
		}
		if s := strings.Join(got, " "); s != c.want {
			t.Errorf("%s: %s, want %s", c.name, s, c.want)
		}
	}
	if _, err := L2Prefetch(L2Span{Ptr{BaseWeights, 8}, 100}); err == nil {
		t.Error("L2Prefetch of an unaligned pointer: no error")
	}
	if _, err := L2Prefetch(); err == nil {
		t.Error("L2Prefetch of nothing: no error")
	}
}
