package gpu

import (
	"fmt"

	"lagc/cuda"
)

// MoEPath selects the kernels of the routed experts.
type MoEPath int

const (
	// MoEAuto takes the decode path for T <= GEMVMaxRows or where the
	// grouped path cannot run (f32, H or I not a multiple of 8), else the
	// grouped path.
	MoEAuto MoEPath = iota
	// MoEDecode: per-route GEMVs reading only the selected experts' rows
	// (any dtypes, any T; meant for decode).
	MoEDecode
	// MoEGrouped: routes grouped by expert on the device, grouped bf16
	// tensor-core GEMMs, a fixed-order combine (prefill).
	MoEGrouped
)

// ExpertOrder is the order the grouped path schedules experts in: their
// rows in the grouped buffers and the order GEMM tiles are started.
type ExpertOrder int32

const (
	ExpertsByID   ExpertOrder = 0 // ascending expert id
	ExpertsByLoad ExpertOrder = 1 // descending routes per expert, ties by id
)

// MaxExperts is the most experts the grouped path schedules (one block).
const MaxExperts = 1024

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
	// Band is the grouped GEMMs' N-band in output columns (the expert-order
	// pass's `band`): each tile computes a band's columns back to back so
	// weight and activation rows are reused from L2. 0: no banding. It
	// changes the CTA order only, never a result.
	Band int
}

func (a MoEArgs) validate() error {
	if a.T <= 0 || a.H <= 0 || a.I <= 0 || a.E <= 0 || a.TopK <= 0 {
		return fmt.Errorf("moe_experts: T, H, I, E, k must be positive (got %d, %d, %d, %d, %d)", a.T, a.H, a.I, a.E, a.TopK)
	}
	if int64(a.T)*int64(a.TopK) > 1<<30 || int64(a.T)*int64(a.H) > 1<<40 || a.H > 1<<24 || a.I > 1<<24 {
		return fmt.Errorf("moe_experts: shape too large (T %d, H %d, I %d, k %d)", a.T, a.H, a.I, a.TopK)
	}
	for _, d := range []struct {
		name string
		dt   cuda.DType
	}{{"x", a.XType}, {"weights", a.WType}, {"out", a.OutType}} {
		if d.dt != cuda.F32 && d.dt != cuda.BF16 {
			return fmt.Errorf("moe_experts: %s dtype %v (want f32 or bf16)", d.name, d.dt)
		}
	}
	for _, p := range []cuda.DevicePtr{a.X, a.Weights, a.IDs, a.Gate, a.Up, a.Down, a.Out, a.Workspace} {
		if p == 0 {
			return fmt.Errorf("moe_experts: nil device pointer")
		}
	}
	if a.Workspace%16 != 0 {
		return fmt.Errorf("moe_experts: workspace %#x is not 16-byte aligned", uint64(a.Workspace))
	}
	if err := a.Tile.check(); err != nil {
		return fmt.Errorf("moe_experts: %w", err)
	}
	return nil
}

// groupedOK says whether the grouped tensor-core path can run a.
func (a MoEArgs) groupedOK() error {
	switch {
	case a.XType != cuda.BF16 || a.WType != cuda.BF16:
		return fmt.Errorf("the grouped path needs bf16 x and weights (have %v, %v)", a.XType, a.WType)
	case a.H%8 != 0 || a.I%8 != 0:
		return fmt.Errorf("the grouped path needs H and I multiples of 8 (have %d, %d)", a.H, a.I)
	case !aligned16(a.X, a.Gate, a.Up, a.Down):
		return fmt.Errorf("the grouped path needs 16-byte aligned x and weights")
	case a.E > MaxExperts:
		return fmt.Errorf("the grouped path schedules at most %d experts (have %d)", MaxExperts, a.E)
	}
	return nil
}

func (a MoEArgs) grouped() (bool, error) {
	switch a.Path {
	case MoEDecode:
		return false, nil
	case MoEGrouped:
		if err := a.groupedOK(); err != nil {
			return false, fmt.Errorf("moe_experts: %w", err)
		}
		return true, nil
	case MoEAuto:
		return a.T > GEMVMaxRows && a.groupedOK() == nil, nil
	}
	return false, fmt.Errorf("moe_experts: unknown path %d", a.Path)
}

