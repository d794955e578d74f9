package lower

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"

	"lagc/quant"
)

func persistTestChain() PersistChainArgs {
	g := func(N, K int, y int64) QGEMVArgs {
		return QGEMVArgs{T: 1, K: K, N: N, W: DevicePtr(uint64(1 << 30)), Y: DevicePtr(uint64(y)), WType: quant.Q8_0, WRows: N, YType: "bf16"}
	}
	return PersistChainArgs{X: DevicePtr(4096), Table: DevicePtr(8192), Counters: DevicePtr(12288), Grid: 132,
		GEMVs: []QGEMVArgs{g(1024, 2048, 1<<20), g(2048, 1024, 2<<20), g(1024, 2048, 3<<20)}}
}

// TestEncodePersistChain: each entry holds its GEMV's sizes, its share of
// blocks as qgemv_xin would launch them, and x chained from the previous y.
func TestEncodePersistChain(t *testing.T) {
	a := persistTestChain()
	a.Table = Ptr{} // written before the table has a place
	b, err := EncodePersistChain(a)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != 3*PersistEntryBytes {
		t.Fatalf("%d bytes, want %d", len(b), 3*PersistEntryBytes)
	}
	nw, split, err := PersistChainShape(a)
	if err != nil {
		t.Fatal(err)
	}
	le := binary.LittleEndian
	for i, g := range a.GEMVs {
		e := b[i*PersistEntryBytes:]
		q := g
		q.RowsPerWarp, q.Split = nw, split
		l, err := QGEMVXIn(q, DevicePtr(4096), "bf16")
		if err != nil {
			t.Fatal(err)
		}
		wantX := uint64(4096)
		if i > 0 {
			wantX = uint64(a.GEMVs[i-1].Y.Offset)
		}
		got := []uint64{uint64(le.Uint32(e[0:])), uint64(le.Uint32(e[4:])), uint64(le.Uint32(e[8:])), le.Uint64(e[16:]), le.Uint64(e[24:]),
			le.Uint64(e[32:]), le.Uint64(e[40:]), le.Uint64(e[48:])}
		want := []uint64{uint64(g.N), uint64(g.K), uint64(l.Grid[0]), uint64(g.WRows), 0, 1 << 30, wantX, uint64(g.Y.Offset)}
		for j := range want {
			if got[j] != want[j] {
				t.Errorf("GEMV %d field %d = %d, want %d", i, j, got[j], want[j])
			}
		}
	}
	if _, err := PersistQGEMVChain(a); err == nil || !strings.Contains(err.Error(), "null or unaligned table") {
		t.Errorf("launch without a table: error %v", err)
	}
	a.Table = DevicePtr(8192)
	l, err := PersistQGEMVChain(a)
	if err != nil {
		t.Fatal(err)
	}
	if l.Grid[0] != 132 || l.Shmem != 2048+16*64 || l.Ints[1] != int64(nw) || l.Ints[2] != int64(split) {
		t.Errorf("launch grid %v, shmem %d, ints %v", l.Grid, l.Shmem, l.Ints)
	}
}

