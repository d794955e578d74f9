package gpu

import (
	"fmt"
	"testing"

	"lagc/cuda"
	"lagc/internal/fixture"
	"lagc/lower"
)

// TestAttentionDecodeStagesGPU: the decode attention's tile ring
// (lower.DecodeStages: tiles loaded by cp.async ahead of the one scored)
// gives the synchronous loop's bits, for a decode step after a history
// (KVAppend then the attention, and the attention appending itself),
// rings of 2 to 8 tiles against none, over shapes where blocks walk many
// tiles: Laguna-S-2.1's full layer (33 splits, the auto choice, and one
// split of 94 tiles), a sliding ring of 1024 wrapped, groups of 20 (two
// blocks of heads a kv head), head_dim 64 and 256, a ring longer than a
// split's tiles, and shapes the ring cannot take (d 40: chunks do not
// fit the block; d 20), which lower leaves on the loop. Each is checked
// against the CPU reference too.
func TestAttentionDecodeStagesGPU(t *testing.T) {
	k, s := gpu(t)
	t.Cleanup(func() { _ = s.Close() }) // an unclosed stream's pinned buffer panics at GC
	cases := []struct {
		name                          string
		nh, nkv, d, window, hist, spl int
		ring                          bool // lower runs a ring at this shape when forced
	}{
		{"s21-full-3000-auto", 48, 8, 128, 0, 3000, 0, true},
		{"s21-full-3000-nosplit", 48, 8, 128, 0, 3000, 1, true},
		{"g9-d128-win1024-wrap", 72, 8, 128, 1024, 2500, 4, true},
		{"g20-d64-full-split3", 40, 2, 64, 0, 700, 3, true},
		{"g2-d256-full-split2", 4, 2, 256, 0, 600, 2, true},
		{"g4-d128-full-2tiles", 8, 2, 128, 0, 60, 1, true},
		{"g2-d40-full", 8, 4, 40, 0, 300, 1, false},
		{"g3-d20-full", 6, 2, 20, 0, 300, 1, false},
	}
	for ci, c := range cases {
		for _, dt := range DTypes {
			t.Run(fmt.Sprintf("%s/%v", c.name, dt), func(t *testing.T) {
				a := newAttnRig(t, k, s, dt, c.nh, c.nkv, c.d, c.window, c.hist+8, 4096, uint64(900+ci))
				a.fill(c.hist)
				for _, fused := range []bool{false, true} {
					a.stages, a.mma = 1, 1
					base, want := a.decodeStep(c.spl, fused)
					checkClose(t, "decode, no ring", base, want, attnTol(dt))
					qp, kp, vp := a.kvPtrs()
					if !fused {
						kp, vp = 0, 0 // the cache holds this token (KVAppend ran)
					}
					nsplit := c.spl
					if nsplit == 0 {
						nsplit = k.DecodeSplits(a.c)
					}
					for _, st := range []int{2, 3, 4, 8} {
						ls, err := lower.AttentionDecode(lower.AttentionDecodeArgs{DType: dt.String(), Cache: a.c.cache(), Out: ptr(a.out),
							Q: ptr(qp), Pos: ptr(a.pos), NH: a.nh, Scale: a.scale, Splits: nsplit, Stages: st, MMA: 1, SMs: k.SMs(),
							Workspace: ptr(a.ws), Counters: ptr(a.ws)})
						if err != nil {
							t.Fatal(err)
						}
						if ring := ls[0].Ints[2] >= 2; ring != c.ring {
							t.Fatalf("%d stages forced: lower runs %d (a ring expected: %v)", st, ls[0].Ints[2], c.ring)
						}
						poison(t, s, a.out, int64(a.nh*a.d*dt.Size()))
						if err := k.attentionDecode(s, dt, a.c, a.out, qp, kp, vp, a.pos, a.nh, a.scale, a.gateGPU(), a.ws, c.spl, st, 1); err != nil {
							t.Fatal(err)
						}
						checkBits(t, fmt.Sprintf("fused append %v, %d stages against the loop", fused, st), download(t, s, dt, a.out, a.nh*a.d), base)
					}
				}
			})
		}
	}
}