// moeLayout is the workspace of one call: byte offsets into it.
type moeLayout struct {
	grouped         bool
	mi, bk          int // tensor-core tile: rows / 32, K step
	ch, nchunks     int // routes per scheduling chunk, chunks
	maxTiles        int
	act             int64 // decode: f32 [R,I]; grouped: bf16 [R,I]
	hist, base      int64 // i32 [nchunks,E]
	counts, order   int64 // i32 [E]
	offsets, ntiles int64 // i32 [E], i32
	tiles           int64 // int4 [maxTiles]
	sorted, pos, ys int64 // i32 [R], i32 [R], bf16 [R,H]
	total           int64
}

func (a MoEArgs) layout() (moeLayout, error) {
	g, err := a.grouped()
	if err != nil {
		return moeLayout{}, err
	}
	R := int64(a.T) * int64(a.TopK)
	l := moeLayout{grouped: g}
	var off int64
	take := func(n int64) int64 {
		o := off
		off += (n + 255) &^ 255
		return o
	}
	if !g {
		l.act = take(4 * R * int64(a.I))
		l.total = off
		return l, nil
	}
	// 128-row tiles once experts average 64 rows: each expert's weights are
	// then mostly streamed once, not once per 64-row tile.
	l.mi = 2
	if R >= 64*int64(a.E) {
		l.mi = 4
	}
	if a.Tile.Rows != 0 {
		l.mi = a.Tile.Rows / 32
	}
	l.bk = a.Tile.bk()
	// Chunks of at least 256 routes, at most 128 chunks to fold per expert.
	l.ch = max(256, (ceilDiv(int(R), 128)+31)&^31)
	l.nchunks = ceilDiv(int(R), l.ch)
	l.maxTiles = ceilDiv(int(R), 32*l.mi) + min(a.E, int(R))
	E := int64(a.E)
	l.hist = take(4 * int64(l.nchunks) * E)
	l.base = take(4 * int64(l.nchunks) * E)
	l.counts = take(4 * E)
	l.order = take(4 * E)
	l.offsets = take(4 * E)
	l.ntiles = take(4)
	l.tiles = take(16 * int64(l.maxTiles))
	l.sorted = take(4 * R)
	l.pos = take(4 * R)
	l.act = take(2 * R * int64(a.I))
	l.ys = take(2 * R * int64(a.H))
	l.total = off
	return l, nil
}

// MoEWorkspaceBytes is the workspace MoEExperts needs for a (its pointers
// are not looked at, except to decide the path).
func MoEWorkspaceBytes(a MoEArgs) (int64, error) {
	l, err := a.layout()
	if err != nil {
		return 0, err
	}
	return l.total, nil
}

