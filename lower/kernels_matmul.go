package lower

import "fmt"

// MatMulArgs is one matmul, y = x w^T, with weights in HF layout.
type MatMulArgs struct {
	T, K, N int // x [T,K], w [N,K] ([2N,K] with SwiGLU), y [T,N]
	X, W, Y Ptr
	// Element types: f32 or bf16 each, in any combination.
	XType, WType, YType string
	// Accumulate adds into y (y += x w^T): the residual folded into the
	// epilogue.
	Accumulate bool
	// SwiGLU: w is [gate; up] ([2N,K], gate rows first) and
	// y = silu(x gate^T) * (x up^T).
	SwiGLU bool
	// Tile forces the tensor-core tile; zero fields choose automatically.
	Tile MMATile
	SMs  int // multiprocessors of the target (0: 132)
	// CC is the target's compute capability (major*10+minor; 90 and up
	// gets the wgmma GEMM); PrefillMMA keeps the mma.sync one.
	CC         int
	PrefillMMA bool
	// HopperBN forces the wgmma GEMM's tile width (128 or 256; 0 chooses).
	HopperBN int
	// HopperSched forces the wgmma GEMM's consumer schedule (SchedAuto
	// chooses).
	HopperSched HopperSched
	// CublasLt lets a plain bf16 GEMM of CublasLtMinRows rows or more go
	// to cuBLASLt (Options.CublasLt).
	CublasLt bool
	// QGEMVGroups is the quantised GEMV's warp-group target (QGEMVShape;
	// 0: QGEMVGroupsDefault).
	QGEMVGroups int
	// Split sends y's columns to up to four matrices instead (the wgmma
	// GEMM only, plain epilogue): Split[i] takes the next Split[i].N
	// columns into rows of its own width; Y is unused. The N widths sum
	// to N.
	Split []SplitOut
	// WholeN, for the GEMV of a row block of a larger matrix of WholeN
	// rows, chooses the K split as for that matrix (0: for N), so each
	// row's sums are added in the order the whole matrix's GEMV adds them
	// (a batched step's q, k, v and gate against the decode schedule's
	// one GEMV).
	WholeN int
}

// SplitOut is one output of a split GEMM (MatMulArgs.Split): columns of
// width N into Y, [T, N].
type SplitOut struct {
	Y Ptr
	N int
}

// MaxSplit is the most outputs one split GEMM writes.
const MaxSplit = 4

// MMATile is a tensor-core GEMM tile: Rows (64 or 128) of x per CTA and K
// (32 or 64) per pipeline stage. Zero fields choose automatically.
type MMATile struct{ Rows, K int }

// Tensor-core tiles of matmul.cu: the K step when MMATile.K is 0, the
// tile's width (MMA_BN), and the rows up to which the GEMV serves.
const (
	DefaultMMAK = 64
	mmaBN       = 128
	GEMVMaxRows = 8
)

func (t MMATile) check() error {
	if (t.Rows != 0 && t.Rows != 64 && t.Rows != 128) || (t.K != 0 && t.K != 32 && t.K != 64) {
		return fmt.Errorf("tensor-core tile %dx%d: rows must be 64 or 128, K 32 or 64", t.Rows, t.K)
	}
	return nil
}

func (t MMATile) bk() int {
	if t.K != 0 {
		return t.K
	}
	return DefaultMMAK
}

// MMASmem is matmul.cu's MmaCfg<MI, BK>::SMEM: pipeline stages (3 for a K
// step of 64, 4 for 32) of x and w tiles, rows padded by 8 elements.
func MMASmem(mi, bk int) int {
	stages := 3
	if bk == 32 {
		stages = 4
	}
	return stages * (32*mi + mmaBN) * (bk + 8) * 2
}

func sms(n int) int {
	if n > 0 {
		return n
	}
	return defaultSMs
}

// defaultSMs is an H200's multiprocessor count, defaultCC its compute
// capability.
const (
	defaultSMs = 132
	defaultCC  = 90
)

