package lower

import "fmt"

// The Hopper GEMMs of gemm_hopper.cu (sm_90a): TMA loads into swizzled
// shared memory, an mbarrier pipeline, a producer warpgroup and two
// consumer warpgroups running wgmma, persistent CTAs over 128 x BN output
// tiles.

// Epilogues of the Hopper GEMMs.
const (
	EpiStore      = 0
	EpiAccumulate = 1 // y += x w^T
	EpiSwiGLU     = 2 // w = [gate; up]; y = silu(x gate^T) * (x up^T)
)

// HopperSmem is gemm_wgmma's dynamic shared memory for tile width bn:
// pipeline stages of a 128 x 64 x tile and a bn x 64 w tile, and 1 KiB to
// align them for the 128-byte swizzle.
func HopperSmem(bn int) int {
	return hopperStages(bn)*(128*64*2+bn*64*2) + 1024
}

// hopperStages is gemm_wgmma's pipeline depth at tile width bn:
// WgCfg<BN>::STAGES in gemm_hopper.cu (TestSmemAgrees).
func hopperStages(bn int) int {
	if bn == 256 {
		return 4
	}
	return 6
}

// HopperSched is the wgmma GEMM's consumer schedule: how its two consumer
// warpgroups share the output tiles.
type HopperSched int

const (
	// SchedAuto: ping-pong at tile width 128 for K up to PingPongMaxK but
	// for SwiGLU, cooperative otherwise (BenchmarkGEMMHopper on the H200,
	// T=2048: the shared down, K 1024, 24.0 -> 22.1 us; q,k,v,gate, K 3072,
	// even; K 9216 and 12288 about 1% slower; SwiGLU 2-4% slower).
	SchedAuto HopperSched = iota
	// SchedCooperative: both warpgroups on each 128-row tile, 64 rows each;
	// the tile's epilogue leaves the tensor cores idle.
	SchedCooperative
	// SchedPingPong: each warpgroup on every other tile, all 128 rows, so
	// that one's epilogue runs beside the other's MMAs. Tile width 128
	// only: 256 would need 256 accumulators a thread.
	SchedPingPong
)

func (s HopperSched) String() string {
	switch s {
	case SchedAuto:
		return "auto"
	case SchedCooperative:
		return "cooperative"
	case SchedPingPong:
		return "pingpong"
	}
	return fmt.Sprintf("HopperSched(%d)", int(s))
}

// PingPongMaxK is the largest K SchedAuto runs ping-pong: past it a tile's
// many k-blocks leave its epilogue too small a share to hide.
const PingPongMaxK = 3072

// pingPong says whether a tile-width-bn GEMM of depth k with epilogue epi
// runs ping-pong under s.
func (s HopperSched) pingPong(bn, k, epi int) (bool, error) {
	switch s {
	case SchedAuto:
		return bn <= 128 && k <= PingPongMaxK && epi != EpiSwiGLU, nil
	case SchedCooperative:
		return false, nil
	case SchedPingPong:
		if bn > 128 {
			return false, fmt.Errorf("wgmma tile width %d cannot run ping-pong (128 at most)", bn)
		}
		return true, nil
	}
	return false, fmt.Errorf("wgmma schedule %v", s)
}

// HopperBN is the tile width (weight rows per tile: 128 or 256) for an
// M x N output: the one whose tiles fill the GPU's waves better, 256 on a
// tie (a wider tile reuses each x tile more).
func HopperBN(M, N int, swiglu bool, sms int) int {
	best, bestEff := 256, -1.0
	for _, bn := range []int{256, 128} {
		ow := bn
		if swiglu {
			ow /= 2
		}
		tiles := ceilDiv(M, 128) * ceilDiv(N, ow)
		waves := ceilDiv(tiles, sms)
		if eff := float64(tiles) / float64(waves*sms); eff > bestEff+1e-9 {
			best, bestEff = bn, eff
		}
	}
	return best
}

// hopperOK says why a cannot run on the Hopper GEMM, or nil.
func hopperOK(a MatMulArgs) error {
	switch {
	case a.CC < 90:
		return fmt.Errorf("compute capability %d.%d (the wgmma GEMM needs 9.0)", a.CC/10, a.CC%10)
	case a.PrefillMMA:
		return fmt.Errorf("prefill GEMMs kept on mma.sync")
	case a.XType != "bf16" || a.WType != "bf16":
		return fmt.Errorf("x and w are %s and %s (the wgmma GEMM reads bf16)", a.XType, a.WType)
	case a.K%8 != 0 || !a.X.Aligned(16) || !a.W.Aligned(16):
		return fmt.Errorf("an inner dimension K of %d or the operands' alignment do not allow 16-byte TMA rows", a.K)
	case a.SwiGLU && a.Accumulate:
		return fmt.Errorf("no SwiGLU epilogue that also accumulates")
	}
	return nil
}

