package lower

import (
	"fmt"
	"slices"

	"lagc/quant"
)

// The routed experts of one decode token as one persistent launch: step 1a
// of docs/DECODE_MEGAKERNEL.md. QMoE's moe_gateup_qgemv and moe_down_qgemv
// (T = 1) become persist_moe_pair, whose blocks stream their gate+up rows
// and then their down rows through one shared-memory ring, so the down's
// weights arrive while the gate+up still runs, and a counter (every
// gate+up group done) replaces the launch boundary. Each row is summed as
// the launches sum it: the same bits (TestPersistMoEPairGPU). Lower plans
// it only where the opt-in fusion persistMoE is enabled (decode schedules,
// one token: PersistMoEPair on the decode plan's pair of launches);
// BenchmarkPersistMoE times it against QMoE's launches.

// PersistMoEArgs is one token's routed experts for persist_moe_pair.
type PersistMoEArgs struct {
	H, I, E, TopK int
	// XQ is x quantised as Q8XQuantize writes it (int8 [H], then its
	// scales at q8xScales(XQ, 1, H), or at XS where XS is not null).
	XQ, XS       Ptr
	Weights, IDs Ptr // f32 and i32 [TopK]
	Gate, Up     QMatrix
	Down         QMatrix
	WType        quant.Type // gate and up
	DownType     quant.Type // zero: WType
	// Act receives the routes' activations quantised (Q8XBytes(TopK, I)),
	// as QMoE's workspace holds them (or their scales at ActS where ActS
	// is not null).
	Act, ActS  Ptr
	Out        Ptr // [H] OutType
	OutType    string
	Accumulate bool
	// Counters: PersistMoECounterBytes, zero before the launch; it leaves
	// them zero (the blocks arrived, the gate+up groups done): a plan's
	// sync bytes (BaseSync) serve.
	Counters Ptr
	// Grid: every block must be resident at once (one an SM at most).
	Grid int
}

// PersistMoECounterBytes is the counter space of persist_moe_pair.
const PersistMoECounterBytes = 8

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
	gu := slotMatrixBytes(a.WType, 2*persistMoESub, a.H)
	dn := slotMatrixBytes(a.downType(), persistMoESub*a.TopK, a.I)
	slot, ns = ringSlots(xoff, max(gu, dn))
	return xoff, slot, ns
}