// MoELaunches returns the kernel launches MoEExperts queues for a, in
// order (the executor may capture them; a profiler may time each).
func (k *Kernels) MoELaunches(a MoEArgs) ([]KernelLaunch, error) {
	if err := a.validate(); err != nil {
		return nil, err
	}
	l, err := a.layout()
	if err != nil {
		return nil, err
	}
	if l.grouped {
		return k.moeGrouped(a, l)
	}
	return k.moeDecode(a, l)
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

// moeLaunch builds one launch of a moe.cu kernel.
func (k *Kernels) moeLaunch(name string, dtypes []cuda.DType, ints []int64, grid cuda.Dim3, block, shmem int, args ...any) (KernelLaunch, error) {
	kn, err := k.mmKernel("moe.cu", name, dtypes, ints, shmem)
	if err != nil {
		return KernelLaunch{}, err
	}
	return KernelLaunch{Name: kn.NameExpr, Kernel: kn, Grid: grid, Block: cuda.Dim(uint32(block)), Shmem: shmem, Args: args}, nil
}

func (k *Kernels) moeDecode(a MoEArgs, l moeLayout) ([]KernelLaunch, error) {
	R := a.T * a.TopK
	p := 16 / a.WType.Size()
	vec := int64(b2i(a.H%p == 0 && a.I%p == 0 && aligned16(a.X, a.Gate, a.Up, a.Down)))
	act := a.Workspace.Add(l.act)
	gu, err := k.moeLaunch("moe_gateup_gemv", []cuda.DType{a.XType, a.WType}, []int64{vec},
		cuda.Dim(uint32((int64(R)*int64(a.I)+7)/8)), 256, 0,
		int32(R), int32(a.TopK), int32(a.H), int32(a.I), int32(a.E), a.X, a.IDs, a.Gate, a.Up, act)
	if err != nil {
		return nil, err
	}
	dn, err := k.moeLaunch("moe_down_gemv", []cuda.DType{a.WType, a.OutType}, []int64{vec},
		cuda.Dim(uint32((int64(a.T)*int64(a.H)+7)/8)), 256, 0,
		int32(a.T), int32(a.TopK), int32(a.H), int32(a.I), int32(a.E), act, a.Weights, a.IDs, a.Down, a.Out, b2i(a.Accumulate))
	if err != nil {
		return nil, err
	}
	return []KernelLaunch{gu, dn}, nil
}

func (k *Kernels) moeGrouped(a MoEArgs, l moeLayout) ([]KernelLaunch, error) {
	R := a.T * a.TopK
	ws := func(off int64) cuda.DevicePtr { return a.Workspace.Add(off) }
	hist, base, ntiles, tiles := ws(l.hist), ws(l.base), ws(l.ntiles), ws(l.tiles)
	sorted, pos, act, ys := ws(l.sorted), ws(l.pos), ws(l.act), ws(l.ys)
	smem := mmaSmemBytes(l.mi, l.bk)
	tile := []int64{int64(l.mi), int64(l.bk)}
	v := 1
	if a.H%8 == 0 {
		v = 8 // ys rows and the workspace are 16-byte aligned
	}
	var out []KernelLaunch
	for _, st := range []struct {
		name   string
		dtypes []cuda.DType
		ints   []int64
		grid   cuda.Dim3
		block  int
		smem   int
		args   []any
	}{
		{"moe_hist", nil, nil, cuda.Dim(uint32(l.nchunks)), 256, 0,
			[]any{int32(R), int32(a.E), int32(l.ch), a.IDs, hist}},
		{"moe_schedule", nil, nil, cuda.Dim(1), 1024, 0,
			[]any{int32(a.E), int32(l.nchunks), int32(32 * l.mi), int32(a.Order), hist,
				ws(l.counts), ws(l.order), ws(l.offsets), base, tiles, ntiles}},
		{"moe_scatter", nil, nil, cuda.Dim(uint32(l.nchunks)), 32, 0,
			[]any{int32(R), int32(a.E), int32(l.ch), a.IDs, base, sorted, pos}},
		{"moe_gateup_mma", nil, tile, cuda.Dim(uint32(l.maxTiles), uint32(ceilDiv(a.I, 64))), 256, smem,
			[]any{int32(a.TopK), int32(a.H), int32(a.I), a.X, sorted, tiles, ntiles, a.Gate, a.Up, act, int32(a.Band / 64)}},
		{"moe_down_mma", nil, tile, cuda.Dim(uint32(l.maxTiles), uint32(ceilDiv(a.H, mmaBN))), 256, smem,
			[]any{int32(a.H), int32(a.I), act, tiles, ntiles, a.Down, ys, int32(a.Band * a.H / max(a.I, 1) / mmaBN)}},
		{"moe_combine", []cuda.DType{a.OutType}, []int64{int64(v)}, cuda.Dim(uint32(min(ceilDiv(a.T*(a.H/v), 256), 132*32))), 256, 0,
			[]any{int32(a.T), int32(a.TopK), int32(a.H), a.Weights, pos, ys, a.Out, b2i(a.Accumulate)}},
	} {
		kl, err := k.moeLaunch(st.name, st.dtypes, st.ints, st.grid, st.block, st.smem, st.args...)
		if err != nil {
			return nil, err
		}
		out = append(out, kl)
	}
	return out, nil
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
	l, err := a.layout()
	if err != nil {
		return MoESchedule{}, err
	}
	if !l.grouped {
		return MoESchedule{}, fmt.Errorf("moe_experts: no schedule: the call takes the decode path")
	}
	R := a.T * a.TopK
	sc := MoESchedule{Counts: make([]int32, a.E), Order: make([]int32, a.E), Offsets: make([]int32, a.E),
		Sorted: make([]int32, R), TileRows: 32 * l.mi}
	nt := make([]int32, 1)
	for _, d := range []struct {
		dst []int32
		off int64
	}{{sc.Counts, l.counts}, {sc.Order, l.order}, {sc.Offsets, l.offsets}, {sc.Sorted, l.sorted}, {nt, l.ntiles}} {
		if err := cuda.Download(s, d.dst, a.Workspace.Add(d.off)); err != nil {
			return MoESchedule{}, fmt.Errorf("reading the MoE schedule: %w", err)
		}
	}
	sc.Tiles = int(nt[0])
	return sc, nil
}
