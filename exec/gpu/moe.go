package gpu

import (
	"fmt"

	"lagc/cuda"
	"lagc/lower"
	"lagc/quant"
)

// MoEPath selects the kernels of the routed experts (lower.MoEPath).
type MoEPath = lower.MoEPath

// The paths: MoEAuto lets lower choose (the decode path for T <=
// GEMVMaxRows or where the grouped path cannot run).
const (
	MoEAuto    = lower.MoEAuto
	MoEDecode  = lower.MoEDecode
	MoEGrouped = lower.MoEGrouped
)

// ExpertOrder is the order the grouped path schedules experts in.
type ExpertOrder = lower.ExpertOrder

const (
	ExpertsByID   = lower.ExpertsByID   // ascending expert id
	ExpertsByLoad = lower.ExpertsByLoad // descending routes per expert, ties by id
)

// MaxExperts is the most experts the grouped path schedules (one block).
const MaxExperts = lower.MaxExperts

// MoEArgs is one moe_experts op:
// out[t] = sum_j weights[t,j] * down_e(silu(gate_e x_t) * up_e x_t), e = ids[t,j].
type MoEArgs struct {
	T, H, I, E, TopK int
	X                cuda.DevicePtr // [T,H] XType
	Weights          cuda.DevicePtr // f32 [T,TopK]
	IDs              cuda.DevicePtr // i32 [T,TopK]; ids outside [0,E) contribute nothing
	Gate, Up         cuda.DevicePtr // [E,I,H] WType
	Down             cuda.DevicePtr // [E,H,I] WType
	Out              cuda.DevicePtr // [T,H] OutType
	// Element types: F32 or BF16; the grouped path needs bf16 x and weights.
	XType, WType, OutType cuda.DType
	Accumulate            bool // out += the routed sum
	// Workspace of at least MoEWorkspaceBytes(a) bytes, 16-byte aligned;
	// it needs no initialisation and holds nothing between calls.
	Workspace cuda.DevicePtr
	Path      MoEPath
	Order     ExpertOrder
	// Tile forces the grouped GEMMs' tensor-core tile (zero: automatic).
	Tile MMATile
	// CC is the target compute capability: 90 and up runs the grouped GEMMs
	// on the wgmma core where they apply (the up stack must then follow the
	// gate stack); 0 keeps mma.sync. SMs sizes its persistent grid (0: 132).
	CC, SMs int
	// Quantised stacks (WQuant a block type): rows of matrices in the
	// device layout; Gate, Up, Down and WType are then unused.
	WQuant            quant.Type
	QGate, QUp, QDown QMatrix
	// DownQuant is the down stack's block type where it is not WQuant's
	// (lower.MoEArgs.DownType); zero: WQuant.
	DownQuant quant.Type
	// Band is the grouped GEMMs' N-band in output columns (lower.MoEArgs).
	Band int
	// QMoE forces the grouped GEMMs' shape on gemm_wgmma_q (token tile,
	// CTAs, warpgroups, MMA widths, loop, operand type) and whether bf16
	// stacks run there, as LAGC_QMOE_SHAPE does (lower.QMoEForce; the zero
	// value: lower's choices).
	QMoE lower.QMoEForce
	// HopperDown is the bf16 grouped down GEMM's schedule
	// (lower.MoEArgs.HopperDown).
	HopperDown lower.HopperSched
}

func (a MoEArgs) lower() lower.MoEArgs {
	if a.WQuant.Quantized() {
		b := a
		b.WQuant, b.Gate, b.Up, b.Down = 0, a.QGate.W, a.QUp.W, a.QDown.W
		l := b.lower()
		l.WType, l.QGate, l.QUp, l.QDown = a.WQuant.String(), a.QGate.lower(), a.QUp.lower(), a.QDown.lower()
		if a.DownQuant != 0 && a.DownQuant != a.WQuant {
			l.DownType = a.DownQuant.String()
		}
		return l
	}
	return lower.MoEArgs{T: a.T, H: a.H, I: a.I, E: a.E, TopK: a.TopK,
		X: ptr(a.X), Weights: ptr(a.Weights), IDs: ptr(a.IDs), Gate: ptr(a.Gate), Up: ptr(a.Up), Down: ptr(a.Down), Out: ptr(a.Out),
		XType: a.XType.String(), WType: a.WType.String(), OutType: a.OutType.String(), Accumulate: a.Accumulate,
		Workspace: ptr(a.Workspace), Path: a.Path, Order: a.Order, Tile: a.Tile, Band: a.Band, CC: a.CC, SMs: a.SMs,
		QMoE: a.QMoE, HopperDown: a.HopperDown}
}

// MoEWorkspaceBytes is the workspace MoEExperts needs for a (its pointers
// are not looked at, except to decide the path).
func MoEWorkspaceBytes(a MoEArgs) (int64, error) { return lower.MoEWorkspace(a.lower()) }

// MoELaunches returns the kernel launches MoEExperts queues for a, in
// order (the executor may capture them; a profiler may time each).
func (k *Kernels) MoELaunches(a MoEArgs) ([]KernelLaunch, error) {
	ls, err := lower.MoE(a.lower())
	if err != nil {
		return nil, fmt.Errorf("gpu.%w", err)
	}
	out := make([]KernelLaunch, len(ls))
	for i, l := range ls {
		if out[i], err = k.Bind(l, deviceBase); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// MoEExperts queues the routed experts of one MoE layer on s (see MoEArgs).
func (k *Kernels) MoEExperts(s Queue, a MoEArgs) error {
	ls, err := k.MoELaunches(a)
	if err != nil {
		return err
	}
	for _, l := range ls {
		if err := l.Launch(s); err != nil {
			return fmt.Errorf("moe_experts: %w", err)
		}
	}
	return nil
}

// MoESchedule is the grouped path's schedule as a call left it in its
// workspace: for tests, benchmarks and dumps.
type MoESchedule struct {
	Counts   []int32 // routes per expert
	Order    []int32 // experts in schedule order
	Offsets  []int32 // first grouped row of each expert
	Tiles    int     // GEMM row tiles
	TileRows int     // rows per tile
	Sorted   []int32 // route (t*k+j) of each grouped row
}

// ReadMoESchedule downloads the schedule of the last grouped MoEExperts
// call made with a's shapes and workspace (after synchronising s).
func (k *Kernels) ReadMoESchedule(s Queue, a MoEArgs) (MoESchedule, error) {
	l, err := a.lower().Layout()
	if err != nil {
		return MoESchedule{}, err
	}
	if !l.Grouped {
		return MoESchedule{}, fmt.Errorf("moe_experts: no schedule: the call takes the decode path")
	}
	R := a.T * a.TopK
	sc := MoESchedule{Counts: make([]int32, a.E), Order: make([]int32, a.E), Offsets: make([]int32, a.E),
		Sorted: make([]int32, R), TileRows: l.Rows}
	nt := make([]int32, 1)
	for _, d := range []struct {
		dst []int32
		off int64
	}{{sc.Counts, l.Counts}, {sc.Order, l.Order}, {sc.Offsets, l.Offsets}, {sc.Sorted, l.Sorted}, {nt, l.NTiles}} {
		if err := cuda.Download(s, d.dst, a.Workspace.Add(d.off)); err != nil {
			return MoESchedule{}, fmt.Errorf("reading the MoE schedule: %w", err)
		}
	}
	sc.Tiles = int(nt[0])
	return sc, nil
}
