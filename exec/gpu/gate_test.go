package gpu

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"lagc/cuda"
	"lagc/exec/cpu"
)

// TestSoftplusGateGPU: per-head and per-element gates, gate rows strided
// (inside a wider fused output) or not, gate values spread to +-25 so both
// sides of softplus's threshold at 20 are hit, in place or not.
func TestSoftplusGateGPU(t *testing.T) {
	k, s := gpu(t)
	t.Cleanup(func() { _ = s.Close() }) // an unclosed stream's pinned buffer panics at GC
	r := rand.New(rand.NewPCG(15, 16))
	for _, c := range []struct {
		T, nh, d int
		perHead  bool
		extra    int // gate row stride beyond G
		inPlace  bool
	}{{3, 5, 16, true, 0, false}, {3, 5, 16, false, 3, false}, {1, 72, 128, true, 0, true}, {7, 3, 37, false, 0, false}, {2, 4, 1, true, 0, false}, {130, 8, 128, true, 11, false}} {
		for _, dt := range DTypes {
			t.Run(fmt.Sprintf("T%d-nh%d-d%d-perhead%v-extra%d/%v", c.T, c.nh, c.d, c.perHead, c.extra, dt), func(t *testing.T) {
				G := c.nh * c.d
				if c.perHead {
					G = c.nh
				}
				ldg := G + c.extra
				n := c.T * c.nh * c.d
				x := roundTo(dt, randF32(r, n, 2))
				gbuf := roundTo(dt, randF32(r, c.T*ldg, 25))
				g := make([]float32, c.T*G)
				for tk := 0; tk < c.T; tk++ {
					copy(g[tk*G:(tk+1)*G], gbuf[tk*ldg:])
				}
				want := make([]float32, n)
				if err := cpu.SoftplusGate(want, x, g, c.T, c.nh, c.d, G); err != nil {
					t.Fatal(err)
				}
				dx := upload(t, k, s, dt, x)
				out := dx
				if !c.inPlace {
					out = alloc(t, k, int64(n*dt.Size()))
					poison(t, s, out, int64(n*dt.Size()))
				}
				if err := k.SoftplusGate(s, dt, out, dx, upload(t, k, s, dt, gbuf), c.T, c.nh, c.d, G, ldg); err != nil {
					t.Fatal(err)
				}
				checkClose(t, "softplus_gate", download(t, s, dt, out, n), want, tolFor(dt))
			})
		}
	}
}

func TestSoftplusGateArgs(t *testing.T) {
	k := &Kernels{}
	p := cuda.DevicePtr(256)
	for name, err := range map[string]error{
		"G neither": k.SoftplusGate(nil, cuda.F32, p, p, p, 1, 4, 8, 5, 0),
		"short ldg": k.SoftplusGate(nil, cuda.F32, p, p, p, 1, 4, 8, 4, 3),
		"null g":    k.SoftplusGate(nil, cuda.F32, p, p, 0, 1, 4, 8, 4, 0),
		"T 0":       k.SoftplusGate(nil, cuda.F32, p, p, p, 0, 4, 8, 4, 0),
		"dtype f64": k.SoftplusGate(nil, cuda.F64, p, p, p, 1, 4, 8, 4, 0),
	} {
		if err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