func TestPersistChainErrors(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func(*PersistChainArgs)
		want string
	}{
		{"empty", func(a *PersistChainArgs) { a.GEMVs = nil }, "no GEMVs"},
		{"x", func(a *PersistChainArgs) { a.X = Ptr{} }, "null x"},
		{"chain", func(a *PersistChainArgs) { a.GEMVs[1].K = 512 }, "previous GEMV's N is 1024"},
		{"two rows", func(a *PersistChainArgs) { a.GEMVs[2].T = 2 }, "GEMV 2: want one row"},
		{"types", func(a *PersistChainArgs) { a.GEMVs[1].WType = quant.Q4_K }, "q4_k weights after q8_0"},
		{"overlap", func(a *PersistChainArgs) { a.GEMVs[1].Y = a.GEMVs[0].Y }, "overlaps x"},
		{"long K", func(a *PersistChainArgs) { a.GEMVs[0].K = 8192 }, "at most 4096"},
		{"arena", func(a *PersistChainArgs) { a.GEMVs[0].W = Ptr{Base: BaseArena} }, "not a device address"},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := persistTestChain()
			c.edit(&a)
			_, err := EncodePersistChain(a)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want one containing %q", err, c.want)
			}
			if _, err := PersistQGEMVChain(a); err == nil && c.name != "arena" { // the launch holds no GEMV pointer
				t.Errorf("launch: no error")
			}
		})
	}
	for _, c := range []struct {
		name string
		edit func(*PersistChainArgs)
		want string
	}{
		{"grid", func(a *PersistChainArgs) { a.Grid = 0 }, "grid of 0"},
		{"counters", func(a *PersistChainArgs) { a.Counters = Ptr{} }, "null or unaligned table or counters"},
		{"table alignment", func(a *PersistChainArgs) { a.Table = DevicePtr(8200) }, "null or unaligned table or counters"},
		{"ring and prefetch", func(a *PersistChainArgs) { a.Ring, a.Prefetch = true, true }, "not both"},
		{"ring of q8_0 heads off 16 bytes", func(a *PersistChainArgs) {
			a.Ring = true
			a.GEMVs = a.GEMVs[:1]
			a.GEMVs[0].K, a.GEMVs[0].N, a.GEMVs[0].WRows = 1056, 1025, 1025 // 66 bytes of scales a row, 1 row in the last unit
		}, "66-byte heads a row"},
		{"ring of q6_k heads off 16 bytes", func(a *PersistChainArgs) {
			a.Ring = true
			a.GEMVs = a.GEMVs[:1]
			a.GEMVs[0].WType, a.GEMVs[0].K, a.GEMVs[0].N, a.GEMVs[0].WRows = quant.Q6_K, 1024, 1025, 1025 // 8 bytes a row
		}, "8-byte heads a row"},
	} {
		t.Run("launch "+c.name, func(t *testing.T) {
			a := persistTestChain()
			c.edit(&a)
			if _, err := PersistQGEMVChain(a); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want one containing %q", err, c.want)
			}
		})
	}
}

// TestPersistRing: the ring's launch lays out x's quantised copy, then as
// many slots of a unit's quants and scales as fit (at most 32), and passes
// the layout to the kernel.
func TestPersistRing(t *testing.T) {
	a := persistTestChain()
	a.Ring = true
	nw, split, err := PersistChainShape(a)
	if err != nil {
		t.Fatal(err)
	}
	l, err := PersistQGEMVChain(a)
	if err != nil {
		t.Fatal(err)
	}
	xoff, slot, ns := PersistRingLayout(quant.Q8_0, 2048, nw, split)
	ur := 8 / split * nw
	switch {
	case l.Kernel != "persist_qgemv_ring" || l.Ints[0] != int64(quant.Q8_0) || l.Ints[1] != int64(nw) || l.Ints[2] != int64(split):
		t.Errorf("launch %s", l.NameExpr())
	case xoff != 3072 || slot < ur*2048*17/16 || slot%128 != 0 || ns < 2 || ns > 32:
		t.Errorf("layout: x %d bytes, slots of %d for %d rows of 2048, %d of them", xoff, slot, ur, ns)
	case l.Shmem != xoff+ns*slot || l.Shmem > PersistRingShared:
		t.Errorf("shared memory %d, want %d (at most %d)", l.Shmem, xoff+ns*slot, PersistRingShared)
	case len(l.Args) != 6 || l.Args[3].Int != int64(xoff) || l.Args[4].Int != int64(slot) || l.Args[5].Int != int64(ns):
		t.Errorf("arguments %v", l.Args)
	}
	for _, c := range []struct {
		t                         quant.Type
		maxK, nw, split, slot, ns int
	}{
		{quant.Q8_0, 2048, 1, 8, 2176, 32},  // a row a unit: 2048 bytes, then 128 of scales; the most slots
		{quant.Q8_0, 2048, 4, 1, 69632, 3},  // 32 rows: 65,536 + 4,096
		{quant.Q8_0, 4096, 4, 1, 139264, 0}, // 32 rows of 4096: not two slots
		{quant.Q8_0, 1024, 2, 2, 8704, 25},  // 8 rows of 1024: 8,192 + 512
		{quant.Q4_K, 3072, 2, 2, 14208, 15}, // 8 rows of 12 bodies of 144 (13,824), 48 bytes of heads a row
		{quant.Q6_K, 1024, 1, 1, 6784, 32},  // 8 rows of 4 bodies of 208 (6,656), 8 bytes of heads a row
	} {
		_, slot, ns := PersistRingLayout(c.t, c.maxK, c.nw, c.split)
		if slot != c.slot || ns != c.ns {
			t.Errorf("PersistRingLayout(%s, %d, %d, %d): %d slots of %d bytes, want %d of %d", c.t, c.maxK, c.nw, c.split, ns, slot, c.ns, c.slot)
		}
	}
}

