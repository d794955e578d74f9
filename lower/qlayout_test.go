package lower

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"testing"

	"lagc/quant"
)

// TestRepackQuant: the device layout keeps every byte of the ggml blocks:
// split types unsplit give the blocks back; q4_k and q5_k bodies hold the
// blocks' scales and mins unpacked, which, packed again as ggml packs
// them, give the 12 bytes back.
func TestRepackQuant(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, qt := range QuantKernelTypes {
		rows, K := 3, 512
		src := make([]byte, rows*K/qt.BlockElems()*qt.BlockBytes())
		for i := range src {
			src[i] = byte(r.Uint32())
		}
		dst := repacked(t, qt, rows, K, src)
		sp, _ := quantSplit(qt)
		bb := qt.BlockBytes()
		nb := len(src) / bb
		heads := int(align256(int64(nb) * int64(sp.body)))
		for b := 0; b < nb; b++ {
			blk := src[b*bb : (b+1)*bb]
			head := dst[heads+b*sp.head : heads+(b+1)*sp.head]
			body := dst[b*sp.body : (b+1)*sp.body]
			var back []byte
			switch {
			case qt == quant.Q4_K || qt == quant.Q5_K:
				back = append(append(append([]byte(nil), head...), packK4(body[:16])...), body[16:]...)
			case sp.headAt == 0:
				back = append(append([]byte(nil), head...), body...)
			default:
				back = append(append([]byte(nil), body...), head...)
			}
			if !bytes.Equal(back, blk) {
				t.Fatalf("%s: block %d differs after repacking", qt, b)
			}
		}
		if err := RepackQuant(qt, rows, K+1, src, dst); err == nil {
			t.Errorf("%s: a row width off the block size was accepted", qt)
		}
		// In parts (split anywhere between blocks), the same bytes.
		cut := bb * (nb/2 + 1)
		parts := make([]byte, len(dst))
		if err := RepackQuantParts(qt, rows, K, [][]byte{src[:cut], nil, src[cut:]}, parts); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(parts, dst) {
			t.Errorf("%s: repacking in parts differs", qt)
		}
		if err := RepackQuantParts(qt, rows, K, [][]byte{src[:cut+1], src[cut+1:]}, parts); err == nil {
			t.Errorf("%s: a part of partial blocks was accepted", qt)
		}
	}
}

// packK4 packs 8 scales and 8 mins (6 bits each) into ggml's 12 bytes.
func packK4(sm []byte) []byte {
	q := make([]byte, 12)
	for j := 0; j < 8; j++ {
		sc, m := sm[j], sm[8+j]
		if j < 4 {
			q[j] |= sc & 63
			q[j+4] |= m & 63
		} else {
			q[j+4] |= sc&0xF | (m&0xF)<<4
			q[j-4] |= (sc >> 4) << 6
			q[j] |= (m >> 4) << 6
		}
	}
	return q
}

// TestMoEQuantPaths: quantised stacks take the decode GEMVs for a few
// tokens, the grouped wgmma GEMMs for q8_0 and q4_k on Hopper, and the
// stacks dequantised into the workspace otherwise; the workspace is sized
// before it is placed (its address unset).
func TestMoEQuantPaths(t *testing.T) {
	for _, c := range []struct {
		qt   quant.Type
		T    int
		cc   int
		want moeQuant
		kern string
	}{
		{quant.Q4_K, 1, 90, moeQuantDecode, "moe_gateup_qgemv"},
		{quant.Q4_K, 100, 90, moeQuantHopper, "gemm_wgmma_q"},
		{quant.Q8_0, 100, 90, moeQuantHopper, "gemm_wgmma_q"},
		{quant.IQ4_XS, 100, 90, moeQuantHopper, "gemm_wgmma_q"},
		{quant.IQ4_XS, 100, 80, moeQuantDequant, "qdequant"},
		{quant.Q6_K, 100, 90, moeQuantHopper, "gemm_wgmma_q"},
		{quant.Q5_K, 100, 90, moeQuantHopper, "gemm_wgmma_q"},
		{quant.Q6_K, 100, 90, moeQuantDequant, "qdequant"}, // noq6k below
		{quant.Q4_K, 100, 80, moeQuantDequant, "qdequant"},
	} {
		a := quantMoEArgs(c.qt, c.T, 8, 256, 256, 2, QMoEForce{NoQ6K: c.want == moeQuantDequant})
		a.CC, a.Workspace = c.cc, Ptr{} // sized before it is placed
		n, err := MoEWorkspace(a)
		if err != nil || n <= 0 {
			t.Fatalf("%s T=%d cc %d: workspace %d, %v", c.qt, c.T, c.cc, n, err)
		}
		l, err := a.Layout()
		if err != nil || l.Quant != c.want {
			t.Errorf("%s T=%d cc %d: path %d, want %d (%v)", c.qt, c.T, c.cc, l.Quant, c.want, err)
		}
		a.Workspace = Ptr{BaseWorkspace, 0}
		ls, err := MoE(a)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, x := range ls {
			found = found || x.Kernel == c.kern
		}
		if !found {
			t.Errorf("%s T=%d cc %d: no %s launch", c.qt, c.T, c.cc, c.kern)
		}
	}
}

