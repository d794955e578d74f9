package lower

import (
	"encoding/binary"
	"fmt"

	"lagc/quant"
)

// A persistent GEMV chain: step 0 of docs/DECODE_MEGAKERNEL.md. One launch
// runs dependent quantised GEMVs (each one's y the next one's x), the
// blocks of GEMV g waiting on a counter that GEMV g-1's blocks count
// themselves done at, instead of a launch boundary between them. Each
// GEMV's units are qgemv_xin's blocks, computed by the same device
// function (qgemv_rows) with the same shape, so y gets the same bits as
// the launches give. Lower does not plan it: BenchmarkPersistBoundary
// times it against the same GEMVs as qgemv_xin launches, to measure what a
// boundary costs before a decode layer is built on counters.

// PersistEntryBytes is the size of one GEMV's entry in the device table.
const PersistEntryBytes = 64

// PersistChainArgs is one chain. Every GEMV has one bf16 activation row
// and bf16 y, the same weight type and the same kernel shape (RowsPerWarp
// and Split, chosen for the first GEMV where zero); GEMV g+1 reads GEMV g's
// y as its x, so its K is GEMV g's N.
type PersistChainArgs struct {
	GEMVs []QGEMVArgs
	// X is the first GEMV's activations (bf16 [K]).
	X Ptr
	// Table holds EncodePersistChain's bytes (PersistEntryBytes a GEMV).
	Table Ptr
	// Counters: PersistCounterBytes(len(GEMVs)) bytes, zero before the
	// first launch and never reset: an epoch (launches done), the blocks
	// arrived at the end, each GEMV's units done. A launch waits for
	// (epoch+1) times a GEMV's units, so replays need no reset launch.
	Counters Ptr
	// Grid is the blocks of the launch: every one must be resident at once
	// (the waits would otherwise deadlock; the kernel traps after about
	// 2^26 polls instead of hanging). PersistChainMaxBlocksPerSM a
	// multiprocessor at most.
	Grid int
	// Prefetch has each block ask L2 for its first unit's weights of a
	// GEMV before it waits for the GEMV's input (q8_0 only).
	Prefetch bool
}

// PersistChainMaxBlocksPerSM is the kernel's launch bound: 2 blocks of 256
// threads an SM are guaranteed registers; shared memory is at most 6 KiB
// a block.
const PersistChainMaxBlocksPerSM = 2

// PersistCounterBytes is the counter space a chain of n GEMVs needs.
func PersistCounterBytes(n int) int64 { return 4 * int64(n+2) }

// persistShape checks the chain and returns its GEMVs' common shape and
// each one's launch-equivalent block count.
func (a PersistChainArgs) persistShape() (nw, split int, blocks []int, err error) {
	if len(a.GEMVs) == 0 {
		return 0, 0, nil, fmt.Errorf("persist_qgemv_chain: no GEMVs")
	}
	if a.X.Null() {
		return 0, 0, nil, fmt.Errorf("persist_qgemv_chain: null x")
	}
	first := a.GEMVs[0]
	for i, g := range a.GEMVs {
		switch {
		case g.T != 1 || g.YType != "bf16" || g.SwiGLU || g.Accumulate:
			return 0, 0, nil, fmt.Errorf("persist_qgemv_chain: GEMV %d: want one row, bf16 y, no SwiGLU, no accumulate", i)
		case g.WType != first.WType:
			return 0, 0, nil, fmt.Errorf("persist_qgemv_chain: GEMV %d: %s weights after %s", i, g.WType, first.WType)
		case i > 0 && g.K != a.GEMVs[i-1].N:
			return 0, 0, nil, fmt.Errorf("persist_qgemv_chain: GEMV %d: K %d, the previous GEMV's N is %d", i, g.K, a.GEMVs[i-1].N)
		case g.K+g.K/2 > 6<<10:
			return 0, 0, nil, fmt.Errorf("persist_qgemv_chain: GEMV %d: K %d (at most 4096)", i, g.K)
		}
		if i > 0 {
			g.RowsPerWarp, g.Split = nw, split
		}
		n, s, err := qgemvShape("persist_qgemv_chain", g)
		if err != nil {
			return 0, 0, nil, fmt.Errorf("GEMV %d: %w", i, err)
		}
		if i == 0 {
			nw, split = n, s
		}
		y := g.Y
		x := a.X
		if i > 0 {
			x = a.GEMVs[i-1].Y
		}
		if overlaps(x, 2*int64(g.K), y, 2*int64(g.N)) {
			return 0, 0, nil, fmt.Errorf("persist_qgemv_chain: GEMV %d: y %s overlaps x %s", i, y, x)
		}
		blocks = append(blocks, ceilDiv(ceilDiv(g.N, nw), 8/split))
	}
	return nw, split, blocks, nil
}

