package lower

import (
	"strings"
	"testing"
)

// TestPrefillAttentionChoice pins which shapes take the tensor-core prefill
// attention and which of its variants (16-byte loads need every pointer
// 16-byte aligned and row strides that are multiples of 8 elements).
func TestPrefillAttentionChoice(t *testing.T) {
	at := func(off int64) Ptr { return Ptr{BaseArena, off} }
	cache := Cache{K: Ptr{BaseKV, 0}, V: Ptr{BaseKV, 1 << 20}, NKV: 8, Window: 0, Slots: 4096}
	for _, c := range []struct {
		name      string
		dt        string
		d         int
		ldq, ldkv int
		k         Ptr
		ffma, wg  bool
		want      string
		vec       int64
	}{
		{"bf16 d128", "bf16", 128, 0, 0, at(4096), false, false, "attn_prefill_tc", 1},
		{"bf16 d64", "bf16", 64, 0, 0, at(4096), false, false, "attn_prefill_tc", 1},
		{"bf16 d40", "bf16", 40, 0, 0, at(4096), false, false, "attn_prefill", 0},
		{"bf16 d256", "bf16", 256, 0, 0, at(4096), false, false, "attn_prefill", 0},
		{"f32 d128", "f32", 128, 0, 0, at(4096), false, false, "attn_prefill", 0},
		{"f16 d128", "f16", 128, 0, 0, at(4096), false, false, "attn_prefill", 0},
		{"ffma asked for", "bf16", 128, 0, 0, at(4096), true, false, "attn_prefill", 0},
		{"fused odd row", "bf16", 128, 88*128 + 3, 88*128 + 3, at(4096), false, false, "attn_prefill_tc", 0},
		{"kv columns off 16 bytes", "bf16", 128, 88 * 128, 88 * 128, at(72*128*2 + 8), false, false, "attn_prefill_tc", 0},
		{"ldkv not a multiple of 8", "bf16", 64, 64 * 64, 8*64 + 4, at(4096), false, false, "attn_prefill_tc", 0},
		{"wgmma asked for", "bf16", 128, 0, 0, at(4096), false, true, "attn_prefill_wg", 0},
		{"wgmma, d64", "bf16", 64, 0, 0, at(4096), false, true, "attn_prefill_tc", 1},
		{"wgmma, fused odd row", "bf16", 128, 88*128 + 3, 88*128 + 3, at(4096), false, true, "attn_prefill_tc", 0},
		{"wgmma and ffma", "bf16", 128, 0, 0, at(4096), true, true, "attn_prefill", 0},
	} {
		cache.HeadDim = c.d
		l, err := AttentionPrefill(AttentionPrefillArgs{DType: c.dt, Cache: cache, Out: at(0), Q: at(1 << 20), K: c.k, V: at(2 << 20),
			LDQ: c.ldq, LDKV: c.ldkv, Pos: Ptr{BasePos, 0}, T: 100, NH: 64, Scale: 0.1, FFMA: c.ffma, Wgmma: c.wg, CC: 90})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if l.Kernel != c.want || (c.want == "attn_prefill_tc" && l.Ints[1] != c.vec) {
			t.Errorf("%s: %s", c.name, l.NameExpr())
		}
		// The default: 128 rows a CTA, two warpgroups, one K and one V tile.
		if c.want == "attn_prefill_wg" && (l.Shmem != PrefillWGSmem(2, PrefillWGRows, 0) || l.Block[0] != 2*PrefillWGRows || l.Ints[1] != 1 ||
			l.Ints[2] != PrefillWGRows/64) {
			t.Errorf("%s: %d threads, %d bytes of shared memory", c.name, l.Block[0], l.Shmem)
		}
	}
	// Below Hopper the wgmma kernel is not a choice, asked for or not.
	cache.HeadDim = 128
	l, err := AttentionPrefill(AttentionPrefillArgs{DType: "bf16", Cache: cache, Out: at(0), Q: at(1 << 20), K: at(4096),
		V: at(2 << 20), Pos: Ptr{BasePos, 0}, T: 100, NH: 64, Scale: 0.1, Wgmma: true, CC: 80})
	if err != nil || l.Kernel != "attn_prefill_tc" {
		t.Errorf("wgmma asked for on sm_80: %s, %v", l.Kernel, err)
	}
	// attn_prefill_wg's rows a CTA: 128 is two warpgroups (NW 2, one K and
	// one V tile, or two of each with 2 stages; 2 CTAs a multiprocessor) on
	// half the CTAs; anything else, 128 rows with other CTAs a
	// multiprocessor, or stages other than 1 or 2 at 128 rows, is refused.
	for _, c := range []struct {
		rows, ctas, stages int
		err                string
	}{{128, 0, 0, ""}, {128, 2, 0, ""}, {128, 0, 1, ""}, {128, 0, 2, ""}, {128, 2, 2, ""}, {64, 3, 0, ""}, {64, 0, 0, ""}, {0, 4, 0, ""},
		{128, 4, 0, "runs 2 CTAs"}, {96, 0, 0, "64 or 128 rows"}, {64, 5, 0, "2, 3 or 4 CTAs"}, {64, 2, 2, "1 or 2 stages"},
		{128, 0, 3, "1 or 2 stages"}, {128, 0, -1, "1 or 2 stages"}} {
		l, err := AttentionPrefill(AttentionPrefillArgs{DType: "bf16", Cache: cache, Out: at(0), Q: at(1 << 20), K: at(4096),
			V: at(2 << 20), Pos: Ptr{BasePos, 0}, T: 100, NH: 64, Scale: 0.1, Wgmma: true, CC: 90, WgRows: c.rows, WgCTAs: c.ctas,
			WgStages: c.stages})
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("rows %d, ctas %d, stages %d: %v, want an error saying %q", c.rows, c.ctas, c.stages, err, c.err)
			}
			continue
		}
		rows := 100 * 64 / cache.NKV
		wrows, ctas := c.rows, c.ctas
		switch {
		case wrows == 0: // 3 or 4 CTAs asked for: 64 rows
			wrows = 64
		case wrows == 128:
			ctas = 2
		case ctas == 0:
			ctas = PrefillWGCTAs
		}
		nw, split := wrows/64, int64(ctas-2)
		if wrows == 128 {
			split = 1
			if c.stages == 2 {
				split = 0
			}
		}
		// WaCfg's tiles: a Q tile a warpgroup, K and V once (SPLIT 1 and
		// up) or twice (SPLIT 0), 16 KiB each, and 1 KiB of alignment.
		tiles := nw - 1 + 3
		if split == 0 {
			tiles = nw - 1 + 5
		}
		if err != nil || l.Kernel != "attn_prefill_wg" || l.Ints[1] != split || l.Ints[2] != int64(nw) || l.Block[0] != 128*nw ||
			l.Grid != dims(cache.NKV, (rows+wrows-1)/wrows) || l.Shmem != tiles*16384+1024 {
			t.Errorf("rows %d, ctas %d, stages %d: %s grid %v block %v, %d bytes, %v", c.rows, c.ctas, c.stages, l.NameExpr(), l.Grid, l.Block,
				l.Shmem, err)
		}
	}
}

