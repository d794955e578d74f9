package gpu

import (
	"fmt"
	"math/rand/v2"
	"os"
	"testing"

	"lagc/cuda"
	"lagc/cuda/cudatest"
)

// hopperGPU is gpu for the Hopper-only kernels: it skips (fails with
// LAGC_REQUIRE_GPU=1) on other architectures.
func hopperGPU(t *testing.T) (*Kernels, *cuda.Stream) {
	t.Helper()
	k, s := gpu(t)
	if k.CC() < 90 {
		if os.Getenv(cudatest.EnvRequireGPU) == "1" {
			t.Fatalf("LAGC_REQUIRE_GPU=1 but %s is compute capability %d.%d, not Hopper", k.Dev.Props().Name, k.Dev.Props().Major, k.Dev.Props().Minor)
		}
		t.Skipf("%s is not a Hopper GPU", k.Dev.Props().Name)
	}
	return k, s
}

// TestMatMulHopperGPU: the TMA + wgmma GEMM (what MatMul runs for T > 8
// on Hopper) against the CPU reference over ragged M and N, K not a
// multiple of 64, every epilogue, both tile widths and output dtypes.
func TestMatMulHopperGPU(t *testing.T) {
	k, s := hopperGPU(t)
	r := rand.New(rand.NewPCG(11, 12))
	cases := []struct{ M, N, K int }{
		{9, 64, 64}, {100, 200, 72}, {128, 256, 128}, {300, 520, 1000}, {257, 130, 3072}, {2048, 384, 256},
	}
	for _, bn := range []int{128, 256} {
		for _, epi := range []string{"store", "accumulate", "swiglu"} {
			for _, c := range cases {
				for _, yt := range []cuda.DType{cuda.F32, cuda.BF16} {
					name := fmt.Sprintf("BN%d/%s/M%d_N%d_K%d/%v", bn, epi, c.M, c.N, c.K, yt)
					t.Run(name, func(t *testing.T) {
						a := MatMulArgs{T: c.M, K: c.K, N: c.N, XType: cuda.BF16, WType: cuda.BF16, YType: yt,
							SwiGLU: epi == "swiglu", Accumulate: epi == "accumulate", CC: k.CC(), HopperBN: bn}
						l, err := k.MatMulLaunch(a)
						if err == nil && l.Name[:len("gemm_wgmma")] != "gemm_wgmma" {
							t.Fatalf("MatMul chose %s, not the wgmma GEMM", l.Name)
						}
						got, want := mmRun(t, k, s, r, a)
						checkClose(t, name, got, want, tolFor(yt))
					})
				}
			}
		}
	}
}

// TestMoEExpertsHopperGPU: the grouped routed experts on the wgmma core
// against the CPU reference: skewed and same-expert routing (experts with
// 0, 1 and hundreds of rows), invalid ids, accumulate, both expert orders.
func TestMoEExpertsHopperGPU(t *testing.T) {
	k, s := hopperGPU(t)
	r := rand.New(rand.NewPCG(21, 22))
	cases := []moeCase{
		{T: 9, H: 128, I: 64, E: 8, k: 3, dist: "distinct"},
		{T: 64, H: 192, I: 128, E: 8, k: 3, dist: "skewed", acc: true},
		{T: 129, H: 128, I: 192, E: 256, k: 10, dist: "skewed"},
		{T: 200, H: 256, I: 128, E: 16, k: 4, dist: "same"},
		{T: 129, H: 128, I: 64, E: 256, k: 10, dist: "invalid", acc: true},
		{T: 600, H: 512, I: 256, E: 32, k: 4, dist: "distinct"},
	}
	for _, order := range []ExpertOrder{ExpertsByID, ExpertsByLoad} {
		for _, c := range cases {
			t.Run(fmt.Sprintf("order%d/%+v", order, c), func(t *testing.T) {
				d := moeGen(r, c, cuda.BF16, cuda.BF16, cuda.BF16)
				a := moeUpload(t, k, s, c, d, cuda.BF16, cuda.BF16, cuda.BF16, MoEGrouped, order, MMATile{})
				// One allocation: the gate stack, then the up stack.
				gu := append(append([]float32(nil), d.gate...), d.up...)
				a.Gate = upload(t, k, s, cuda.BF16, gu)
				a.Up = a.Gate.Add(2 * int64(c.E*c.I*c.H))
				a.CC, a.SMs = k.CC(), k.SMs()
				ls, err := k.MoELaunches(a)
				if err != nil {
					t.Fatal(err)
				}
				if !hasKernel(ls, "gemm_wgmma") {
					t.Fatalf("the grouped path did not choose the wgmma core")
				}
				ws, err := MoEWorkspaceBytes(a)
				if err != nil {
					t.Fatal(err)
				}
				a.Workspace = alloc(t, k, ws)
				poison(t, s, a.Workspace, ws)
				if err := k.MoEExperts(s, a); err != nil {
					t.Fatal(err)
				}
				got := download(t, s, cuda.BF16, a.Out, c.T*c.H)
				checkClose(t, "moe", got, moeRef(t, c, d), tolFor(cuda.BF16))
			})
		}
	}
}

func hasKernel(ls []KernelLaunch, prefix string) bool {
	for _, l := range ls {
		if len(l.Name) >= len(prefix) && l.Name[:len(prefix)] == prefix {
			return true
		}
	}
	return false
}

// BenchmarkGEMMHopper: Laguna-S-2.1 prefill GEMMs (T = 2048) on the wgmma
// core at both tile widths and on mma.sync (CC 0), for comparison.
func BenchmarkGEMMHopper(b *testing.B) {
	m := newMMBench(b)
	for _, c := range []struct {
		name    string
		M, N, K int
		swiglu  bool
	}{
		{"qkvg", 2048, 11336, 3072, false},
		{"o_proj", 2048, 3072, 9216, false},
		{"dense_gate_up", 2048, 12288, 3072, true},
		{"dense_down", 2048, 3072, 12288, false},
		{"shared_gate_up", 2048, 1024, 3072, true},
		{"shared_down", 2048, 3072, 1024, false},
	} {
		for _, v := range []struct {
			name   string
			cc, bn int
		}{{"mma", 0, 0}, {"wgmma-auto", 90, 0}, {"wgmma-128", 90, 128}, {"wgmma-256", 90, 256}} {
			b.Run(fmt.Sprintf("%s/%s", c.name, v.name), func(b *testing.B) {
				rows := c.N
				if c.swiglu {
					rows = 2 * c.N
				}
				a := MatMulArgs{T: c.M, K: c.K, N: c.N, XType: cuda.BF16, WType: cuda.BF16, YType: cuda.BF16, SwiGLU: c.swiglu,
					CC: v.cc, HopperBN: v.bn, X: m.rand(c.M * c.K), W: m.rand(rows * c.K), Y: m.rand(c.M * c.N)}
				bytes := 2 * float64(rows*c.K+c.M*(c.K+c.N))
				m.run(b, bytes, 2*float64(c.M)*float64(rows)*float64(c.K), func() error { return m.k.MatMul(m.s, a) })
			})
		}
	}
}
