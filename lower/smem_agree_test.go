package lower

import (
	"regexp"
	"strconv"
	"strings"
	"testing"

	"lagc/cuda"
	"lagc/quant"
)

// TestSmemAgrees: the shared-memory sizes lower launches the Hopper GEMMs
// with follow the kernels' own configuration in gemm_hopper.cu (lower
// cannot include it: the numbers are written twice). A launch with less
// than the kernel carves out would overrun; with more, it wastes the room
// a second CTA needs.
func TestSmemAgrees(t *testing.T) {
	src, err := cuda.Source("gemm_hopper.cu")
	if err != nil {
		t.Fatal(err)
	}
	num := func(s string) int { return atoiT(t, s) }
	// WgCfg<BN>: BM 128, BK 64, STAGES = BN == 256 ? a : b.
	wg := regexp.MustCompile(`struct WgCfg \{\s*static constexpr int BM = 128, BK = 64;\s*static constexpr int STAGES = BN == 256 \? (\d+) : (\d+);`).FindStringSubmatch(src)
	if wg == nil {
		t.Fatal("gemm_hopper.cu: WgCfg's BM, BK and STAGES not found in the form this test reads")
	}
	for bn, want := range map[int]int{256: num(wg[1]), 128: num(wg[2])} {
		if got := hopperStages(bn); got != want {
			t.Errorf("gemm_wgmma width %d: lower plans %d stages, WgCfg has %d", bn, got, want)
		}
	}
	// QCfg<CTAS>::SMEM = n * 1024.
	q := regexp.MustCompile(`struct QCfg<(\d)> \{\s*static constexpr int SMEM = (\d+) \* 1024,`).FindAllStringSubmatch(src, -1)
	if len(q) != 2 {
		t.Fatalf("gemm_hopper.cu: found %d QCfg specialisations in the form this test reads, want 2", len(q))
	}
	for _, m := range q {
		ctas, want := num(m[1]), num(m[2])*1024
		if got := hopperQBudget(ctas); got != want {
			t.Errorf("gemm_wgmma_q with %d CTAs: lower budgets %d bytes, QCfg has %d", ctas, got, want)
		}
	}
	// The epilogue's staging (XSTORE): n bytes a consumer warp, 4 warps a
	// consumer warpgroup, for EPI 0 with a bf16 output only, out of the
	// budget with two CTAs.
	x := regexp.MustCompile(`constexpr bool XSTORE = EPI == 0 && IsBF16<TY>::value;\s*constexpr int EPI_STAGE = XSTORE \? (\d+) \* 4 \* NC : 0;`).FindStringSubmatch(src)
	b := regexp.MustCompile(`constexpr int BUDGET = QCfg<CTAS>::SMEM - \(CTAS == 2 \? EPI_STAGE : 0\);`).FindString(src)
	if x == nil || b == "" {
		t.Fatal("gemm_hopper.cu: gemm_wgmma_q's XSTORE, EPI_STAGE and BUDGET not found in the form this test reads")
	}
	per := num(x[1])
	for _, c := range []struct {
		epi  int
		y    string
		want int
	}{{EpiStore, "bf16", 1}, {EpiStore, "f32", 0}, {EpiStore, "f16", 0}, {EpiAccumulate, "bf16", 0}, {EpiSwiGLU, "bf16", 0}} {
		for _, wgs := range []int{2, 4} {
			if got, want := hopperQEpiStage(c.epi, c.y, wgs), c.want*per*4*wgs; got != want {
				t.Errorf("gemm_wgmma_q EPI %d, %s out, %d consumer warpgroups: lower stages %d bytes, the kernel %d", c.epi, c.y, wgs, got, want)
			}
		}
	}
	// With two CTAs a multiprocessor both still fit (228 KiB, 1 KiB of each
	// reserved by the system), with one the limit a CTA may ask for.
	for _, wt := range []quant.Type{quant.Q4_K, quant.Q8_0, quant.IQ4_XS, quant.BF16} {
		for _, bn := range []int{64, 96, 112, 128} {
			for _, w := range []struct{ ctas, wgs int }{{1, 2}, {1, 4}, {2, 2}} {
				sm := hopperQSmem(wt, bn, w.ctas, w.wgs, EpiStore, "bf16")
				if w.ctas*(sm+1024) > 228*1024 || sm > 227*1024 {
					t.Errorf("gemm_wgmma_q %v, %d rows, %d CTAs of %d consumer warpgroups: %d bytes each do not fit", wt, bn, w.ctas, w.wgs, sm)
				}
			}
		}
	}
}