// TestGEMVSplit pins the split rule's edges.
func TestGEMVSplit(t *testing.T) {
	for _, c := range []struct {
		n, k, wsize, want int
	}{
		{100352, 3072, 2, 1}, // lm_head: rows enough
		{3072, 3072, 2, 2},
		{17, 3072, 2, 8},
		{17, 64, 2, 1}, // too short to share
		{1000, 1000, 2, 2},
		{1000, 1000, 4, 4}, // 250 vectors of 4 floats
	} {
		if got := GEMVSplit(c.n, c.k, c.wsize, 132); got != c.want {
			t.Errorf("GEMVSplit(%d, %d, %d) = %d, want %d", c.n, c.k, c.wsize, got, c.want)
		}
	}
}

// TestMoEBand: the N-band of an expert matrix fits L2BandBytes of rows, in
// multiples of a 64-column tile, within [64, rows].
func TestMoEBand(t *testing.T) {
	for _, c := range []struct {
		n    int
		row  int64
		want int
	}{
		{2048, 2 * 3072, 128}, // S-2.1's bf16 gate_up stack: 170 rows fit, 128 taken
		{1024, 4 * 2048, 128},
		{32, 2 * 32, 32},      // capped at the rows
		{4096, 2 * 65536, 64}, // at least one tile
		{0, 64, 0},
	} {
		if got := MoEBand(c.n, c.row); got != c.want {
			t.Errorf("MoEBand(%d, %d) = %d, want %d", c.n, c.row, got, c.want)
		}
	}
}