// epilogue is the Hopper GEMMs' epilogue for a: SwiGLU, accumulate into
// y, or store.
func (a MatMulArgs) epilogue() int {
	switch {
	case a.SwiGLU:
		return EpiSwiGLU
	case a.Accumulate:
		return EpiAccumulate
	}
	return EpiStore
}

// HopperGEMM is the launch of a (T > GEMVMaxRows rows) on gemm_wgmma.
func HopperGEMM(a MatMulArgs) (Launch, error) {
	if err := a.validate(); err != nil {
		return Launch{}, err
	}
	if err := hopperOK(a); err != nil {
		return Launch{}, fmt.Errorf("matmul: %w", err)
	}
	epi, wrows := a.epilogue(), a.N
	if a.SwiGLU {
		wrows = 2 * a.N
	}
	sm := sms(a.SMs)
	bn := HopperBN(a.T, a.N, a.SwiGLU, sm)
	switch a.HopperBN {
	case 0:
	case 128, 256:
		bn = a.HopperBN
	default:
		return Launch{}, fmt.Errorf("matmul: wgmma tile width %d (128 or 256)", a.HopperBN)
	}
	if a.Split != nil && !SplitFits(a.Split, bn) {
		if a.HopperBN != 0 || !SplitFits(a.Split, 128) {
			return Launch{}, fmt.Errorf("matmul: split outputs' columns start on multiples of the tile width %d only", bn)
		}
		bn = 128
	}
	pp, err := a.HopperSched.pingPong(bn, a.K, epi)
	if err != nil {
		return Launch{}, fmt.Errorf("matmul: %w", err)
	}
	box := bn
	if a.SwiGLU {
		box = bn / 2
	}
	tiles := ceilDiv(a.T, 128) * ceilDiv(a.N, box)
	y, split, err := a.splitArgs()
	if err != nil {
		return Launch{}, err
	}
	return kernel("gemm_hopper.cu", "gemm_wgmma", []string{a.YType}, []int64{int64(bn), int64(epi), 0, int64(b2i(pp)), int64(b2i(a.Split != nil))},
		dims(max(1, min(tiles, sm))), dims(384), HopperSmem(bn),
		append([]Arg{tmapArg(a.X, TMap{Elem: "bf16", Rows: int64(a.T), Cols: int64(a.K), LD: int64(a.K), BoxRows: 128, BoxCols: 64}),
			tmapArg(a.W, TMap{Elem: "bf16", Rows: int64(wrows), Cols: int64(a.K), LD: int64(a.K), BoxRows: box, BoxCols: 64}),
			i32(a.T), i32(a.N), i32(a.K), ptrArg(y), i32(a.N), ptrArg(Ptr{}), ptrArg(Ptr{}), i32(0)}, split...)...), nil
}

// splitArgs are gemm_wgmma's first output and its trailing split
// arguments (y1, y2, y3, c1, c2, c3; WgSplit): a's Split, or none (every
// column to Y).
func (a MatMulArgs) splitArgs() (Ptr, []Arg, error) {
	if a.Split == nil {
		return a.Y, noSplit(a.N), nil
	}
	if len(a.Split) > MaxSplit || a.SwiGLU || a.Accumulate {
		return Ptr{}, nil, fmt.Errorf("matmul: a split GEMM writes at most %d outputs, plain (%d, SwiGLU %v, accumulate %v)",
			MaxSplit, len(a.Split), a.SwiGLU, a.Accumulate)
	}
	ys := make([]Arg, 0, 6)
	cs := make([]Arg, 0, 3)
	col := 0
	for i, o := range a.Split {
		if o.N <= 0 {
			return Ptr{}, nil, fmt.Errorf("matmul: split output %d has %d columns", i, o.N)
		}
		if i > 0 {
			ys, cs = append(ys, ptrArg(o.Y)), append(cs, i32(col))
		}
		col += o.N
	}
	if col != a.N {
		return Ptr{}, nil, fmt.Errorf("matmul: split outputs of %d columns for N %d", col, a.N)
	}
	for len(ys) < 3 {
		ys, cs = append(ys, ptrArg(Ptr{})), append(cs, i32(a.N))
	}
	return a.Split[0].Y, append(ys, cs...), nil
}

// SplitFits says whether every output of split but the last has a width
// that is a multiple of w: gemm_wgmma's tiles of w columns then each lie
// in one output.
func SplitFits(split []SplitOut, w int) bool {
	for _, o := range split[:max(len(split)-1, 0)] {
		if o.N%w != 0 {
			return false
		}
	}
	return true
}

// noSplit is gemm_wgmma's trailing split arguments for every column to y.
func noSplit(n int) []Arg {
	return []Arg{ptrArg(Ptr{}), ptrArg(Ptr{}), ptrArg(Ptr{}), i32(n), i32(n), i32(n)}
}