// TestPersistRingEveryType: the ring takes every quantised type at the
// chains TestPersistQGEMVChainGPU runs (GEMVs of 1024 x 2048 and 2048 x
// 1024).
func TestPersistRingEveryType(t *testing.T) {
	for _, qt := range QuantKernelTypes {
		a := persistTestChain()
		a.Ring = true
		for i := range a.GEMVs {
			a.GEMVs[i].WType = qt
		}
		l, err := PersistQGEMVChain(a)
		if err != nil {
			t.Errorf("%s: %v", qt, err)
			continue
		}
		if l.Ints[0] != int64(qt) || l.Shmem > PersistRingShared || l.Args[5].Int < 2 {
			t.Errorf("%s: launch %s, %d bytes of shared memory, %d slots", qt, l.NameExpr(), l.Shmem, l.Args[5].Int)
		}
	}
}

// TestPersistRingSlotLayout: what persist_qgemv_ring's two copies put in a
// slot (a unit's rows of bodies, then from align256(UR*body) their heads,
// read off a whole matrix's device layout at the places the kernel
// computes) is the device layout of those rows alone, as qgemv_rows reads
// a matrix of UR rows: every type's layout is row-separable.
func TestPersistRingSlotLayout(t *testing.T) {
	const N, UR = 20, 8
	for _, qt := range QuantKernelTypes {
		for _, K := range []int{1024, 3072} {
			bb, be := qt.BlockBytes(), qt.BlockElems()
			src := make([]byte, N*K/be*bb)
			for i := range src {
				src[i] = byte(i*131 + i/7 + K)
			}
			dev := repacked(t, qt, N, K, src)
			body, head := quantRowBytes(qt, K)
			for r0 := 0; r0 < N; r0 += UR {
				nr := min(UR, N-r0)
				slot := make([]byte, align256(UR*body)+UR*head)
				copy(slot, dev[int64(r0)*body:int64(r0+nr)*body])
				hs := align256(N*body) + int64(r0)*head
				copy(slot[align256(UR*body):], dev[hs:hs+int64(nr)*head])
				want := repacked(t, qt, nr, K, src[r0*K/be*bb:(r0+nr)*K/be*bb])
				if !bytes.Equal(slot[:int64(nr)*body], want[:int64(nr)*body]) {
					t.Errorf("%s K %d rows [%d, %d): the slot's bodies differ from the rows' own layout", qt, K, r0, r0+nr)
				}
				wh := align256(int64(nr) * body)
				if !bytes.Equal(slot[align256(UR*body):align256(UR*body)+int64(nr)*head], want[wh:wh+int64(nr)*head]) {
					t.Errorf("%s K %d rows [%d, %d): the slot's heads differ from the rows' own layout", qt, K, r0, r0+nr)
				}
			}
		}
	}
}