// TestRouterTopKChoice: the warp kernel, with experts per lane the power of
// two that holds E, up to 1024 experts and 32 choices; the block kernel
// beyond. A block takes up to four tokens.
func TestRouterTopKChoice(t *testing.T) {
	p := Ptr{BaseArena, 0}
	for _, c := range []struct {
		T, E, k    int
		kernel     string
		per        int64
		grid, bloc int
	}{
		{1, 256, 10, "router_topk_block", 0, 1, 256},
		{8, 256, 8, "router_topk_block", 0, 8, 256},
		{64, 256, 8, "router_topk_block", 0, 64, 256},
		{65, 256, 10, "router_topk", 8, 17, 128},
		{2048, 256, 10, "router_topk", 8, 512, 128},
		{66, 6, 2, "router_topk", 1, 17, 128},
		{100, 33, 4, "router_topk", 2, 25, 128},
		{100, 1024, 32, "router_topk", 32, 25, 128},
		{100, 1025, 8, "router_topk_block", 0, 100, 1024},
		{100, 256, 33, "router_topk_block", 0, 100, 256},
	} {
		l, err := RouterTopK("f32", p, p, p, Ptr{}, c.T, c.E, c.k, 0, 1)
		if err != nil {
			t.Fatal(err)
		}
		var per int64
		if len(l.Ints) > 0 {
			per = l.Ints[0]
		}
		if l.Kernel != c.kernel || per != c.per || l.Grid[0] != c.grid || l.Block[0] != c.bloc {
			t.Errorf("T %d, E %d, k %d: %s grid %d block %d, want %s<%d> grid %d block %d",
				c.T, c.E, c.k, l.NameExpr(), l.Grid[0], l.Block[0], c.kernel, c.per, c.grid, c.bloc)
		}
		// The block kernel at any T: a block per token.
		b, err := RouterTopKBlock("f32", p, p, p, Ptr{}, c.T, c.E, c.k, 0, 1)
		if err != nil || b.Kernel != "router_topk_block" || b.Grid != dims(c.T) || b.Args[0] != i32(c.T) || b.Shmem != 12*c.E+4*c.k {
			t.Errorf("T %d, E %d, k %d: block kernel %s (%v)", c.T, c.E, c.k, b, err)
		}
	}
}

// TestArgMaxSplit: a row is split into parts for about two blocks per SM
// in all, never more parts than 1024-element chunks; with one part there
// is one launch and no workspace, with several a second launch reduces
// the parts from a workspace of one key each, which must be given.
func TestArgMaxSplit(t *testing.T) {
	p := Ptr{BaseArena, 0}
	ws := Ptr{BaseWorkspace, 0}
	for _, c := range []struct {
		T, V, parts int
	}{
		{1, 100352, 98},
		{1, 100353, 99},
		{8, 100352, 33},
		{264, 100352, 1},
		{2048, 100352, 1},
		{1, 1024, 1},
		{1, 1025, 2},
		{3, 37, 1},
	} {
		if got := ArgMaxParts(c.T, c.V, 132); got != c.parts {
			t.Errorf("ArgMaxParts(%d, %d) = %d, want %d", c.T, c.V, got, c.parts)
		}
		ls, err := ArgMax("bf16", p, p, ws, c.T, c.V, 132)
		if err != nil {
			t.Fatal(err)
		}
		wsBytes := ArgMaxWorkspace(c.T, c.V, 132)
		if c.parts == 1 {
			if len(ls) != 1 || ls[0].Grid != [3]int{c.T, 1, 1} || !ls[0].Args[3].Ptr().Null() || wsBytes != 0 {
				t.Errorf("T %d, V %d: %v, workspace %d; want one launch of %d blocks, no workspace", c.T, c.V, ls, wsBytes, c.T)
			}
			continue
		}
		if len(ls) != 2 || ls[0].Grid != [3]int{c.T, c.parts, 1} || ls[1].Kernel != "argmax_final" || wsBytes != 8*int64(c.T*c.parts) {
			t.Errorf("T %d, V %d: %v, workspace %d; want %dx%d blocks and the reduction", c.T, c.V, ls, wsBytes, c.T, c.parts)
		}
		if _, err := ArgMax("bf16", p, p, Ptr{}, c.T, c.V, 132); err == nil {
			t.Errorf("T %d, V %d: %d parts without a workspace: no error", c.T, c.V, c.parts)
		}
	}
}

