package lower

import "testing"

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
		ffma      bool
		want      string
		vec       int64
	}{
		{"bf16 d128", "bf16", 128, 0, 0, at(4096), false, "attn_prefill_tc", 1},
		{"bf16 d64", "bf16", 64, 0, 0, at(4096), false, "attn_prefill_tc", 1},
		{"bf16 d40", "bf16", 40, 0, 0, at(4096), false, "attn_prefill", 0},
		{"bf16 d256", "bf16", 256, 0, 0, at(4096), false, "attn_prefill", 0},
		{"f32 d128", "f32", 128, 0, 0, at(4096), false, "attn_prefill", 0},
		{"f16 d128", "f16", 128, 0, 0, at(4096), false, "attn_prefill", 0},
		{"ffma asked for", "bf16", 128, 0, 0, at(4096), true, "attn_prefill", 0},
		{"fused odd row", "bf16", 128, 88*128 + 3, 88*128 + 3, at(4096), false, "attn_prefill_tc", 0},
		{"kv columns off 16 bytes", "bf16", 128, 88 * 128, 88 * 128, at(72*128*2 + 8), false, "attn_prefill_tc", 0},
		{"ldkv not a multiple of 8", "bf16", 64, 64 * 64, 8*64 + 4, at(4096), false, "attn_prefill_tc", 0},
	} {
		cache.HeadDim = c.d
		l, err := AttentionPrefill(AttentionPrefillArgs{DType: c.dt, Cache: cache, Out: at(0), Q: at(1 << 20), K: c.k, V: at(2 << 20),
			LDQ: c.ldq, LDKV: c.ldkv, Pos: Ptr{BasePos, 0}, T: 100, NH: 64, Scale: 0.1, FFMA: c.ffma})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if l.Kernel != c.want || (c.want == "attn_prefill_tc" && l.Ints[1] != c.vec) {
			t.Errorf("%s: %s", c.name, l.NameExpr())
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