// moeHopperOK says why the grouped experts of a cannot run on the wgmma
// core, or nil: it needs bf16 stacks with the up stack right after the
// gate stack (one matrix of 2*E*I rows for its TMA map).
func moeHopperOK(a MoEArgs) error {
	switch {
	case a.CC < 90 || a.PrefillMMA:
		return fmt.Errorf("not a Hopper target, or prefill GEMMs kept on mma.sync")
	case a.H%64 != 0 || a.I%64 != 0:
		return fmt.Errorf("hidden size H %d and expert size I %d must be multiples of 64", a.H, a.I)
	case a.Up != a.Gate.At(2*int64(a.E)*int64(a.I)*int64(a.H)):
		return fmt.Errorf("the up stack does not follow the gate stack")
	}
	return nil
}

// moeParts are the grouped experts' launches on the wgmma core by role:
// the routes grouped by expert (hist, schedule, scatter), the copy of
// their x rows into expert order (moe_gather_rows), the grouped gate+up
// GEMM with the SwiGLU epilogue, the grouped down GEMM and the fixed-order
// combine. The tile table stays on the device: nothing waits for the
// host.
type moeParts struct {
	routing                       []Launch
	gather, gateUp, down, combine Launch
}

func (p moeParts) launches() []Launch {
	return append(append([]Launch(nil), p.routing...), p.gather, p.gateUp, p.down, p.combine)
}

// moeHopper returns the grouped experts' launches on the wgmma core (bf16
// stacks): moe_gather_rows copies the routes' x rows into expert order,
// then gemm_wgmma's grouped form (GROUPED 1) runs the gate+up GEMM and the
// down GEMM. (A gate+up GEMM gathering the rows itself, LAGC_MOE_GATHER=1,
// and the GEMMs on 2-CTA clusters multicasting x, LAGC_MOE_MC=1, measured
// no faster and were removed: docs/PERF.md.)
func moeHopper(a MoEArgs, l MoELayout) []Launch {
	ws := func(off int64) Arg { return ptrArg(a.Workspace.At(off)) }
	wsp := func(off int64) Ptr { return a.Workspace.At(off) }
	R := a.T * a.TopK
	EI := a.E * a.I
	grouped := func(x Ptr, K int, w Ptr, wrows, N, epi, upRow, expertRows int, y Ptr, pp bool) Launch {
		bn := 256
		if pp {
			bn = 128
		}
		box := bn
		if epi == EpiSwiGLU {
			box = bn / 2
		}
		return kernel("gemm_hopper.cu", "gemm_wgmma", []string{"bf16"}, []int64{int64(bn), int64(epi), 1, int64(b2i(pp)), 0},
			dims(sms(a.SMs)), dims(384), HopperSmem(bn),
			append([]Arg{tmapArg(x, TMap{Elem: "bf16", Rows: int64(R), Cols: int64(K), LD: int64(K), BoxRows: 128, BoxCols: 64}),
				tmapArg(w, TMap{Elem: "bf16", Rows: int64(wrows), Cols: int64(K), LD: int64(K), BoxRows: box, BoxCols: 64}),
				i32(R), i32(N), i32(K), ptrArg(y), i32(upRow), ws(l.Tiles), ws(l.NTiles), i32(expertRows)}, noSplit(N)...)...)
	}
	p := moeHopperParts(a, l, false)
	p.gateUp = grouped(wsp(l.XG), a.H, a.Gate, 2*EI, a.I, EpiSwiGLU, EI, a.I, wsp(l.Act), false)
	p.down = grouped(wsp(l.Act), a.I, a.Down, a.E*a.H, a.H, EpiStore, 0, a.H, wsp(l.Ys), a.HopperDown == SchedPingPong)
	return p.launches()
}

// moeHopperParts builds the grouped experts' launches but the two GEMMs,
// which the caller puts in (moeHopper bf16, moeHopperQ quantised): the
// routing, moe_gather_rows's copy of the routes' x rows (f16:
// moe_gather_rows_f16's, converted) and the combine.
func moeHopperParts(a MoEArgs, l MoELayout, f16 bool) moeParts {
	ws := func(off int64) Arg { return ptrArg(a.Workspace.At(off)) }
	R := a.T * a.TopK
	name := "moe_gather_rows"
	if f16 {
		name = "moe_gather_rows_f16"
	}
	return moeParts{routing: MoERouting(a, l),
		gather: kernel("gemm_hopper.cu", name, nil, nil, dims(min(ceilDiv(R, 8), strideBlocks)), dims(256), 0,
			i32(R), i32(a.TopK), i32(a.H), ptrArg(a.X), ws(l.Sorted), ws(l.XG)),
		combine: MoECombine(a.OutType, a.T, a.TopK, a.H, a.Weights, a.Workspace.At(l.Pos), a.Workspace.At(l.Ys), a.Out, a.Accumulate)}
}
