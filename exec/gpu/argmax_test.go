package gpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"lagc/cuda"
	"lagc/exec/cpu"
)

// TestArgMaxGPU: the device argmax against cpu.ArgMax over S-2.1's
// vocabulary and odd sizes, with rows of ties (first wins) and NaNs (the
// first NaN wins). bf16 rounding makes ties common too.
func TestArgMaxGPU(t *testing.T) {
	k, s := gpu(t)
	t.Cleanup(func() { _ = s.Close() }) // an unclosed stream's pinned buffer panics at GC
	r := rand.New(rand.NewPCG(23, 24))
	for _, c := range []struct {
		T, V    int
		special bool
	}{{1, 100352, false}, {3, 37, false}, {2, 1, false}, {5, 5000, false}, {4, 1000, true}} {
		for _, dt := range DTypes {
			t.Run(fmt.Sprintf("T%d-V%d-special%v/%v", c.T, c.V, c.special, dt), func(t *testing.T) {
				x := roundTo(dt, randF32(r, c.T*c.V, 10))
				if c.special {
					for i := 0; i < c.V; i++ {
						x[i] = 1 // row 0: all tied
					}
					x[c.V+700], x[c.V+300] = 50, 50 // row 1: two maxima
					nan := float32(math.NaN())
					x[2*c.V+900], x[2*c.V+400] = nan, nan // row 2: two NaNs
					x[3*c.V+c.V-1] = 60                   // row 3: the last element
				}
				want := make([]int32, c.T)
				if err := cpu.ArgMax(want, x, c.T, c.V); err != nil {
					t.Fatal(err)
				}
				out := alloc(t, k, int64(4*c.T))
				poison(t, s, out, int64(4*c.T))
				if err := k.ArgMax(s, dt, out, upload(t, k, s, dt, x), c.T, c.V); err != nil {
					t.Fatal(err)
				}
				got := make([]int32, c.T)
				if err := cuda.Download(s, got, out); err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got, want) {
					t.Fatalf("argmax %v, reference %v", got, want)
				}
			})
		}
	}
}

func TestArgMaxArgs(t *testing.T) {
	k := &Kernels{}
	p := cuda.DevicePtr(256)
	for name, err := range map[string]error{
		"V 0":      k.ArgMax(nil, cuda.F32, p, p, 1, 0),
		"null out": k.ArgMax(nil, cuda.F32, 0, p, 1, 5),
		"dtype":    k.ArgMax(nil, cuda.I32, p, p, 1, 5),
	} {
		if err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