// TestMoEQuantTileRows: QMoEForce.TileRows sets the quantised grouped
// GEMMs' token tile (gemm_wgmma_q's BN, the TMA box and the schedule's tile
// rows alike) and the tile table's size, QMoEForce.CTAs their CTAs a
// multiprocessor (the kernel's CTAS, the grid, the shared memory) and
// QMoEForce.WGs their consumer warpgroups (NC, the block); zero chooses 96
// rows on one CTA of four warpgroups, where the forced values allow, else
// two warpgroups on two CTAs (96 rows or fewer) or one (128); rows it has
// no MMA for, 2 CTAs of 128-row tiles and 4 warpgroups on 2 CTAs or of
// 128-row tiles are errors. The pipelined loop (PIPE) is q4_k's default
// on four warpgroups; QMoEForce.Pipe forces it (one CTA; two are refused),
// NoPipe the plain loop, and both are refused.
func TestMoEQuantTileRows(t *testing.T) {
	E, H, I, T, k := 8, 256, 256, 100, 2
	R := T * k
	for _, c := range []struct {
		wt                                        quant.Type
		force, ctas, wgs, want, wantCTAs, wantWGs int
		err                                       string
		pipe                                      string // "pipe", "nopipe" or "": QMoEForce's Pipe, NoPipe
		wantPipe                                  bool
	}{
		{quant.Q4_K, 0, 0, 0, 96, 1, 4, "", "", true}, {quant.Q4_K, 64, 0, 0, 64, 1, 4, "", "", true}, {quant.Q4_K, 96, 0, 0, 96, 1, 4, "", "", true},
		{quant.Q4_K, 128, 0, 0, 128, 1, 2, "", "", false}, {quant.Q4_K, 96, 1, 0, 96, 1, 4, "", "", true},
		{quant.Q8_0, 0, 0, 0, 96, 1, 4, "", "", false}, {quant.Q8_0, 128, 0, 0, 128, 1, 2, "", "", false},
		{quant.Q4_K, 96, 2, 0, 96, 2, 2, "", "", false}, {quant.Q4_K, 0, 0, 2, 96, 2, 2, "", "", false}, {quant.Q4_K, 96, 1, 2, 96, 1, 2, "", "", false},
		{quant.Q4_K, 96, 1, 4, 96, 1, 4, "", "", true}, {quant.Q8_0, 64, 1, 4, 64, 1, 4, "", "", false},
		{quant.Q4_K, 100, 0, 0, 0, 0, 0, "64, 96, 112 or 128", "", false}, {quant.Q4_K, 256, 0, 0, 0, 0, 0, "64, 96, 112 or 128", "", false},
		{quant.Q4_K, 128, 2, 0, 0, 0, 0, "96 rows or fewer", "", false}, {quant.Q8_0, 128, 2, 0, 0, 0, 0, "96 rows or fewer", "", false},
		{quant.Q4_K, 96, 3, 0, 0, 0, 0, "take 1 or 2", "", false},
		{quant.Q4_K, 96, 2, 4, 0, 0, 0, "ctas=1", "", false}, {quant.Q4_K, 128, 1, 4, 0, 0, 0, "112 rows or fewer", "", false},
		{quant.Q4_K, 96, 1, 3, 0, 0, 0, "take 2 or 4", "", false},
		// The pipelined loop forced: one CTA, four warpgroups where the tiles allow.
		{quant.Q4_K, 0, 0, 0, 96, 1, 4, "", "pipe", true}, {quant.Q4_K, 128, 0, 0, 128, 1, 2, "", "pipe", true}, {quant.Q4_K, 0, 0, 2, 96, 1, 2, "", "pipe", true},
		{quant.Q8_0, 0, 0, 0, 96, 1, 4, "", "pipe", true}, {quant.Q4_K, 96, 2, 0, 0, 0, 0, "ctas=1", "pipe", false},
		// 112-row tiles: four warpgroups, the plain loop (q4_k's pipelined
		// one does not fit beside them: refused where forced); MMA widths
		// must divide the tile.
		{quant.Q4_K, 112, 0, 0, 112, 1, 4, "", "", false}, {quant.Q8_0, 112, 0, 0, 112, 1, 4, "", "", false},
		{quant.Q4_K, 112, 0, 0, 0, 0, 0, "96 rows or fewer", "pipe", false}, {quant.Q4_K, 112, 2, 0, 0, 0, 0, "96 rows or fewer", "", false},
		{quant.Q4_K, 112, 1, 2, 112, 1, 2, "", "", false},
		// The plain loop forced, and both refused.
		{quant.Q4_K, 0, 0, 0, 96, 1, 4, "", "nopipe", false}, {quant.Q8_0, 64, 1, 4, 64, 1, 4, "", "nopipe", false},
		{quant.Q4_K, 0, 0, 0, 0, 0, 0, "one or the other", "pipe,nopipe", false},
	} {
		a := quantMoEArgs(c.wt, T, E, H, I, k, QMoEForce{TileRows: c.force, CTAs: c.ctas, WGs: c.wgs, Pipe: strings.HasPrefix(c.pipe, "pipe"), NoPipe: strings.Contains(c.pipe, "nopipe")})
		l, err := a.Layout()
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("rows=%d,ctas=%d: layout error %v, want a refusal saying %q", c.force, c.ctas, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("rows=%d,ctas=%d: %v", c.force, c.ctas, err)
		}
		if l.Rows != c.want || l.MaxTiles != ceilDiv(R, c.want)+min(E, R) {
			t.Errorf("rows=%d: tile rows %d, max tiles %d", c.force, l.Rows, l.MaxTiles)
		}
		sched, qs := qmoeTileLaunches(t, a)
		if sched != int64(c.want) {
			t.Errorf("rows=%d: moe_schedule tiles of %d rows", c.force, sched)
		}
		for gemms, x := range qs {
			// gate+up (its output f16, the down's f16 operand), then down
			epi, yt := []int{EpiSwiGLU, EpiStore}[min(gemms, 1)], []string{"f16", "bf16"}[min(gemms, 1)]
			if x.Ints[2] != int64(epi) || len(x.DTypes) != 1 || x.DTypes[0] != yt {
				t.Errorf("rows=%d: gemm_wgmma_q %d has EPI %d and output %v, want %d and %s", c.force, gemms, x.Ints[2], x.DTypes, epi, yt)
			}
			if x.Ints[1] != int64(c.want) || x.Ints[4] != int64(c.wantCTAs) || x.Ints[5] != int64(c.wantWGs) || x.Ints[7] != int64(b2i(c.wantPipe)) ||
				x.Block[0] != 128*(c.wantWGs+1) {
				t.Errorf("rows=%d,ctas=%d,wgs=%d,%q: gemm_wgmma_q BN %d, CTAS %d, NC %d, PIPE %d, block %v; want %d, %d, %d, %v", c.force, c.ctas, c.wgs, c.pipe,
					x.Ints[1], x.Ints[4], x.Ints[5], x.Ints[7], x.Block, c.want, c.wantCTAs, c.wantWGs, c.wantPipe)
			}
			if x.Grid[0] != 132*c.wantCTAs || x.Shmem != hopperQSmem(c.wt, c.want, c.wantCTAs, c.wantWGs, epi, yt) || x.Shmem+1024 > 228*1024 {
				t.Errorf("rows=%d,ctas=%d: grid %v, shared memory %d", c.force, c.ctas, x.Grid, x.Shmem)
			}
			if 2*(x.Shmem+1024) > 228*1024 && c.wantCTAs == 2 {
				t.Errorf("rows=%d: two CTAs of %d bytes do not fit a multiprocessor's 228 KiB", c.force, x.Shmem)
			}
		}
		if len(qs) != 2 {
			t.Errorf("rows=%d: %d gemm_wgmma_q launches, want 2", c.force, len(qs))
		}
	}
}