// TestPrefillWGSmemAgrees: attn_prefill_wg's launches carry WaCfg's
// shared memory (attention_prefill_wg.cu): TILES tiles of 64 x 128 bf16
// (5 double-buffered, else 3, and a Q tile more for a second warpgroup)
// and 1 KiB of alignment slack.
func TestPrefillWGSmemAgrees(t *testing.T) {
	src, err := cuda.Source("attention_prefill_wg.cu")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`static constexpr int TILES = \(NW - 1\) \+ \(SPLIT \? (\d+) : (\d+)\);.*\n\s*static constexpr int SMEM = TILES \* WA_TILE \* 2 \+ (\d+);`).FindStringSubmatch(src)
	if m == nil {
		t.Fatal("attention_prefill_wg.cu: WaCfg's TILES and SMEM not found in the form this test reads")
	}
	split, dbl, slack := atoiT(t, m[1]), atoiT(t, m[2]), atoiT(t, m[3])
	tile := tcKeys * 128 * 2
	for ctas, tiles := range map[int]int{2: dbl, 3: split, 4: split} {
		if got, want := PrefillWGSmem(ctas, 64, 0), tiles*tile+slack; got != want {
			t.Errorf("attn_prefill_wg at %d CTAs: lower launches %d bytes, WaCfg has %d", ctas, got, want)
		}
	}
	for stages, tiles := range map[int]int{0: split, 1: split, 2: dbl} {
		if got, want := PrefillWGSmem(2, 128, stages), (tiles+1)*tile+slack; got != want {
			t.Errorf("attn_prefill_wg of 128 rows a CTA, %d stages: lower launches %d bytes, WaCfg has %d", stages, got, want)
		}
	}
}

