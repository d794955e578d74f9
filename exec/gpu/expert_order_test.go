package gpu

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"lagc/cuda"
	"lagc/lower"
)

// TestExpertOrderSkewedGPU is the expert-order A/B: the grouped
// MoE at Laguna-S-2.1 prefill shapes (T=2048, E=256, top-10, H=3072,
// I=1024, bf16) on skewed routing, experts visited by id and by descending
// load. The outputs must be bitwise identical; the times are logged (a
// benchmark figure, never asserted).
func TestExpertOrderSkewedGPU(t *testing.T) {
	k, s := gpu(t)
	const T, E, K, H, I = 2048, 256, 10, 3072, 1024
	fill := func(n int64, seed uint32, scale float32) cuda.DevicePtr {
		p := alloc(t, k, 2*n)
		if err := k.on(s).one(lower.FillHash("bf16", n, seed, 0, scale, ptr(p)), nil); err != nil {
			t.Fatal(err)
		}
		return p
	}
	r := rand.New(rand.NewPCG(11, 12))
	ids := moeIDs(r, "skewed", T, E, K)
	w := make([]float32, T*K)
	for i := range w {
		w[i] = 0.05 + 0.1*r.Float32()
	}
	base := MoEArgs{T: T, H: H, I: I, E: E, TopK: K, XType: cuda.BF16, WType: cuda.BF16, OutType: cuda.BF16,
		Path: MoEGrouped,
		X:    fill(T*H, 1, 1), Gate: fill(E*I*H, 2, 0.02), Up: fill(E*I*H, 3, 0.02), Down: fill(E*H*I, 4, 0.03),
		IDs: uploadI32(t, k, s, ids), Weights: upload(t, k, s, cuda.F32, w)}
	counts := make([]int, E)
	for _, id := range ids {
		counts[id]++
	}
	slices.Sort(counts)
	t.Logf("skewed routing: busiest experts take %v of %d routes; %d experts unused", counts[E-4:], T*K, slices.Index(counts, 1))

	run := func(order ExpertOrder, band int) ([]byte, time.Duration) {
		a := base
		a.Order, a.Band = order, band
		a.Out = alloc(t, k, int64(T*H*2))
		wsBytes, err := MoEWorkspaceBytes(a)
		if err != nil {
			t.Fatal(err)
		}
		a.Workspace = alloc(t, k, wsBytes)
		e0, err := k.Dev.NewEvent()
		if err != nil {
			t.Fatal(err)
		}
		e1, err := k.Dev.NewEvent()
		if err != nil {
			t.Fatal(err)
		}
		var times []time.Duration
		for i := 0; i < 7; i++ { // the first run warms up (compiles)
			if err := s.Record(e0); err != nil {
				t.Fatal(err)
			}
			if err := k.MoEExperts(s, a); err != nil {
				t.Fatal(err)
			}
			if err := s.Record(e1); err != nil {
				t.Fatal(err)
			}
			if err := s.Synchronize(); err != nil {
				t.Fatal(err)
			}
			d, err := cuda.Elapsed(e0, e1)
			if err != nil {
				t.Fatal(err)
			}
			if i > 0 {
				times = append(times, d)
			}
		}
		out := make([]byte, T*H*2)
		if err := s.CopyDtoH(out, a.Out); err != nil {
			t.Fatal(err)
		}
		slices.Sort(times)
		return out, times[len(times)/2]
	}
	band := 128 // what the expert-order pass records for S-2.1's bf16 stacks
	byID, tID := run(ExpertsByID, 0)
	byLoad, tLoad := run(ExpertsByLoad, 0)
	banded, tBand := run(ExpertsByLoad, band)
	if !bytes.Equal(byID, byLoad) || !bytes.Equal(byID, banded) {
		t.Fatal("expert order or N-banding changed the result")
	}
	t.Logf("grouped MoE T=%d E=%d k=%d H=%d I=%d bf16, skewed (median of 6): by id %v; by descending load %v (%.3f); descending + band %d %v (%.3f)",
		T, E, K, H, I, tID, tLoad, float64(tLoad)/float64(tID), band, tBand, float64(tBand)/float64(tID))
}