func (a MatMulArgs) validate() error {
	if a.T <= 0 || a.K <= 0 || a.N <= 0 {
		return fmt.Errorf("matmul: T, K, N must be positive (got %d, %d, %d)", a.T, a.K, a.N)
	}
	for _, d := range []struct{ name, dt string }{{"x", a.XType}, {"w", a.WType}, {"y", a.YType}} {
		if d.dt != "f32" && d.dt != "bf16" {
			return fmt.Errorf("matmul: %s dtype %q (want f32 or bf16)", d.name, d.dt)
		}
	}
	if a.X.Null() || a.W.Null() || (a.Y.Null() && a.Split == nil) {
		return fmt.Errorf("matmul: null pointer")
	}
	for i, o := range a.Split {
		if o.Y.Null() {
			return fmt.Errorf("matmul: split output %d: null pointer", i)
		}
	}
	const maxDim = 1 << 30
	if a.T > maxDim || a.K > maxDim || a.N > maxDim/2 {
		return fmt.Errorf("matmul: dimension too large (T %d, K %d, N %d)", a.T, a.K, a.N)
	}
	return a.Tile.check()
}

// GEMVSplit is how many warps share an output row of the GEMV: enough to
// fill the GPU (about 32 per SM), never so many that a warp gets no
// 512-byte stretch of the row.
func GEMVSplit(n, k, wsize, sms int) int {
	vecs := k / (16 / wsize) // 16-byte vectors per row
	split := 1
	for split < 8 && n*split < 32*sms && vecs/(32*split*2) >= 1 {
		split *= 2
	}
	return split
}

// GEMVSplitLaunch is the GEMV of a (up to GEMVMaxRows rows, float weights, no
// SwiGLU, no accumulation) writing y's columns to outs in order (each its
// own [T, N_i] rows: gemv_split), up to MaxSplit of them summing to a.N:
// one launch for a float model's batched q, k, v and gate, each value
// the whole GEMV's (its K split chosen for a.N), as the decode
// schedule's one GEMV computes it.
func GEMVSplitLaunch(a MatMulArgs, outs []SplitOut) (Launch, error) {
	const op = "gemv_split"
	if len(outs) > 0 {
		a.Y = outs[0].Y // for validate; the kernel writes outs
	}
	if err := a.validate(); err != nil {
		return Launch{}, err
	}
	if len(outs) < 1 || len(outs) > MaxSplit || a.SwiGLU || a.Accumulate || a.T > GEMVMaxRows || a.Split != nil {
		return Launch{}, fmt.Errorf("%s: %d outputs (1 to %d), %d rows (at most %d), SwiGLU %v, accumulate %v",
			op, len(outs), MaxSplit, a.T, GEMVMaxRows, a.SwiGLU, a.Accumulate)
	}
	outArgs, err := splitOutArgs(op, outs, a.N)
	if err != nil {
		return Launch{}, err
	}
	vec, split := gemvShape(a)
	args := append([]Arg{i32(a.N), i32(a.K), i32(split), ptrArg(a.X), ptrArg(a.W)}, outArgs...)
	return kernel("matmul.cu", "gemv_split", []string{a.XType, a.WType, a.YType}, []int64{int64(a.T), vec},
		dims(ceilDiv(a.N, 8/split)), dims(256), 0, args...), nil
}

// gemvShape is the GEMV's vector flag (16-byte loads: K a multiple of a
// vector, x and w aligned) and K split (for WholeN rows where given).
func gemvShape(a MatMulArgs) (vec int64, split int) {
	ws := dtypeSize(a.WType)
	vec = int64(b2i(a.K%(16/ws) == 0 && a.X.Aligned(16) && a.W.Aligned(16)))
	return vec, GEMVSplit(max(a.N, a.WholeN), a.K, ws, sms(a.SMs))
}