// atoiT is s, a number a kernel source's configuration was read as.
func atoiT(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestDecodeTilesFit checks that attn_decode's layout (q as floats, then
// one tile of K and V as the cache's T, or a ring of `stages` of them, then
// kT) fits the shared memory lower launches it with (one tile sized as
// floats, a ring as T, plus kT's room with the fused norm and rotation)
// for every head dim, heads a block and ring length; kT stays 16-byte
// aligned (the tile loads read it 16 bytes at once) and clear of the q and
// k heads' rotation scratch (hb + 1 heads of floats from the tiles' start),
// every stage's K and V rows are 16-byte aligned where 16-byte chunks land
// (8 for 2-byte K), and a 2-byte K row is 2 words mod 32 (a lane's 8-byte
// read of its key's row in banks of its own).
func TestDecodeTilesFit(t *testing.T) {
	src, err := cuda.Source("attention.cu")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"return d4 + ((68 - (d4 & 63)) & 63);", "kp = dec_tpitch<T>(d4);",
		"T* Ks = reinterpret_cast<T*>(scr);", "T* Vs = Ks + DEC_TILE * kp;", "T* kT = TC ? Ks + hb * 2 * DEC_MMA_STAGE : Ks + (ST >= 2 ? ST : 1) * DEC_TILE * (kp + d4);",
		"#define DEC_MMA_KEYS 16", "#define DEC_MMA_PITCH 136", "#define DEC_MMA_STAGE (2 * DEC_MMA_KEYS * DEC_MMA_PITCH)",
		"bf16_t* st0 = ring + warp * 2 * DEC_MMA_STAGE;", "float2* ml = reinterpret_cast<float2*>(mo + nwarp * group * 128);",
		"#define DEC_MMA_MIN_KEYS 96", "mma = vec && j1 - j0 >= DEC_MMA_MIN_KEYS;",
		"stg = DEC_TILE * (kp + d4);", "T* K_ = Ks + (t % ST) * stg;", "T* V_ = K_ + DEC_TILE * kp;"} {
		if !strings.Contains(src, want) {
			t.Fatalf("attention.cu: %q not found; this test mirrors it", want)
		}
	}
	for d := 1; d <= MaxHeadDim; d++ {
		d4 := (d + 3) &^ 3
		for _, es := range []int{2, 4} {
			kp := decodeTPitch(d4, es)
			if es == 2 && (kp%4 != 0 || (kp/2)%32 != 2) {
				t.Fatalf("d %d: 2-byte K pitch %d (%d words)", d, kp, kp/2)
			}
			if es == 4 && kp%32 != 4 {
				t.Fatalf("d %d: float K pitch %d", d, kp)
			}
			for hb := 1; hb <= decodeHeads; hb++ {
				for _, stages := range []int{0, 2, 3, 4, 5, 6, 7, 8} {
					if stages > 0 && DecodeStages(es, d, 0, 1<<20, 1, hb, stages) != stages {
						continue // lower runs no such ring (it would not fit, or d's chunks do not)
					}
					have := decodeShmem(hb, d4, stages, es)
					qs := 4 * hb * d4
					stg := es * decodeTile * (kp + d4)
					kT := qs + max(stages, 1)*stg
					if kT+es*d > have+4*d4 || kT > have || have+4*d4 > decodeShmemMax {
						t.Errorf("d %d, %d-byte, %d heads, %d stages: kT at %d..%d, lower launches %d (+%d with kT)", d, es, hb, stages, kT, kT+es*d, have, 4*d4)
					}
					if kT%16 != 0 || kT-qs < 4*(hb+1)*d {
						t.Errorf("d %d, %d-byte, %d heads, %d stages: kT at %d (scratch ends at %d)", d, es, hb, stages, kT, qs+4*(hb+1)*d)
					}
					if stages >= 2 && (stg%16 != 0 || qs%16 != 0 || (es*kp)%8 != 0 || (es*decodeTile*kp)%16 != 0 || (es*d4)%16 != 0 || (es == 4 && (es*kp)%16 != 0)) {
						t.Errorf("d %d, %d-byte, %d stages: rows not aligned for the ring's copies (stage %d bytes, K pitch %d)", d, es, stages, stg, es*kp)
					}
				}
			}
		}
	}
	// The tensor-core loop (d 128, a warp a head, at most 6): each warp's
	// two stages of K and V rows of 272 bytes (16-byte aligned, 4 words
	// mod 32: ldmatrix's 8 rows in distinct banks), then kT; the norm's
	// scratch, the warps' partial outputs and the FFMA loop's one tile (for
	// splits short of DEC_MMA_MIN_KEYS) fit in the stages.
	if DecodeMMAMinKeys != 96 || decodeMMAKeys != 16 || decodeMMAPitch != 136 || (2*decodeMMAPitch)%16 != 0 || (2*decodeMMAPitch/4)%32 != 4 {
		t.Fatalf("tensor-core tiles: %d keys, pitch %d", decodeMMAKeys, decodeMMAPitch)
	}
	for hb := 1; hb <= 6; hb++ {
		have, qs := decodeMMAShmem(hb, 128), 4*hb*128
		ring := hb * 2 * 2 * (2 * decodeMMAKeys * decodeMMAPitch)
		kT := qs + ring
		merge := hb*hb*128*4 + hb*hb*8
		tile := 2 * decodeTile * (decodeTPitch(128, 2) + 128) // the FFMA loop's, for splits short of DEC_MMA_MIN_KEYS
		if kT != have || kT%16 != 0 || merge > ring || tile > ring || 4*(hb+1)*128 > ring || have+4*128 > decodeShmemMax {
			t.Errorf("%d heads: ring %d bytes (merge %d, FFMA tile %d), kT at %d, lower launches %d (+%d with kT)", hb, ring, merge, tile, kT, have, 4*128)
		}
	}
}
