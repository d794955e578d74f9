package lower

import (
	"fmt"

	"lagc/quant"
)

// The routed experts of one decode token as one persistent launch: step 1a
// of docs/DECODE_MEGAKERNEL.md. QMoE's moe_gateup_qgemv and moe_down_qgemv
// (T = 1) become persist_moe_pair, whose blocks stream their gate+up rows
// and then their down rows through one shared-memory ring, so the down's
// weights arrive while the gate+up still runs, and a counter (every
// gate+up group done) replaces the launch boundary. Each row is summed as
// the launches sum it: the same bits (TestPersistMoEPairGPU). Lower does
// not plan it: BenchmarkQMoE's "persist" rows time it against QMoE's
// launches.

// PersistMoEArgs is one token's routed experts for persist_moe_pair.
type PersistMoEArgs struct {
	H, I, E, TopK int
	// XQ is x quantised as Q8XQuantize writes it (int8 [H], then its
	// scales at q8xScales(XQ, 1, H)).
	XQ           Ptr
	Weights, IDs Ptr // f32 and i32 [TopK]
	Gate, Up     QMatrix
	Down         QMatrix
	WType        quant.Type // gate and up
	DownType     quant.Type // zero: WType
	// Act receives the routes' activations quantised (Q8XBytes(TopK, I)),
	// as QMoE's workspace holds them.
	Act        Ptr
	Out        Ptr // [H] OutType
	OutType    string
	Accumulate bool
	// Counters: PersistMoECounterBytes, zero before the first launch and
	// never reset (an epoch, the blocks arrived, the gate+up groups done).
	Counters Ptr
	// Grid: every block must be resident at once (one an SM at most).
	Grid int
}

// PersistMoECounterBytes is the counter space of persist_moe_pair.
const PersistMoECounterBytes = 12

// persistMoESub is persist.cu's PM_SUB: a gate+up sub-unit's i and a down
// unit's h (a warp each of a block of 8).
const persistMoESub = 8

func (a PersistMoEArgs) downType() quant.Type {
	if a.DownType == 0 {
		return a.WType
	}
	return a.DownType
}

// PersistMoELayout is persist_moe_pair's shared memory: x's and the
// routes' quantised activations (xoff bytes), then ns slots of slot bytes,
// each the larger of a gate+up sub-unit (8 gate and 8 up rows of H) and a
// down unit (8 rows of I of each route) in quant.cu's matrix layout. ns is
// 0 where not two slots fit.
func PersistMoELayout(a PersistMoEArgs) (xoff, slot, ns int) {
	xoff = ceilDiv(3*a.H/2+3*a.TopK*a.I/2, 128) * 128
	gb, gh := quantRowBytes(a.WType, a.H)
	db, dh := quantRowBytes(a.downType(), a.I)
	gu := align256(2*persistMoESub*gb) + 2*persistMoESub*gh
	dn := align256(int64(persistMoESub*a.TopK)*db) + int64(persistMoESub*a.TopK)*dh
	slot = int((max(gu, dn) + 127) / 128 * 128)
	ns = min(persistRingMaxSlots, (PersistRingShared-xoff)/slot)
	if ns < 2 {
		ns = 0
	}
	return xoff, slot, ns
}

// PersistMoE is the persist_moe_pair launch of a.
func PersistMoE(a PersistMoEArgs) (Launch, error) {
	const op = "persist_moe_pair"
	dt := a.downType()
	for _, m := range []struct {
		what string
		q    QMatrix
		n, k int
		t    quant.Type
	}{{"gate", a.Gate, a.E * a.I, a.H, a.WType}, {"up", a.Up, a.E * a.I, a.H, a.WType}, {"down", a.Down, a.E * a.H, a.I, dt}} {
		if err := checkQuantMatrix(op, m.t, m.q.Total, m.k); err != nil {
			return Launch{}, err
		}
		if m.q.Row0 < 0 || m.q.Row0+m.n > m.q.Total || m.q.W.Null() || !m.q.W.Aligned(16) {
			return Launch{}, fmt.Errorf("%s: %s stack of %d rows from %d outside its matrix of %d, or unaligned", op, m.what, m.n, m.q.Row0, m.q.Total)
		}
		// every copy, 8 rows from a multiple of 8 past Row0, starts and ends on 16 bytes
		body, head := quantRowBytes(m.t, m.k)
		for _, n := range []int64{body, head} {
			if (int64(m.q.Row0)*n)%16 != 0 || (persistMoESub*n)%16 != 0 {
				return Launch{}, fmt.Errorf("%s: %s rows of %d-byte planes from row %d leave a copy off 16 bytes", op, m.what, n, m.q.Row0)
			}
		}
	}
	switch {
	case a.TopK <= 0 || a.TopK > QMoEMaxTopK || a.E <= 0:
		return Launch{}, fmt.Errorf("%s: k %d (1 to %d), E %d", op, a.TopK, QMoEMaxTopK, a.E)
	case a.H%persistMoESub != 0 || a.I%32 != 0:
		return Launch{}, fmt.Errorf("%s: H %d (a multiple of %d), I %d (of 32)", op, a.H, persistMoESub, a.I)
	case a.OutType != "f32" && a.OutType != "bf16":
		return Launch{}, fmt.Errorf("%s: output dtype %q (f32 or bf16)", op, a.OutType)
	case a.Grid <= 0:
		return Launch{}, fmt.Errorf("%s: grid of %d blocks", op, a.Grid)
	}
	for _, p := range []Ptr{a.XQ, a.Weights, a.IDs, a.Act, a.Out, a.Counters} {
		if p.Null() {
			return Launch{}, fmt.Errorf("%s: null pointer", op)
		}
	}
	if !a.XQ.Aligned(16) || !a.Act.Aligned(16) || !a.Counters.Aligned(4) {
		return Launch{}, fmt.Errorf("%s: x and the activations must be 16-byte aligned, the counters 4", op)
	}
	xoff, slot, ns := PersistMoELayout(a)
	if ns == 0 {
		return Launch{}, fmt.Errorf("%s: slots of %d bytes: two and the activations' %d do not fit %d", op, slot, xoff, PersistRingShared)
	}
	return kernel("persist.cu", op, []string{a.OutType}, []int64{int64(a.WType), int64(dt)}, dims(a.Grid), dims(256), xoff+ns*slot,
		i32(a.TopK), i32(a.H), i32(a.I), i32(a.E), ptrArg(a.XQ), ptrArg(q8xScales(a.XQ, 1, a.H)), ptrArg(a.IDs), ptrArg(a.Weights),
		ptrArg(a.Gate.W), i64(int64(a.Gate.Total)), i64(int64(a.Gate.Row0)), ptrArg(a.Up.W), i64(int64(a.Up.Total)), i64(int64(a.Up.Row0)),
		ptrArg(a.Down.W), i64(int64(a.Down.Total)), i64(int64(a.Down.Row0)), ptrArg(a.Act), ptrArg(q8xScales(a.Act, a.TopK, a.I)),
		ptrArg(a.Out), i32(b2i(a.Accumulate)), ptrArg(a.Counters), i32(xoff), i32(slot), i32(ns)), nil
}
