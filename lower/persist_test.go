package lower

import (
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