// splitOutArgs are a split GEMV's output arguments: MaxSplit pointers
// (outs', then null) and the first MaxSplit-1 column ends (N past outs),
// after checking that outs are non-empty and their widths sum to N.
func splitOutArgs(op string, outs []SplitOut, N int) ([]Arg, error) {
	ys := make([]Arg, 0, 2*MaxSplit-1)
	var ends []Arg
	col := 0
	for i, o := range outs {
		if o.N <= 0 || o.Y.Null() {
			return nil, fmt.Errorf("%s: output %d of %d columns at %s", op, i, o.N, o.Y)
		}
		col += o.N
		ys = append(ys, ptrArg(o.Y))
		ends = append(ends, i32(col))
	}
	if col != N {
		return nil, fmt.Errorf("%s: outputs of %d columns, the GEMV's %d", op, col, N)
	}
	for len(ys) < MaxSplit {
		ys = append(ys, ptrArg(Ptr{}))
		ends = append(ends, i32(N))
	}
	return append(ys, ends[:MaxSplit-1]...), nil
}

// MatMul is the launch of a: cuBLASLt where a allows it (cublasLtOK); the
// GEMV for T <= GEMVMaxRows; on Hopper the
// TMA + wgmma GEMM where it applies (HopperGEMM); the mma.sync tensor-core
// GEMM where x and w are bf16 with K a multiple of 8 (and 16-byte
// aligned); else the FFMA GEMM.
func MatMul(a MatMulArgs) (Launch, error) {
	if err := a.validate(); err != nil {
		return Launch{}, err
	}
	if a.Split != nil {
		if a.T <= GEMVMaxRows || a.Tile != (MMATile{}) {
			return Launch{}, fmt.Errorf("matmul: split outputs need the wgmma GEMM (%d rows, tile %v)", a.T, a.Tile)
		}
		return HopperGEMM(a)
	}
	if a.Tile == (MMATile{}) && cublasLtOK(a) == nil {
		return CublasLtLaunch(a)
	}
	if a.T > GEMVMaxRows && hopperOK(a) == nil && a.Tile == (MMATile{}) {
		return HopperGEMM(a)
	}
	sm := sms(a.SMs)
	sw := int64(b2i(a.SwiGLU))
	acc := i32(b2i(a.Accumulate))
	var l Launch
	switch {
	case a.T <= GEMVMaxRows:
		vec, split := gemvShape(a)
		l = kernel("matmul.cu", "gemv", []string{a.XType, a.WType, a.YType}, []int64{int64(a.T), sw, vec},
			dims(ceilDiv(a.N, 8/split)), dims(256), 0,
			i32(a.N), i32(a.K), i32(split), ptrArg(a.X), ptrArg(a.W), ptrArg(a.Y), acc)
	case a.XType == "bf16" && a.WType == "bf16" && a.K%8 == 0 && a.X.Aligned(16) && a.W.Aligned(16):
		bn := mmaBN
		if a.SwiGLU {
			bn = 64
		}
		// 128-row tiles where they still give two CTAs per SM, else 64.
		mi := a.Tile.Rows / 32
		if mi == 0 {
			mi = 4
			if ceilDiv(a.T, 128)*ceilDiv(a.N, bn) < 2*sm {
				mi = 2
			}
		}
		bk := a.Tile.bk()
		l = kernel("matmul.cu", "gemm_bf16", []string{a.YType}, []int64{int64(mi), sw, int64(bk)},
			dims(ceilDiv(a.T, 32*mi), ceilDiv(a.N, bn)), dims(256), MMASmem(mi, bk),
			i32(a.T), i32(a.N), i32(a.K), ptrArg(a.X), ptrArg(a.W), ptrArg(a.Y), acc)
	default:
		l = kernel("matmul.cu", "gemm_simple", []string{a.XType, a.WType, a.YType}, []int64{sw},
			dims(ceilDiv(a.T, 64), ceilDiv(a.N, 64)), dims(256), 0,
			i32(a.T), i32(a.N), i32(a.K), ptrArg(a.X), ptrArg(a.W), ptrArg(a.Y), acc)
	}
	if l.Grid[1] > 65535 {
		return Launch{}, fmt.Errorf("matmul: N=%d needs %d column tiles (limit 65535)", a.N, l.Grid[1])
	}
	return l, nil
}
