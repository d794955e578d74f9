package lower

import (
	"strings"
	"testing"

	"lagc/quant"
)

// TestPrefetchL2: before a decode attention (and the qk_norm_rope right
// before it) goes an l2_prefetch of exactly the weight rows of the qgemv
// after it; none where a float GEMV comes first or no GEMV follows.
func TestPrefetchL2(t *testing.T) {
	g, err := QGEMV(QGEMVArgs{T: 1, K: 9216, N: 3072, XQ: Ptr{BaseWorkspace, 0}, W: Ptr{BaseWeights, 4096}, WType: quant.Q8_0,
		WRows: 3072, Y: Ptr{BaseArena, 0}, YType: "bf16", Accumulate: true})
	if err != nil {
		t.Fatal(err)
	}
	n, err := RMSNormQ8X("bf16", "bf16", Ptr{BaseArena, 1 << 20}, Ptr{BaseArena, 0}, Ptr{BaseWeights, 1 << 30}, Ptr{BaseWorkspace, 1 << 20}, 1, 3072, 1e-6)
	if err != nil {
		t.Fatal(err)
	}
	gn, err := QGEMVNorm(g, n, Ptr{BaseSync, 0})
	if err != nil {
		t.Fatal(err)
	}
	attn := Launch{Kernel: "attn_decode"}
	rope := Launch{Kernel: "qk_norm_rope"}
	other := Launch{Kernel: "gemv"}
	rb, _ := quant.Q8_0.RowBytes(9216)
	for _, c := range []struct {
		name  string
		steps [][]Launch
		want  string // kernels after, joined
	}{
		{"rope and attention", [][]Launch{{rope}, {attn}, {g}}, "l2_prefetch qk_norm_rope attn_decode qgemv"},
		{"attention alone", [][]Launch{{attn, g}}, "l2_prefetch attn_decode qgemv"},
		{"the GEMV ending in a norm", [][]Launch{{attn, gn}}, "l2_prefetch attn_decode qgemv_norm"},
		{"a float GEMV first", [][]Launch{{attn}, {other, g}}, "attn_decode gemv qgemv"},
		{"no GEMV after", [][]Launch{{g, attn}}, "qgemv attn_decode"},
	} {
		prefetchL2(c.steps)
		var got []string
		for _, ls := range c.steps {
			for _, l := range ls {
				got = append(got, l.Kernel)
				if l.Kernel == "l2_prefetch" && (l.Args[0].Ptr() != (Ptr{BaseWeights, 4096}) || l.Args[1].Int != 3072*rb) {
					t.Errorf("%s: %s, want weights+4096 and %d bytes", c.name, l, 3072*rb)
				}
			}
		}
		if s := strings.Join(got, " "); s != c.want {
			t.Errorf("%s: %s, want %s", c.name, s, c.want)
		}
	}
	if _, err := L2Prefetch(Ptr{BaseWeights, 8}, 100); err == nil {
		t.Error("L2Prefetch of an unaligned pointer: no error")
	}
}