// TestAttentionDecodeMMAGPU: the decode attention built with its key loop
// on tensor cores (lower.DecodeMMA, forced on) against the CPU reference
// for a decode step after a history (KVAppend then the attention, and the
// attention appending itself), bf16, head_dim 128: Laguna-S-2.1's full
// layer (33 splits of 122 keys; one split of 251 tiles of 16 keys; 5), a
// group of 1, a sliding ring of 1024 wrapped, splits of 97, 97 and 95 keys
// (the last on the FFMA loop: DEC_MMA_MIN_KEYS) and, a step later, 97, 97
// and 96 (all on tensor cores), a split of fewer tiles
// than warps; its error no more than the FFMA loop's on the same step.
// Where every split holds fewer than DEC_MMA_MIN_KEYS keys (the first
// token over 4 splits, three of them empty; 38 keys) the block runs the
// FFMA loop: the FFMA build's bits. With splits, each split's float
// partials equal the FFMA build's exactly where it holds fewer keys than
// that, and differ where it holds more (the tensor cores ran). And lower builds it nowhere else (f32,
// d 64, a group of 7, a window under a tile).
func TestAttentionDecodeMMAGPU(t *testing.T) {
	k, s := gpu(t)
	t.Cleanup(func() { _ = s.Close() }) // an unclosed stream's pinned buffer panics at GC
	for ci, c := range []struct {
		name                          string
		nh, nkv, d, window, hist, spl int
	}{
		{"s21-full-4000-auto", 48, 8, 128, 0, 4000, 0},
		{"s21-full-4000-nosplit", 48, 8, 128, 0, 4000, 1},
		{"g6-full-2000-split5", 48, 8, 128, 0, 2000, 5},
		{"g1-full-500-split2", 8, 8, 128, 0, 500, 2},
		{"g6-win1024-wrap-split3", 12, 2, 128, 1024, 2500, 3},
		{"g6-splits-97-97-95-then-96", 12, 2, 128, 0, 288, 3}, // the fused pass is one position on: 97, 97, 96
		{"g6-first-token-split4", 12, 2, 128, 0, 0, 4},
		{"g6-few-tiles", 12, 2, 128, 0, 37, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := newAttnRig(t, k, s, cuda.BF16, c.nh, c.nkv, c.d, c.window, c.hist+8, 4096, uint64(950+ci))
			a.fill(c.hist)
			for _, fused := range []bool{false, true} {
				nsplit := c.spl
				if nsplit == 0 {
					nsplit = k.DecodeSplits(a.c)
				}
				// With splits, each split's float partials (part_acc, before
				// the merge) show which loop its block ran.
				partials := func() []float32 {
					if nsplit == 1 {
						return nil
					}
					return download(t, s, cuda.F32, a.ws.Add(decodeCountersBytes(a.c, a.nh)), nsplit*a.nh*a.d)
				}
				a.mma = 2
				got, want := a.decodeStep(c.spl, fused)
				checkClose(t, "decode", got, want, attnTol(cuda.BF16))
				pm := partials()
				// The same step on the FFMA loop: the tensor cores' error is
				// the loop's (both round the output to bf16; P keeps about
				// 16 bits), not more.
				qp, kp, vp := a.kvPtrs()
				if !fused {
					kp, vp = 0, 0
				}
				if err := k.attentionDecode(s, cuda.BF16, a.c, a.out, qp, kp, vp, a.pos, a.nh, a.scale, a.gateGPU(), a.ws, c.spl, 0, 1); err != nil {
					t.Fatal(err)
				}
				ffma := download(t, s, cuda.BF16, a.out, a.nh*a.d)
				pf := partials()
				p := a.next - 1 // this step's position: hist, then hist+1 (each step appends)
				first := 0      // the step's keys: first .. p
				if c.window > 0 {
					first = max(0, p-c.window+1)
				}
				keys := p - first + 1
				per := ceilDiv(keys, nsplit)
				for sp := 0; sp < len(pm)/(a.nh*a.d); sp++ {
					j0 := first + sp*per
					n := max(0, min(j0+per, p+1)-j0)
					seg := func(x []float32) []float32 { return x[sp*a.nh*a.d : (sp+1)*a.nh*a.d] }
					same := sameBits(seg(pm), seg(pf))
					if tc := n >= lower.DecodeMMAMinKeys; tc == same {
						t.Fatalf("fused append %v, split %d of %d keys: partials the FFMA build's bits %v, want %v (tensor cores from %d keys)",
							fused, sp, n, same, !tc, lower.DecodeMMAMinKeys)
					}
				}
				if ceilDiv(keys, nsplit) < lower.DecodeMMAMinKeys {
					checkBits(t, fmt.Sprintf("fused append %v, splits of %d keys at most (the FFMA loop) against the FFMA build", fused, ceilDiv(keys, nsplit)), got, ffma)
					continue
				}
				em, ef := fixture.RelL2(got, want), fixture.RelL2(ffma, want)
				t.Logf("fused append %v: relative error %.3g on tensor cores, %.3g on FFMA", fused, em, ef)
				if em > 1.25*ef+1e-4 {
					t.Errorf("fused append %v: relative error %.3g on tensor cores, %.3g on the FFMA loop", fused, em, ef)
				}
			}
		})
	}
	for _, c := range []struct {
		dt               string
		d, group, window int
	}{{"f32", 128, 6, 0}, {"bf16", 64, 6, 0}, {"bf16", 128, 7, 0}, {"bf16", 128, 6, 16}} {
		if lower.DecodeMMA(c.dt, c.d, c.group, c.window, 1<<16, 1, 2) {
			t.Errorf("%s, d %d, group %d, window %d: lower runs the tensor-core loop", c.dt, c.d, c.group, c.window)
		}
	}
}
