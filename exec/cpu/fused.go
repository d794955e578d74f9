package cpu

import (
	"fmt"
	"slices"

	"lagc/exec/cpu/internal/vec"
	"lagc/prep"
)

// Reference kernels of the fused ops (ir/optable_fused.go). Each computes
// every element with exactly the arithmetic of its unfused composition (the
// same dot product, the same roundings, the same summation order), so a
// fused graph gives bitwise the results of the unfused one.

// MatMulSplit computes outs[i] = x w_i^T for the consecutive row blocks w_i
// of w [sum(sizes), K] (sizes[i] rows each): the q/k/v/gate projections
// against one concatenated weight. x is [T,K], outs[i] is [T,sizes[i]].
func MatMulSplit(outs [][]float32, x, w []float32, T, K int, sizes []int) error {
	if K <= 0 {
		return fmt.Errorf("cpu.MatMulSplit: K = %d must be positive", K)
	}
	if len(w)%K != 0 {
		return fmt.Errorf("cpu.MatMulSplit: w has %d elements, not whole rows of %d", len(w), K)
	}
	return matmulSplit(outs, x, MatrixF32(w, len(w)/K, K), T, sizes)
}

// matmulSplit is MatMulSplit on a matrix of any stored type.
func matmulSplit(outs [][]float32, x []float32, w *Matrix, T int, sizes []int) error {
	const op = "MatMulSplit"
	if len(outs) != len(sizes) || len(sizes) == 0 {
		return fmt.Errorf("cpu.%s: %d outputs for %d sizes", op, len(outs), len(sizes))
	}
	N := 0
	for i, s := range sizes {
		if s <= 0 {
			return fmt.Errorf("cpu.%s: sizes[%d] = %d must be positive", op, i, s)
		}
		if N += s; N < 0 {
			return fmt.Errorf("cpu.%s: sizes %v overflow", op, sizes)
		}
	}
	if w == nil {
		return fmt.Errorf("cpu.%s: no matrix", op)
	}
	K := w.Cols
	if err := checkDims(op, dim{"T", T}, dim{"K", K}); err != nil {
		return err
	}
	if err := checkLen(op, "x", len(x), T, K); err != nil {
		return err
	}
	if err := w.check(op, "w", N, K); err != nil {
		return err
	}
	for i, s := range sizes {
		if len(outs[i]) != prod(T, s) {
			return checkLen(op, fmt.Sprintf("output %d", i), len(outs[i]), T, s)
		}
	}
	// One pass over all the rows; each block's products go to the outputs
	// their rows belong to.
	starts := make([]int, len(sizes)+1)
	for i, s := range sizes {
		starts[i+1] = starts[i] + s
	}
	blocked(x, T, K, N, []*Matrix{w}, true, func(t, n0, n1 int, p [][]float32) {
		for i := range sizes {
			lo, hi := max(n0, starts[i]), min(n1, starts[i+1])
			if lo < hi {
				s := sizes[i]
				copy(outs[i][t*s+lo-starts[i]:t*s+hi-starts[i]], p[0][lo-n0:hi-n0])
			}
		}
	})
	return nil
}

// MatMulSwiGLU computes y = silu(x g^T) * (x u^T) where w [2N,K] holds the
// gate rows g then the up rows u: x is [T,K], y is [T,N]. It equals
// MatMul, MatMul, SiLU and Mul bitwise.
func MatMulSwiGLU(y, x, w []float32, T, K, N int) error {
	if err := checkLen("MatMulSwiGLU", "w", len(w), 2, N, K); err != nil {
		return err
	}
	return matmulSwiGLU(y, x, MatrixF32(w, 2*N, K), T)
}

