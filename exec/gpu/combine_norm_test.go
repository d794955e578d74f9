package gpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"lagc/cuda"
	"lagc/lower"
)

// TestMoECombineNormGPU: the fused combine and norm (what fuseCombineNorm
// makes of a grouped MoE's moe_combine and the rms_norm of its output)
// writes the rows moe_combine writes and the output rms_norm_block then
// writes, bit for bit, and the rows are the routes' weighted sums: accumulating onto the residual or not, routes
// missing (pos -1), bf16 and f32 rows, an f32 or bf16 norm output, rows
// of 1024 to 8192 (blocks of 128 to 1024 threads, and 160 where the chunks
// do not fill the warps).
func TestMoECombineNormGPU(t *testing.T) {
	k, s := gpu(t)
	r := rand.New(rand.NewPCG(61, 62))
	const eps = 1e-6
	type tc struct {
		ydt, odt cuda.DType
		T, K, H  int
		acc      bool
	}
	cases := []tc{
		{cuda.BF16, cuda.BF16, 37, 11, 3072, true},
		{cuda.BF16, cuda.BF16, 37, 11, 3072, false},
		{cuda.BF16, cuda.BF16, 1, 11, 3072, true},
		{cuda.BF16, cuda.BF16, 5, 9, 2048, true},
		{cuda.BF16, cuda.BF16, 3, 3, 1024, true},
		{cuda.BF16, cuda.BF16, 4, 2, 1032, true},
		{cuda.BF16, cuda.BF16, 2, 11, 8192, true},
		{cuda.F32, cuda.BF16, 7, 11, 3072, true},
		{cuda.F32, cuda.F32, 3, 4, 1032, false},
		{cuda.BF16, cuda.F32, 9, 11, 3072, true},
	}
	for _, c := range cases {
		name := fmt.Sprintf("%v-to-%v-T%d-k%d-H%d-acc%v", c.ydt, c.odt, c.T, c.K, c.H, c.acc)
		t.Run(name, func(t *testing.T) {
			R := c.T * c.K
			ysv := roundTo(cuda.BF16, randF32(r, R*c.H, 2))
			ys := upload(t, k, s, cuda.BF16, ysv)
			wts := make([]float32, R)
			for i := range wts {
				wts[i] = r.Float32()
			}
			weights := upload(t, k, s, cuda.F32, wts)
			pos := make([]int32, R) // the routes' rows in ys, shuffled; some missing
			for i, p := range r.Perm(R) {
				pos[i] = int32(p)
				if r.IntN(7) == 0 {
					pos[i] = -1
				}
			}
			posP := uploadI32(t, k, s, pos)
			resid := roundTo(c.ydt, randF32(r, c.T*c.H, 3))
			w := upload(t, k, s, cuda.F32, normWeights(r, c.H))
			yb, ob := int64(c.T*c.H*c.ydt.Size()), int64(c.T*c.H*c.odt.Size())
			// run makes fresh outputs: the residual rows, and the norm's
			// output filled with v (a byte left unwritten differs).
			run := func(fused bool, v byte) (out, nout cuda.DevicePtr) {
				out = upload(t, k, s, c.ydt, resid)
				nout = alloc(t, k, ob)
				if err := s.Memset8(nout, v, ob); err != nil {
					t.Fatal(err)
				}
				q := k.on(s)
				var err error
				if fused {
					err = q.one(lower.MoECombineNorm(c.ydt.String(), c.odt.String(), c.T, c.K, c.H, ptr(weights), ptr(posP), ptr(ys), ptr(out), c.acc, ptr(w), ptr(nout), eps))
				} else {
					err = q.one(lower.MoECombine(c.ydt.String(), c.T, c.K, c.H, ptr(weights), ptr(posP), ptr(ys), ptr(out), c.acc), nil)
					if err == nil {
						err = q.one(lower.RMSNorm(c.ydt.String(), c.odt.String(), ptr(nout), ptr(out), ptr(w), c.T, c.H, eps))
					}
				}
				if err != nil {
					t.Fatal(err)
				}
				return out, nout
			}
			gOut, gN := run(true, 0xFF)
			wOut, wN := run(false, 0x00)
			if i := firstByteDiff(downloadBytes(t, s, gOut, yb), downloadBytes(t, s, wOut, yb)); i >= 0 {
				t.Fatalf("rows: byte %d differs from moe_combine's", i)
			}
			if i := firstByteDiff(downloadBytes(t, s, gN, ob), downloadBytes(t, s, wN, ob)); i >= 0 {
				t.Fatalf("norm: byte %d differs from moe_combine then rms_norm", i)
			}
			// The rows against a float64 sum of the routes (each slot
			// once, with its weight): within the row type's rounding.
			got := download(t, s, c.ydt, gOut, c.T*c.H)
			same := true
			for i := range got {
				same = same && got[i] == resid[i]
			}
			if same {
				t.Error("the rows are the residual unchanged")
			}
			for tok := 0; tok < c.T; tok++ {
				for h := 0; h < c.H; h++ {
					want, mag := 0.0, 0.0
					if c.acc {
						want, mag = float64(resid[tok*c.H+h]), math.Abs(float64(resid[tok*c.H+h]))
					}
					for j := 0; j < c.K; j++ {
						if p := pos[tok*c.K+j]; p >= 0 {
							v := float64(wts[tok*c.K+j]) * float64(ysv[int(p)*c.H+h])
							want, mag = want+v, mag+math.Abs(v)
						}
					}
					if d := math.Abs(float64(got[tok*c.H+h]) - want); d > mag/256+1e-6 {
						t.Fatalf("row %d [%d] = %g, want %g (the routes' weighted sum)", tok, h, got[tok*c.H+h], want)
					}
				}
			}
		})
	}
}

