package gpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"lagc/cuda"
	"lagc/exec/cpu"
	"lagc/lower"
)

// argmaxCase is one ArgMax shape; special rows hold ties and NaNs.
type argmaxCase struct {
	T, V    int
	special bool
}

// argmaxCases cover S-2.1's vocabulary (an exact number of 1024-element
// chunks) at decode, batched-decode and prefill row counts, lengths off
// the chunk (one either side, a prime, shorter than a block, 1), and rows
// that split into many parts or one.
var argmaxCases = []argmaxCase{
	{1, 100352, false}, {1, 100352, true}, {3, 100000, true}, {8, 100352, true}, {100, 5003, true},
	{1, 1023, false}, {1, 1025, true}, {3, 37, false}, {2, 1, false}, {5, 5000, false}, {300, 1000, true},
}

// argmaxSpecial writes ties and NaNs into the first rows of x [T, V]:
// row 0 all equal (index 0 wins); row 1 two equal maxima in different
// parts of the row (the first wins); row 2 two NaNs (the first wins); row 3
// its maximum last; row 4 -0 before +0 as the only non-negative values
// (they tie: -0 wins); row 5 two maxima next to each other.
func argmaxSpecial(x []float32, T, V int) {
	row := func(r int) []float32 { return x[r*V : (r+1)*V] }
	if T > 0 {
		for i := range row(0) {
			row(0)[i] = 1
		}
	}
	a, b := V/7, V-1-V/5 // far apart: other blocks when the row splits
	if T > 1 && a < b {
		row(1)[b], row(1)[a] = 50, 50
	}
	if T > 2 && a < b {
		nan := float32(math.NaN())
		row(2)[b], row(2)[a] = nan, nan
	}
	if T > 3 {
		row(3)[V-1] = 60
	}
	if T > 4 && V > 2 {
		for i := range row(4) {
			row(4)[i] = -1 - float32(i%5)
		}
		row(4)[V/3], row(4)[V-1] = float32(math.Copysign(0, -1)), 0
	}
	if T > 5 && V > 2 {
		row(5)[V/2], row(5)[V/2+1] = 70, 70
	}
}

// TestArgMaxGPU: the device argmax against cpu.ArgMax over argmaxCases.
// bf16 rounding makes ties common too.
func TestArgMaxGPU(t *testing.T) {
	k, s := gpu(t)
	r := rand.New(rand.NewPCG(23, 24))
	for _, c := range argmaxCases {
		for _, dt := range DTypes {
			t.Run(fmt.Sprintf("T%d-V%d-special%v-parts%d/%v", c.T, c.V, c.special, lowerArgMaxParts(k, c.T, c.V), dt), func(t *testing.T) {
				x := roundTo(dt, randF32(r, c.T*c.V, 10))
				if c.special {
					argmaxSpecial(x, c.T, c.V)
				}
				want := make([]int32, c.T)
				if err := cpu.ArgMax(want, x, c.T, c.V); err != nil {
					t.Fatal(err)
				}
				got := runArgMax(t, k, s, dt, upload(t, k, s, dt, x), c.T, c.V)
				if !slices.Equal(got, want) {
					t.Fatalf("argmax %v, reference %v", got, want)
				}
			})
		}
	}
}

// runArgMax runs ArgMax on x [T, V] with its workspace, poisoned first.
func runArgMax(t *testing.T, k *Kernels, s *cuda.Stream, dt cuda.DType, x cuda.DevicePtr, T, V int) []int32 {
	t.Helper()
	out := alloc(t, k, int64(4*T))
	poison(t, s, out, int64(4*T))
	var ws cuda.DevicePtr
	if n := k.ArgMaxWorkspace(T, V); n > 0 {
		ws = alloc(t, k, n)
		poison(t, s, ws, n)
	}
	if err := k.ArgMax(s, dt, out, x, ws, T, V); err != nil {
		t.Fatal(err)
	}
	got := make([]int32, T)
	if err := cuda.Download(s, got, out); err != nil {
		t.Fatal(err)
	}
	return got
}

// TestArgMaxGraphGPU: ArgMax captured in a CUDA graph and replayed over
// new logits each time gives each time's answer (nothing carried from one
// replay to the next), at a split of many parts.
func TestArgMaxGraphGPU(t *testing.T) {
	k, s := gpu(t)
	const T, V = 2, 100352
	if lowerArgMaxParts(k, T, V) < 2 {
		t.Fatalf("%d rows of %d: one part, the test wants a split", T, V)
	}
	x := alloc(t, k, 4*T*V)
	out := alloc(t, k, 4*T)
	ws := alloc(t, k, k.ArgMaxWorkspace(T, V))
	if err := k.ArgMax(s, cuda.F32, out, x, ws, T, V); err != nil { // compile before capture
		t.Fatal(err)
	}
	g, err := s.Capture(func() error { return k.ArgMax(s, cuda.F32, out, x, ws, T, V) })
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	ex, err := g.Instantiate()
	if err != nil {
		t.Fatal(err)
	}
	defer ex.Close()
	r := rand.New(rand.NewPCG(25, 26))
	for rep, peak := range []int{V - 1, 5, 70000, 5} {
		v := randF32(r, T*V, 1)
		v[peak], v[V+V-1-peak] = 2, 2
		if err := cuda.Upload(s, x, v); err != nil {
			t.Fatal(err)
		}
		if err := ex.Launch(s); err != nil {
			t.Fatal(err)
		}
		got := make([]int32, T)
		if err := cuda.Download(s, got, out); err != nil {
			t.Fatal(err)
		}
		if want := []int32{int32(peak), int32(V - 1 - peak)}; !slices.Equal(got, want) {
			t.Fatalf("replay %d: argmax %v, want %v", rep, got, want)
		}
	}
}

// lowerArgMaxParts is the split ArgMax makes on k's device.
func lowerArgMaxParts(k *Kernels, T, V int) int { return lower.ArgMaxParts(T, V, k.SMs()) }

func TestArgMaxArgs(t *testing.T) {
	k := &Kernels{}
	p := cuda.DevicePtr(256)
	for name, err := range map[string]error{
		"V 0":          k.ArgMax(nil, cuda.F32, p, p, p, 1, 0),
		"null out":     k.ArgMax(nil, cuda.F32, 0, p, p, 1, 5),
		"dtype":        k.ArgMax(nil, cuda.I32, p, p, p, 1, 5),
		"no workspace": k.ArgMax(nil, cuda.F32, p, p, 0, 1, 100352),
	} {
		if err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