// TestAttentionDecodeLaunch pins the decode attention's one launch: its
// grid (splits, kv heads, rows x blocks of heads), the counters it needs
// when it splits (one per row, kv head and block of heads), and the
// output gate's arguments and checks.
func TestAttentionDecodeLaunch(t *testing.T) {
	at := func(off int64) Ptr { return Ptr{BaseArena, off} }
	s21 := Cache{K: Ptr{BaseKV, 0}, V: Ptr{BaseKV, 1 << 20}, NKV: 8, HeadDim: 128, Window: 512, Slots: 512}
	small := Cache{K: Ptr{BaseKV, 0}, V: Ptr{BaseKV, 1 << 20}, NKV: 2, HeadDim: 64, Slots: 100}
	ws, cnt := Ptr{BaseWorkspace, 0}, Ptr{BaseSync, 0}
	for _, c := range []struct {
		name        string
		cache       Cache
		nh, rows    int
		splits      int
		gate        OutputGate
		ws, cnt     Ptr
		grid        [3]int
		counters    int64 // DecodeCounters(rows, nh, nkv)
		gateArgs    string
		wantErr     string
		countersArg string
	}{
		{"s21 sliding: 16 splits", s21, 72, 1, 0, OutputGate{}, ws, cnt, [3]int{16, 8, 1}, 32, "null, i64 0, i32 0", "", "sync+0"},
		{"s21 sliding gated per head, 4 rows", s21, 72, 4, 0, OutputGate{Gate: at(64), G: 72}, ws, cnt, [3]int{16, 8, 4}, 128, "arena+64, i64 72, i32 72", "", "sync+0"},
		{"per element, strided", s21, 72, 1, 0, OutputGate{Gate: at(64), G: 72 * 128, LDG: 72*128 + 8}, ws, cnt, [3]int{16, 8, 1}, 32, "arena+64, i64 9224, i32 9216", "", "sync+0"},
		{"two blocks of heads a kv head", small, 40, 3, 5, OutputGate{}, ws, cnt, [3]int{5, 2, 6}, 48, "", "", "sync+0"},
		{"no split: no counters", small, 4, 1, 1, OutputGate{}, Ptr{}, Ptr{}, [3]int{1, 2, 1}, 8, "", "", "null"},
		{"split without counters", small, 4, 1, 2, OutputGate{}, ws, Ptr{}, [3]int{}, 8, "", "2 splits need a workspace of", ""},
		{"split without workspace", small, 4, 1, 2, OutputGate{}, Ptr{}, cnt, [3]int{}, 8, "", "2 splits need a workspace of", ""},
		{"gate width", small, 4, 1, 0, OutputGate{Gate: at(64), G: 5}, ws, cnt, [3]int{}, 8, "", "gate width 5 is neither nh = 4", ""},
		{"gate stride", small, 4, 1, 0, OutputGate{Gate: at(64), G: 4, LDG: 3}, ws, cnt, [3]int{}, 8, "", "gate row stride 3 is below its width 4", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := DecodeCounters(c.rows, c.nh, c.cache.NKV); got != c.counters {
				t.Errorf("DecodeCounters(%d, %d, %d) = %d, want %d", c.rows, c.nh, c.cache.NKV, got, c.counters)
			}
			a := AttentionDecodeArgs{DType: "bf16", Cache: c.cache, Out: at(0), Q: at(1 << 20), K: at(2 << 20), V: at(3 << 20),
				Pos: Ptr{BasePos, 0}, NH: c.nh, Scale: 0.1, Gate: c.gate, Workspace: c.ws, Counters: c.cnt, Splits: c.splits, SMs: 132, Rows: c.rows}
			if c.rows > 1 {
				a.Seq, a.SeqStride = Ptr{BaseSeq, 0}, 1<<20
			}
			ls, err := AttentionDecode(a)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("err %v, want %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(ls) != 1 || ls[0].Kernel != "attn_decode" || ls[0].Grid != c.grid {
				t.Fatalf("launches %v, want one attn_decode of grid %v", ls, c.grid)
			}
			text := ls[0].String()
			if !strings.HasSuffix(text, ", "+c.countersArg+", null, null"+noNormRoPE) { // then no quantised copy, no fused norm and rope
				t.Errorf("counters argument: %s, want %s before two null pointers", text, c.countersArg)
			}
			if c.gateArgs != "" && !strings.Contains(text, "kv+1048576, "+c.gateArgs+", arena+0,") {
				t.Errorf("gate arguments: %s, want %s before the output", text, c.gateArgs)
			}
		})
	}
}

// noNormRoPE is how an attn_decode launch without a fused q/k norm and
// rope ends (AttentionDecode).
const noNormRoPE = ", null, null, f32 0, null, i32 0, f32 0)"