// BenchmarkMoECombineNorm: a bf16 S-2.1 MoE layer's end at 2048 tokens
// (11 routes a token with the shared expert, rows of 3072, accumulating
// onto the residual), graph-replayed: moe_combine, the next layer's
// rms_norm, the two, and the fused launch.
func BenchmarkMoECombineNorm(b *testing.B) {
	k, s := gpu(b)
	r := rand.New(rand.NewPCG(63, 64))
	const T, K, H, reps = 2048, 11, 3072, 20
	R := T * K
	ys := upload(b, k, s, cuda.BF16, randF32(r, R*H, 2))
	wts := make([]float32, R)
	pos := make([]int32, R)
	for i, p := range r.Perm(R) {
		wts[i], pos[i] = r.Float32(), int32(p)
	}
	weights, posP := upload(b, k, s, cuda.F32, wts), uploadI32(b, k, s, pos)
	out := upload(b, k, s, cuda.BF16, randF32(r, T*H, 3))
	nout := alloc(b, k, int64(T*H*2))
	w := upload(b, k, s, cuda.F32, normWeights(r, H))
	comb := lower.MoECombine("bf16", T, K, H, ptr(weights), ptr(posP), ptr(ys), ptr(out), true)
	norm, err := lower.RMSNorm("bf16", "bf16", ptr(nout), ptr(out), ptr(w), T, H, 1e-6)
	if err != nil {
		b.Fatal(err)
	}
	fused, err := lower.MoECombineNorm("bf16", "bf16", T, K, H, ptr(weights), ptr(posP), ptr(ys), ptr(out), true, ptr(w), ptr(nout), 1e-6)
	if err != nil {
		b.Fatal(err)
	}
	for _, v := range []struct {
		name string
		ls   []lower.Launch
	}{{"combine", []lower.Launch{comb}}, {"norm", []lower.Launch{norm}}, {"combine+norm", []lower.Launch{comb, norm}}, {"fused", []lower.Launch{fused}}} {
		b.Run(v.name, func(b *testing.B) {
			run := func(int) error { return k.on(s).all(v.ls, nil) }
			b.ReportMetric(graphTime(b, s, reps, run).Seconds()*1e6/reps, "us")
		})
	}
}
