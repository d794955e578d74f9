package lower

import (
	"slices"
	"strings"
	"testing"

	"lagc/ir"
)

func TestBatchBuckets(t *testing.T) {
	for _, tc := range []struct {
		seqs, chunk int
		want        []int
	}{
		{1, 2048, []int{1}},
		{8, 2048, []int{1, 2, 4, 8}},
		{12, 2048, []int{1, 2, 4, 8, 16}},
		{64, 32, []int{1, 2, 4, 8, 16, 32}},
		{5, 4, []int{1, 2, 4}},
	} {
		if got := BatchBuckets(tc.seqs, tc.chunk); !slices.Equal(got, tc.want) {
			t.Errorf("BatchBuckets(%d, %d) = %v, want %v", tc.seqs, tc.chunk, got, tc.want)
		}
	}
}

// TestAtBatchKernels: a batched decode step at every bucket runs decode
// attention over its rows' slots, and by default only the row-invariant
// GEMV paths (never a GEMM, whose rounding differs); with BatchGEMM the
// buckets above GEMVMaxRows run GEMMs.
func TestAtBatchKernels(t *testing.T) {
	gemm := []string{"gemm_wgmma", "gemm_wgmma_q", "gemm_bf16", "gemm_simple", "moe_gateup_mma", "moe_down_mma"}
	prefillOnly := []string{"attn_prefill", "attn_prefill_tc", "kv_append", "kv_compact_ring"}
	for _, batchGEMM := range []bool{false, true} {
		p, err := Lower(tinyGraph(t), Options{DType: ir.BF16, MaxContext: 256, Chunk: 128, Seqs: 40, BatchGEMM: batchGEMM})
		if err != nil {
			t.Fatal(err)
		}
		if got := p.Bucket(33); got != 64 {
			t.Errorf("Bucket(33) = %d, want 64", got)
		}
		for _, b := range BatchBuckets(40, 128) {
			ls, err := p.AtBatch(b)
			if err != nil {
				t.Fatalf("AtBatch(%d): %v", b, err)
			}
			sawGEMM, attn := false, 0
			for _, step := range ls {
				for _, l := range step {
					if slices.Contains(prefillOnly, l.Kernel) {
						t.Errorf("batch %d (gemm %v): %s in a batched decode step", b, batchGEMM, l.Kernel)
					}
					sawGEMM = sawGEMM || slices.Contains(gemm, l.Kernel)
					if l.Kernel == "attn_decode" {
						attn++
						if !strings.Contains(l.String(), "seq+0") || l.Grid[2]%b != 0 {
							t.Errorf("batch %d: attention not over %d rows' slots: %s", b, b, l)
						}
						// A split one counts its blocks per row in BaseSync,
						// sized for the largest bucket.
						if nh, nkv := int(l.Args[0].Int), int(l.Args[1].Int); l.Grid[0] > 1 &&
							(!strings.HasSuffix(l.String(), "sync+0, null, null"+noNormRoPE) || p.Prefill.Sync < DecodeCounters(64, nh, nkv)) {
							t.Errorf("batch %d: counters of %d bytes for %s", b, p.Prefill.Sync, l)
						}
					}
				}
			}
			if attn == 0 {
				t.Errorf("batch %d: no decode attention", b)
			}
			if want := batchGEMM && b > GEMVMaxRows; sawGEMM != want {
				t.Errorf("batch %d (gemm %v): GEMM launched %v, want %v", b, batchGEMM, sawGEMM, want)
			}
		}
		if _, err := p.AtBatch(0); err == nil {
			t.Error("AtBatch(0) succeeded")
		}
		if _, err := p.AtBatch(129); err == nil {
			t.Error("AtBatch past the chunk succeeded")
		}
	}
	if _, err := Lower(tinyGraph(t), Options{MaxContext: 16, Seqs: MaxSeqs + 1}); err == nil {
		t.Errorf("%d sequence slots accepted", MaxSeqs+1)
	}
}

// TestDeviceBytes: a plan's device bytes count the weights, each sequence
// slot's KV caches, the ropes, the bf16 weight copies and the larger
// schedule's arena, workspace and routes, each aligned.
func TestDeviceBytes(t *testing.T) {
	p := &Plan{WeightBytes: 1000, KVBytes: 300, Seqs: 3, RopeBytes: 10, ShadowBytes: 4096,
		Decode:  &Schedule{Arena: 5000, Workspace: 1, Routes: 700},
		Prefill: &Schedule{Arena: 7000, Workspace: 9000, Routes: 2}}
	want := align(1000) + 3*align(300) + align(10) + align(4096) + align(7000) + align(9000) + align(700)
	if got := p.DeviceBytes(); got != want {
		t.Fatalf("DeviceBytes %d, want %d", got, want)
	}
}
