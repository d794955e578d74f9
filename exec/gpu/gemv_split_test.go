package gpu

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"lagc/lower"
)

// TestGEMVSplitGPU: the float GEMV sending its columns to several outputs
// (gemv_split, a float model's batched q, k, v and gate in one launch,
// by default; Options.DisableFloatSplitGEMV) writes each output's rows bit for bit as gemv
// over the whole weight writes those columns, f32 and bf16, one to four
// outputs, one to eight rows (S-2.1's q, k, v, gate among them), and
// stores nothing past its outputs.
func TestGEMVSplitGPU(t *testing.T) {
	k, s := gpu(t)
	r := rand.New(rand.NewPCG(81, 82))
	cases := []struct {
		T, K int
		outs []int
	}{
		{2, 3072, []int{9216, 1024, 1024, 72}}, // S-2.1's sliding layers, two sequences
		{8, 3072, []int{6144, 1024, 1024, 48}},
		{5, 2048, []int{6144, 1024, 1024, 48}},
		{1, 512, []int{37, 5, 100}},
		{3, 100, []int{64, 64}}, // K not a multiple of 8: the scalar path
		{7, 1024, []int{33}},
	}
	for _, dt := range DTypes {
		for _, c := range cases {
			N := 0
			for _, n := range c.outs {
				N += n
			}
			t.Run(fmt.Sprintf("%v/T%d_K%d_N%v", dt, c.T, c.K, c.outs), func(t *testing.T) {
				w := upload(t, k, s, dt, roundTo(dt, randF32(r, N*c.K, 0.05)))
				x := upload(t, k, s, dt, roundTo(dt, randF32(r, c.T*c.K, 1)))
				es := dt.Size()
				whole := alloc(t, k, int64(c.T*N*es))
				a := lower.MatMulArgs{T: c.T, K: c.K, N: N, X: ptr(x), W: ptr(w), Y: ptr(whole), XType: dt.String(), WType: dt.String(),
					YType: dt.String(), SMs: k.SMs()}
				ref, err := lower.MatMul(a)
				if err != nil {
					t.Fatal(err)
				}
				if ref.Kernel != "gemv" {
					t.Fatalf("the reference is %s, not gemv", ref.NameExpr())
				}
				outs, bufs := guardedSplitOuts(t, k, s, c.outs, c.T, es)
				a.Y = lower.Ptr{}
				split, err := lower.GEMVSplitLaunch(a, outs)
				if err != nil {
					t.Fatal(err)
				}
				if split.Grid != ref.Grid || split.Args[2] != ref.Args[2] {
					t.Fatalf("split launch %s is not gemv's shape %s", split, ref)
				}
				if err := k.on(s).all([]lower.Launch{ref, split}, nil); err != nil {
					t.Fatal(err)
				}
				checkSplitOutputs(t, s, "gemv", whole, bufs, c.outs, c.T, N, es)
			})
		}
	}
}