// PersistChainShape is the rows per warp and split every GEMV of the chain
// runs with (for the launches it is measured against).
func PersistChainShape(a PersistChainArgs) (nw, split int, err error) {
	nw, split, _, err = a.persistShape()
	return nw, split, err
}

// EncodePersistChain is the device table of a's GEMVs: per GEMV int32 N,
// K, blocks, 0; int64 rows, row0; u64 w, x, y; 8 bytes of padding
// (persist.cu's PersistGEMV). Pointers must be device addresses.
func EncodePersistChain(a PersistChainArgs) ([]byte, error) {
	_, _, blocks, err := a.persistShape()
	if err != nil {
		return nil, err
	}
	out := make([]byte, PersistEntryBytes*len(a.GEMVs))
	for i, g := range a.GEMVs {
		x := a.X
		if i > 0 {
			x = a.GEMVs[i-1].Y
		}
		for _, p := range []Ptr{g.W, x, g.Y} {
			if p.Base != BaseDevice {
				return nil, fmt.Errorf("persist_qgemv_chain: GEMV %d: pointer %s is not a device address", i, p)
			}
		}
		e := out[i*PersistEntryBytes:]
		le := binary.LittleEndian
		le.PutUint32(e[0:], uint32(g.N))
		le.PutUint32(e[4:], uint32(g.K))
		le.PutUint32(e[8:], uint32(blocks[i]))
		le.PutUint64(e[16:], uint64(g.WRows))
		le.PutUint64(e[24:], uint64(g.Row0))
		le.PutUint64(e[32:], uint64(g.W.Offset))
		le.PutUint64(e[40:], uint64(x.Offset))
		le.PutUint64(e[48:], uint64(g.Y.Offset))
	}
	return out, nil
}

// PersistQGEMVChain is the launch of a (its table already written).
func PersistQGEMVChain(a PersistChainArgs) (Launch, error) {
	nw, split, _, err := a.persistShape()
	if err != nil {
		return Launch{}, err
	}
	if a.Table.Null() || a.Counters.Null() || !a.Table.Aligned(16) || !a.Counters.Aligned(4) {
		return Launch{}, fmt.Errorf("persist_qgemv_chain: null or unaligned table or counters")
	}
	if a.Grid <= 0 {
		return Launch{}, fmt.Errorf("persist_qgemv_chain: grid of %d blocks", a.Grid)
	}
	if a.Prefetch && a.GEMVs[0].WType != quant.Q8_0 {
		return Launch{}, fmt.Errorf("persist_qgemv_chain: the weight prefetch is for q8_0, not %s", a.GEMVs[0].WType)
	}
	maxK := 0
	for _, g := range a.GEMVs {
		maxK = max(maxK, g.K)
	}
	return kernel("persist.cu", "persist_qgemv_chain", []string{"bf16"}, []int64{int64(a.GEMVs[0].WType), int64(nw), int64(split), int64(b2i(a.Prefetch))},
		dims(a.Grid), dims(256), maxK+16*(maxK/32),
		i32(len(a.GEMVs)), ptrArg(a.Table), ptrArg(a.Counters)), nil
}