// qmoeTileLaunches lowers a and returns its moe_schedule's tile rows (0
// with none) and its gemm_wgmma_q launches.
func qmoeTileLaunches(t *testing.T, a MoEArgs) (int64, []Launch) {
	t.Helper()
	ls, err := MoE(a)
	if err != nil {
		t.Fatal(err)
	}
	var sched int64
	var qs []Launch
	for _, x := range ls {
		switch x.Kernel {
		case "moe_schedule":
			sched = x.Args[2].Int
		case "gemm_wgmma_q":
			qs = append(qs, x)
		}
	}
	return sched, qs
}

// repacked is src (ggml blocks of a [rows, K] matrix) in its device layout.
func repacked(t testing.TB, qt quant.Type, rows, K int, src []byte) []byte {
	t.Helper()
	n, err := QuantDeviceBytes(qt, rows, K)
	if err != nil {
		t.Fatal(err)
	}
	dst := make([]byte, n)
	if err := RepackQuant(qt, rows, K, src, dst); err != nil {
		t.Fatal(err)
	}
	return dst
}

// TestQMoEWideTiles: quantised stacks' grouped GEMMs take 96-row tiles
// while the routes average at most QNarrowMaxAvgRows tokens an expert and
// 112 past it, in the schedule and the kernels alike, whatever the bf16
// stacks' flags (bf16, nobf16) say: those choose bf16 stacks' kernel and
// once moved the quantised tiles through the layout's bf16 stand-in.
func TestQMoEWideTiles(t *testing.T) {
	const E, H, I, k = 8, 256, 256, 2
	at, past := QNarrowMaxAvgRows*E/k, QNarrowMaxAvgRows*E/k+1
	for _, wt := range []quant.Type{quant.Q4_K, quant.IQ4_XS} {
		for _, f := range []QMoEForce{{}, {BF16: true}, {NoBF16: true}} {
			for _, c := range []struct{ T, rows, pipe int }{{at, 96, b2i(wt == quant.Q4_K)}, {past, 112, 0}} {
				a := quantMoEArgs(wt, c.T, E, H, I, k, f)
				l, err := a.Layout()
				if err != nil {
					t.Fatalf("%v %+v T=%d: %v", wt, f, c.T, err)
				}
				if l.Rows != c.rows || l.BF16Q {
					t.Errorf("%v %+v T=%d: layout tiles of %d rows, BF16Q %v; want %d, false", wt, f, c.T, l.Rows, l.BF16Q, c.rows)
				}
				sched, qs := qmoeTileLaunches(t, a)
				if sched != int64(c.rows) || len(qs) != 2 {
					t.Errorf("%v %+v T=%d: moe_schedule tiles of %d rows, %d gemm_wgmma_q launches; want %d, 2", wt, f, c.T, sched, len(qs), c.rows)
				}
				for _, x := range qs {
					if x.Ints[1] != int64(c.rows) || x.Ints[5] != 4 || x.Ints[7] != int64(c.pipe) {
						t.Errorf("%v %+v T=%d: %s, want BN %d, 4 warpgroups, PIPE %d", wt, f, c.T, x.NameExpr(), c.rows, c.pipe)
					}
				}
			}
		}
	}
}

// quantMoEArgs is a Hopper MoE call of T tokens on quantised stacks of
// type wt (E experts, H x I, top k), shaped by f.
func quantMoEArgs(wt quant.Type, T, E, H, I, k int, f QMoEForce) MoEArgs {
	w := Ptr{BaseWeights, 0}
	return MoEArgs{T: T, H: H, I: I, E: E, TopK: k, X: Ptr{BaseArena, 0}, Weights: Ptr{BaseArena, 1 << 20},
		IDs: Ptr{BaseArena, 2 << 20}, Out: Ptr{BaseArena, 3 << 20}, XType: "bf16", WType: wt.String(), OutType: "bf16",
		CC: 90, SMs: 132, QGate: QMatrix{W: w, Total: 2 * E * I}, QUp: QMatrix{W: w, Total: 2 * E * I, Row0: E * I},
		QDown: QMatrix{W: Ptr{BaseWeights, 1 << 24}, Total: E * H}, QMoE: f, Workspace: Ptr{BaseWorkspace, 0}}
}