// matmulSwiGLU is MatMulSwiGLU on a matrix [2N,K] of any stored type.
func matmulSwiGLU(y, x []float32, w *Matrix, T int) error {
	const op = "MatMulSwiGLU"
	K, N2, err := matrixDims(op, w, T)
	if err != nil {
		return err
	}
	if N2%2 != 0 {
		return fmt.Errorf("cpu.%s: the weight must hold gate and up rows (an even row count), got %d rows", op, N2)
	}
	N := N2 / 2
	if err := checkLen(op, "x", len(x), T, K); err != nil {
		return err
	}
	if err := checkLen(op, "y", len(y), T, N); err != nil {
		return err
	}
	swiglu(y, x, w.Slice(0, N), w.Slice(N, 2*N), T, K, N, true)
	return nil
}

// swiglu is the blocked loop of matmul with a silu*mul epilogue over two
// weights g and u [N,K].
func swiglu(y, x []float32, g, u *Matrix, T, K, N int, parallel bool) {
	blocked(x, T, K, N, []*Matrix{g, u}, parallel, func(t, n0, n1 int, p [][]float32) {
		vec.SiLUMul(y[t*N+n0:t*N+n1], p[0], p[1])
	})
}

// NormRoPE computes out = rope(rms_norm(x, w), pos) for x and out [T,n,d]
// (out may alias x): RMSNorm over each head's d channels with w [d] and
// eps, then RoPE with tab, one after the other on out. The normalised
// value passes between them in float32, as it does between the unfused
// ops here (the device kernel keeps it in registers in float32 too, where
// the unfused device ops round it to the activation dtype).
func NormRoPE(out, x, w []float32, pos []int32, T, n, d int, eps float32, tab *prep.RopeTable) error {
	if err := checkRoPE(out, x, pos, T, n, d, tab); err != nil {
		return fmt.Errorf("cpu.NormRoPE: %w", err)
	}
	if err := RMSNorm(out, x, w, T*n, d, eps); err != nil {
		return fmt.Errorf("cpu.NormRoPE: %w", err)
	}
	rope(out, out, pos, T, n, d, tab)
	return nil
}

// AttentionGate computes out = softplus_gate(attention(q, k, v, pos), g):
// BatchAttention over the seqs' caches (appending k and v), then the
// output gate with g [T,G] (G = nh per head, nh*d per element) on out in
// place, bitwise the two ops in turn. The gate is checked before the
// caches change.
func AttentionGate(out, q, k, v, g []float32, pos []int32, T, nh, nkv, d, G, window int, scale float32, seqs []AttnSeq) error {
	if err := checkSoftplusGate(out, out, g, T, nh, d, G); err != nil {
		return fmt.Errorf("cpu.AttentionGate: %w", err)
	}
	if err := BatchAttention(out, q, k, v, pos, T, nh, nkv, d, window, scale, seqs); err != nil {
		return fmt.Errorf("cpu.AttentionGate: %w", err)
	}
	softplusGate(out, out, g, T, nh, d, G)
	return nil
}

// MatMulAdd computes y = r + x w^T for x [T,K], w [N,K], r and y [T,N]; y
// may be r itself (the GEMM epilogue accumulating into the residual). It
// equals MatMul then Add bitwise.
func MatMulAdd(y, x, w, r []float32, T, K, N int) error {
	if err := checkLen("MatMulAdd", "w", len(w), N, K); err != nil {
		return err
	}
	return matmulAdd(y, x, r, MatrixF32(w, N, K), T)
}

// matmulAdd is MatMulAdd on a matrix [N,K] of any stored type.
func matmulAdd(y, x, r []float32, w *Matrix, T int) error {
	const op = "MatMulAdd"
	K, N, err := matrixDims(op, w, T)
	if err != nil {
		return err
	}
	for _, c := range []struct {
		name      string
		got, want int
	}{{"x", len(x), prod(T, K)}, {"r", len(r), prod(T, N)}, {"y", len(y), prod(T, N)}} {
		if err := checkLen(op, c.name, c.got, c.want); err != nil {
			return err
		}
	}
	blocked(x, T, K, N, []*Matrix{w}, true, func(t, n0, n1 int, p [][]float32) {
		for j, v := range p[0] {
			y[t*N+n0+j] = r[t*N+n0+j] + v
		}
	})
	return nil
}

