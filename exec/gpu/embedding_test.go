package gpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"lagc/cuda"
	"lagc/exec/cpu"
)

func TestEmbeddingGPU(t *testing.T) {
	k, s := gpu(t)
	t.Cleanup(func() { _ = s.Close() }) // an unclosed stream's pinned buffer panics at GC
	r := rand.New(rand.NewPCG(1, 2))
	for _, c := range []struct{ V, H, T int }{{50, 37, 5}, {1000, 3072, 3}, {7, 64, 1}, {300, 100, 130}} {
		for _, dt := range DTypes {
			t.Run(fmt.Sprintf("V%d-H%d-T%d/%v", c.V, c.H, c.T, dt), func(t *testing.T) {
				table := roundTo(dt, randF32(r, c.V*c.H, 1))
				ids := make([]int32, c.T)
				for i := range ids {
					ids[i] = int32(r.IntN(c.V))
				}
				ids[0] = int32(c.V - 1)
				want := make([]float32, c.T*c.H)
				if err := cpu.Embedding(want, ids, table, c.V, c.H); err != nil {
					t.Fatal(err)
				}
				out := alloc(t, k, int64(c.T*c.H*dt.Size()))
				poison(t, s, out, int64(c.T*c.H*dt.Size()))
				if err := k.Embedding(s, dt, out, uploadI32(t, k, s, ids), upload(t, k, s, dt, table), c.T, c.V, c.H); err != nil {
					t.Fatal(err)
				}
				checkClose(t, "embedding", download(t, s, dt, out, c.T*c.H), want, 0) // a copy: exact
			})
		}
	}
}

// TestEmbeddingBadTokenGPU: ids outside the vocabulary give NaN rows, not
// out-of-bounds reads; the good row next to them is intact.
func TestEmbeddingBadTokenGPU(t *testing.T) {
	k, s := gpu(t)
	t.Cleanup(func() { _ = s.Close() }) // an unclosed stream's pinned buffer panics at GC
	const V, H = 10, 33
	table := randF32(rand.New(rand.NewPCG(3, 4)), V*H, 1)
	ids := []int32{-1, 4, V}
	out := alloc(t, k, int64(3*H*4))
	if err := k.Embedding(s, cuda.F32, out, uploadI32(t, k, s, ids), upload(t, k, s, cuda.F32, table), 3, V, H); err != nil {
		t.Fatal(err)
	}
	got := download(t, s, cuda.F32, out, 3*H)
	for c := 0; c < H; c++ {
		if !math.IsNaN(float64(got[c])) || !math.IsNaN(float64(got[2*H+c])) {
			t.Fatalf("channel %d: bad tokens gave %v, %v; want NaN", c, got[c], got[2*H+c])
		}
		if got[H+c] != table[4*H+c] {
			t.Fatalf("channel %d of token 4: %v want %v", c, got[H+c], table[4*H+c])
		}
	}
}

func TestEmbeddingArgs(t *testing.T) {
	k := &Kernels{}
	p := cuda.DevicePtr(256)
	for name, err := range map[string]error{
		"T 0":       k.Embedding(nil, cuda.F32, p, p, p, 0, 10, 4),
		"T 70000":   k.Embedding(nil, cuda.F32, p, p, p, 70000, 10, 4),
		"null":      k.Embedding(nil, cuda.F32, p, 0, p, 1, 10, 4),
		"dtype i32": k.Embedding(nil, cuda.I32, p, p, p, 1, 10, 4),
	} {
		if err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
