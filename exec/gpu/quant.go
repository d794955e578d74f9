package gpu

import (
	"lagc/cuda"
	"lagc/lower"
	"lagc/quant"
)

// Launchers of the quantised-weight kernels (cuda/kernels/quant.cu and the
// quantised wgmma GEMM), for tests and benchmarks: each asks lower's kernel
// functions for its launches. Weights are in the device layout of
// lower/qlayout.go (lower.RepackQuant).

// Q8XQuantize quantises x [rows, K] (xt F32 or BF16) into xq, which holds
// lower.Q8XBytes(rows, K) bytes.
func (k *Kernels) Q8XQuantize(s Queue, xt cuda.DType, x, xq cuda.DevicePtr, rows, K int) error {
	return k.on(s).one(lower.Q8XQuantize(xt.String(), ptr(x), ptr(xq), rows, K))
}

// QGEMVArgs is lower.QGEMVArgs with device pointers: y = x w^T for T <=
// 8 rows of activations quantised into XQ and w the rows [Row0, Row0+N)
// (2N with SwiGLU) of a quantised matrix of WRows rows.
type QGEMVArgs struct {
	T, K, N            int
	XQ, W, Y           cuda.DevicePtr
	WType              quant.Type
	WRows, Row0        int
	YType              cuda.DType
	SwiGLU, Accumulate bool
	RowsPerWarp, Split int
}

func (a QGEMVArgs) lower() lower.QGEMVArgs {
	return lower.QGEMVArgs{T: a.T, K: a.K, N: a.N, XQ: ptr(a.XQ), W: ptr(a.W), Y: ptr(a.Y),
		WType: a.WType, WRows: a.WRows, Row0: a.Row0, YType: a.YType.String(), SwiGLU: a.SwiGLU, Accumulate: a.Accumulate,
		RowsPerWarp: a.RowsPerWarp, Split: a.Split}
}

// QGEMV queues a on s.
func (k *Kernels) QGEMV(s Queue, a QGEMVArgs) error { return k.on(s).one(lower.QGEMV(a.lower())) }

// QGEMVXIn queues a with the activations x [T, K] (xt F32 or BF16)
// quantised inside the launch (lower.QGEMVXIn; a.XQ is unused): the bits
// of Q8XQuantize then QGEMV.
func (k *Kernels) QGEMVXIn(s Queue, a QGEMVArgs, x cuda.DevicePtr, xt cuda.DType) error {
	return k.on(s).one(lower.QGEMVXIn(a.lower(), ptr(x), xt.String()))
}

// QGEMVFX queues y = x w^T with float activations (lower.QGEMVFX).
func (k *Kernels) QGEMVFX(s Queue, t quant.Type, T, K, N, wrows int, x, w, y cuda.DevicePtr, xt, yt cuda.DType) error {
	return k.on(s).one(lower.QGEMVFX(t, T, K, N, wrows, ptr(x), ptr(w), ptr(y), xt.String(), yt.String()))
}

// QMatrix is lower.QMatrix with a device pointer.
type QMatrix struct {
	W           cuda.DevicePtr
	Total, Row0 int
}

func (m QMatrix) lower() lower.QMatrix {
	return lower.QMatrix{W: ptr(m.W), Total: m.Total, Row0: m.Row0}
}

// QMoEArgs is lower.QMoEArgs with device pointers: the routed experts of
// T <= 8 decode tokens with quantised stacks.
type QMoEArgs struct {
	T, H, I, E, TopK int
	X                cuda.DevicePtr
	XType            cuda.DType
	Weights, IDs     cuda.DevicePtr
	Gate, Up, Down   QMatrix
	WType            quant.Type // gate and up
	DownType         quant.Type // down; zero: WType (lower.QMoEArgs)
	Out              cuda.DevicePtr
	OutType          cuda.DType
	Accumulate       bool
	Workspace        cuda.DevicePtr
	// QMoEForce forces the kernels' shape (lower.QMoEForce); zero chooses.
	lower.QMoEForce
}

func (a QMoEArgs) lower() lower.QMoEArgs {
	return lower.QMoEArgs{T: a.T, H: a.H, I: a.I, E: a.E, TopK: a.TopK, X: ptr(a.X), XType: a.XType.String(),
		Weights: ptr(a.Weights), IDs: ptr(a.IDs), Gate: a.Gate.lower(), Up: a.Up.lower(), Down: a.Down.lower(),
		WType: a.WType, DownType: a.DownType, Out: ptr(a.Out), OutType: a.OutType.String(), Accumulate: a.Accumulate, Workspace: ptr(a.Workspace),
		QMoEForce: a.QMoEForce}
}

// QMoEWorkspaceBytes is the workspace QMoE needs.
func QMoEWorkspaceBytes(a QMoEArgs) int64 { return lower.QMoEWorkspace(a.lower()) }

// QMoE queues the quantised routed experts of a.
func (k *Kernels) QMoE(s Queue, a QMoEArgs) error { return k.on(s).all(lower.QMoE(a.lower())) }

// QDequant writes rows [row0, row0+n) of the quantised matrix w (rows x K)
// to out as dt.
func (k *Kernels) QDequant(s Queue, t quant.Type, w cuda.DevicePtr, rows, K, row0, n int, out cuda.DevicePtr, dt cuda.DType) error {
	return k.on(s).one(lower.QDequant(t, ptr(w), rows, K, row0, n, ptr(out), dt.String()))
}

// QSynth fills the quantised matrix (rows x K) at w with random quants and
// small scales (synthetic weights).
func (k *Kernels) QSynth(s Queue, t quant.Type, w cuda.DevicePtr, rows, K int, seed uint32) error {
	return k.on(s).one(lower.QSynth(t, ptr(w), rows, K, seed))
}

// HopperQGEMM queues y [T, N] = x [T, K] w^T on the quantised wgmma GEMM,
// w the rows [row0, row0+N) of a quantised matrix of wrows rows (SwiGLU:
// gate rows there, up rows from upRow).
func (k *Kernels) HopperQGEMM(s Queue, T, N, K int, x, w cuda.DevicePtr, t quant.Type, wrows, row0 int, y cuda.DevicePtr, yt cuda.DType, epi, upRow int) error {
	return k.on(s).one(lower.HopperQGEMM(T, N, K, ptr(x), ptr(w), t, wrows, row0, ptr(y), yt.String(), epi, upRow, k.SMs()), nil)
}