// PersistMoE is the persist_moe_pair launch of a.
func PersistMoE(a PersistMoEArgs) (Launch, error) {
	const op = "persist_moe_pair"
	dt := a.downType()
	// every copy, 8 rows from a multiple of 8 past Row0, starts and ends on 16 bytes
	copies := func(what string, q QMatrix, K int, t quant.Type) error {
		body, head := quantRowBytes(t, K)
		for _, n := range []int64{body, head} {
			if (int64(q.Row0)*n)%16 != 0 || (persistMoESub*n)%16 != 0 {
				return fmt.Errorf("%s: %s rows of %d-byte planes from row %d leave a copy off 16 bytes", op, what, n, q.Row0)
			}
		}
		return nil
	}
	if err := checkMoEStacks(op, a.Gate, a.Up, a.Down, a.E, a.H, a.I, a.WType, dt, copies); err != nil {
		return Launch{}, err
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
	xs, as := a.XS, a.ActS
	if xs.Null() {
		xs = q8xScales(a.XQ, 1, a.H)
	}
	if as.Null() {
		as = q8xScales(a.Act, a.TopK, a.I)
	}
	if !xs.Aligned(16) || !as.Aligned(16) {
		return Launch{}, fmt.Errorf("%s: the scales must be 16-byte aligned", op)
	}
	xoff, slot, ns := PersistMoELayout(a)
	if ns == 0 {
		return Launch{}, fmt.Errorf("%s: slots of %d bytes: two and the activations' %d do not fit %d", op, slot, xoff, PersistRingShared)
	}
	return kernel("persist.cu", op, []string{a.OutType}, []int64{int64(a.WType), int64(dt)}, dims(a.Grid), dims(256), xoff+ns*slot,
		i32(a.TopK), i32(a.H), i32(a.I), i32(a.E), ptrArg(a.XQ), ptrArg(xs), ptrArg(a.IDs), ptrArg(a.Weights),
		ptrArg(a.Gate.W), i64(int64(a.Gate.Total)), i64(int64(a.Gate.Row0)), ptrArg(a.Up.W), i64(int64(a.Up.Total)), i64(int64(a.Up.Row0)),
		ptrArg(a.Down.W), i64(int64(a.Down.Total)), i64(int64(a.Down.Row0)), ptrArg(a.Act), ptrArg(as),
		ptrArg(a.Out), i32(b2i(a.Accumulate)), ptrArg(a.Counters), i32(xoff), i32(slot), i32(ns)), nil
}

// persistMoEFusion (opt-in, decode only) runs a decode step's routed
// experts as persist_moe_pair: PersistMoEPair on each moe_gateup_qgemv
// (or _trig) launch followed by a moe_down_qgemv (or _pre, _trig) of one
// token, its counters at the schedule's sync bytes.
const persistMoEFusion = "persistMoE"

// PersistMoEPair is the gate+up launch g and the down launch d of one
// token's routed experts (QMoE's, as the decode schedule has them) as one
// persist_moe_pair launch of sms blocks, its counters at counters.
func PersistMoEPair(g, d Launch, sms int, counters Ptr) (Launch, error) {
	const op = "PersistMoEPair"
	if (g.Kernel != "moe_gateup_qgemv" && g.Kernel != "moe_gateup_qgemv_trig") || !isGateUp(g) {
		return Launch{}, fmt.Errorf("%s: %s is not a moe_gateup_qgemv launch", op, g.NameExpr())
	}
	if !slices.Contains([]string{"moe_down_qgemv", "moe_down_qgemv_trig", "moe_down_qgemv_pre"}, d.Kernel) || !isDown(d) {
		return Launch{}, fmt.Errorf("%s: %s is not a moe_down_qgemv launch", op, d.NameExpr())
	}
	ga, da := g.Args, d.Args
	k, H, I, E := int(ga[0].Int), int(ga[1].Int), int(ga[2].Int), int(ga[3].Int)
	R, _ := gateUpOutputs(g)
	T, dH := downTokens(d)
	switch {
	case R != int64(k) || T != 1:
		return Launch{}, fmt.Errorf("%s: %d routes of %d tokens: one token's only", op, R, T)
	case int(da[0].Int) != k || int(da[1].Int) != H || int(da[2].Int) != I || int(da[3].Int) != E || int(dH) != H:
		return Launch{}, fmt.Errorf("%s: the down's k, H, I, E (%d, %d, %d, %d) are not the gate+up's (%d, %d, %d, %d)",
			op, da[0].Int, da[1].Int, da[2].Int, da[3].Int, k, H, I, E)
	case da[6].Ptr() != ga[13].Ptr() || da[7].Ptr() != ga[14].Ptr() || da[9].Ptr() != ga[6].Ptr():
		return Launch{}, fmt.Errorf("%s: the down reads other activations or routes than the gate+up writes and reads", op)
	}
	return PersistMoE(PersistMoEArgs{H: H, I: I, E: E, TopK: k, XQ: ga[4].Ptr(), XS: ga[5].Ptr(), IDs: ga[6].Ptr(), Weights: da[8].Ptr(),
		Gate:  QMatrix{W: ga[7].Ptr(), Total: int(ga[8].Int), Row0: int(ga[9].Int)},
		Up:    QMatrix{W: ga[10].Ptr(), Total: int(ga[11].Int), Row0: int(ga[12].Int)},
		Down:  QMatrix{W: da[10].Ptr(), Total: int(da[4].Int), Row0: int(da[5].Int)},
		WType: quant.Type(g.Ints[0]), DownType: quant.Type(d.Ints[0]), Act: ga[13].Ptr(), ActS: ga[14].Ptr(),
		Out: da[11].Ptr(), OutType: d.DTypes[0], Accumulate: da[12].Int != 0, Counters: counters, Grid: sms})
}

// persistMoE applies PersistMoEPair to each such pair of a decode
// schedule's launches where the plan enables persistMoEFusion, in place,
// and returns the sync bytes it needs (0: none applied).
func (p *Plan) persistMoE(steps [][]Launch) int64 {
	if slices.Contains(p.fusionsOff(), persistMoEFusion) || p.SMs <= 0 {
		return 0
	}
	var need int64
	for i, ls := range steps {
		out := ls[:0:0]
		for j := 0; j < len(ls); j++ {
			if j+1 < len(ls) {
				if f, err := PersistMoEPair(ls[j], ls[j+1], p.SMs, Ptr{BaseSync, 0}); err == nil {
					out = append(out, f)
					need = PersistMoECounterBytes
					j++
					continue
				}
			}
			out = append(out, ls[j])
		}
		steps[i] = out
	}
	return need
}