// GroupedMoE describes one moe_grouped step: the routed experts of an MoE
// layer, optionally with always-selected shared experts at the end of the
// stacks and a residual to add.
type GroupedMoE struct {
	T, H, I int // tokens, hidden size, expert width
	K       int // routed experts per token (top-k)
	E       int // experts in the stacks, shared ones included
	Shared  int // the last Shared experts apply to every token with weight 1
	// Either Gate and Up [E*I,H] (layout "split") or GateUp [E*2I,H], each
	// expert's gate rows then its up rows (layout "fused"); Down is
	// [E*H,I]: the stacks as matrices of their rows, in any stored type.
	Gate, Up, GateUp *Matrix
	Down             *Matrix
	Residual         []float32 // [T,H], added to the result; nil for none
	// Descending visits experts with the most routed tokens first (the GPU
	// schedule); it never changes a result.
	Descending bool
}

// MoEGrouped computes, for every token t,
//
//	out[t] = residual[t] + sum over its experts e, ascending e, of w_e * down_e(silu(gate_e x[t]) * up_e x[t])
//
// where the experts are the top-k routed ones (ids, weights [T,k]) and then
// the shared ones with weight 1. Each expert's projections run over the
// tokens routed to it, in the order the schedule says; each route's weighted
// output is kept and the sum is taken per token in ascending expert order
// afterwards, so the result does not depend on the schedule and equals
// MoEExperts (plus the shared expert's MLP, plus the residual) bitwise.
func MoEGrouped(out, x, weights []float32, ids []int32, m *GroupedMoE) error {
	const op = "MoEGrouped"
	T, H, I, k, E, S := m.T, m.H, m.I, m.K, m.E, m.Shared
	if err := checkDims(op, dim{"T", T}, dim{"H", H}, dim{"I", I}, dim{"k", k}, dim{"E", E}); err != nil {
		return err
	}
	if S < 0 || S >= E {
		return fmt.Errorf("cpu.%s: %d shared experts of %d leave none routed", op, S, E)
	}
	for _, c := range []struct {
		name      string
		got, want int
	}{{"x", len(x), prod(T, H)}, {"weights", len(weights), prod(T, k)}, {"ids", len(ids), prod(T, k)}, {"out", len(out), prod(T, H)}} {
		if err := checkLen(op, c.name, c.got, c.want); err != nil {
			return err
		}
	}
	type matCheck struct {
		name       string
		m          *Matrix
		rows, cols int
	}
	mats := []matCheck{{"down", m.Down, prod(E, H), I}}
	fused := m.GateUp != nil
	if fused {
		if m.Gate != nil || m.Up != nil {
			return fmt.Errorf("cpu.%s: give either GateUp or Gate and Up", op)
		}
		mats = append(mats, matCheck{"gate_up", m.GateUp, prod(E, 2, I), H})
	} else {
		mats = append(mats, matCheck{"gate", m.Gate, prod(E, I), H}, matCheck{"up", m.Up, prod(E, I), H})
	}
	for _, c := range mats {
		if err := c.m.check(op, c.name, c.rows, c.cols); err != nil {
			return err
		}
	}
	if m.Residual != nil {
		if err := checkLen(op, "residual", len(m.Residual), T, H); err != nil {
			return err
		}
	}
	routed := E - S
	per := k + S // routes per token
	R := prod(T, per)
	if R < 0 || prod(R, H) < 0 {
		return fmt.Errorf("cpu.%s: %d tokens x %d routes overflow", op, T, per)
	}
	// Route r of token t: slot j < k is ids[t,j]; slot k+s is shared s.
	expertOf := func(r int) int {
		t, j := r/per, r%per
		if j < k {
			return int(ids[t*k+j])
		}
		return routed + j - k
	}
	// Routes grouped by expert (a counting sort), each in (token, slot)
	// order: expert e's are byExpert[start[e]:start[e+1]].
	start := make([]int, E+1)
	for r := 0; r < R; r++ {
		e := expertOf(r)
		if e < 0 || e >= routed && r%per < k {
			return fmt.Errorf("cpu.%s: expert id %d (token %d) is outside [0, %d)", op, e, r/per, routed)
		}
		start[e+1]++
	}
	for e := 0; e < E; e++ {
		start[e+1] += start[e]
	}
	byExpert := make([]int, R)
	fill := append([]int(nil), start[:E]...)
	for r := 0; r < R; r++ {
		e := expertOf(r)
		byExpert[fill[e]] = r
		fill[e]++
	}
	routesOf := func(e int) []int { return byExpert[start[e]:start[e+1]] }
	visit := make([]int, 0, E)
	maxRoutes := 0
	for e := 0; e < E; e++ {
		if n := len(routesOf(e)); n > 0 {
			visit = append(visit, e)
			maxRoutes = max(maxRoutes, n)
		}
	}
	if m.Descending {
		slices.SortStableFunc(visit, func(a, b int) int { return len(routesOf(b)) - len(routesOf(a)) })
	}
	yrBuf := getScratch(R * H) // each route's weighted output
	defer putScratch(yrBuf)
	yr := *yrBuf
	// Experts are independent (each writes its own routes' rows of yr):
	// with enough work they run in parallel, each on one thread; else one
	// after the other, each split across threads.
	perRoute := 3 * I * H
	across := len(visit) > 1 && Threads() > 1 && prod(R, perRoute) >= minParallelWork
	parallelFor(len(visit), R/len(visit)*perRoute, func(lo, hi int) {
		buf := getScratch(maxRoutes * (2*H + I))
		defer putScratch(buf)
		xs := (*buf)[:maxRoutes*H]
		act := (*buf)[maxRoutes*H : maxRoutes*(H+I)]
		y := (*buf)[maxRoutes*(H+I):]
		for _, e := range visit[lo:hi] {
			rs := routesOf(e)
			n := len(rs)
			for i, r := range rs {
				t := r / per
				copy(xs[i*H:(i+1)*H], x[t*H:(t+1)*H])
			}
			var ge, ue *Matrix
			if fused {
				ge, ue = m.GateUp.Slice(2*e*I, (2*e+1)*I), m.GateUp.Slice((2*e+1)*I, (2*e+2)*I)
			} else {
				ge, ue = m.Gate.Slice(e*I, (e+1)*I), m.Up.Slice(e*I, (e+1)*I)
			}
			swiglu(act[:n*I], xs[:n*H], ge, ue, n, H, I, !across)
			matmul(y[:n*H], act[:n*I], m.Down.Slice(e*H, (e+1)*H), n, I, H, !across)
			for i, r := range rs {
				w := float32(1)
				if t, j := r/per, r%per; j < k {
					w = weights[t*k+j]
				}
				dst := yr[r*H : (r+1)*H]
				for c, yv := range y[i*H : (i+1)*H] {
					dst[c] = float32(yv * w)
				}
			}
		}
	})
	// Sum each token's routes in ascending expert order (shared last), as
	// MoEExperts' ascending visit of experts adds them.
	// out may be the residual itself (accumulating in place), so the sum is
	// taken in a scratch row first.
	parallelFor(T, per*H, func(lo, hi int) {
		order := make([]int, per)
		acc := make([]float32, H)
		for t := lo; t < hi; t++ {
			for j := range order { // insertion sort by expert: per is small
				r := t*per + j
				i := j
				for ; i > 0 && expertOf(order[i-1]) > expertOf(r); i-- {
					order[i] = order[i-1]
				}
				order[i] = r
			}
			clear(acc)
			for _, r := range order {
				for c, v := range yr[r*H : (r+1)*H] {
					acc[c] += v
				}
			}
			o := out[t*H : (t+1)*H]
			if m.Residual == nil {
				copy(o, acc)
				continue
			}
			res := m.Residual[t*H : (t+1)*H]
			for c, v := range acc {
				o[c] = res[c] + v
			}
		}
	})
	return nil
}
