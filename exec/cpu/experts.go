package cpu

import (
	"fmt"

	"lagc/exec/cpu/internal/vec"
)

// MoEExperts computes the routed experts of an MoE layer:
// out[t] = sum_j weights[t,j] * down_e(silu(gate_e x[t]) * up_e x[t]) with
// e = ids[t,j], for x [T,H], weights and ids [T,k], gate and up [E,I,H],
// down [E,H,I] (experts stacked), out [T,H].
//
// Experts are visited in ascending index and each adds its weighted output
// to its tokens, the order of transformers' LagunaExperts; each expert's
// projections are matmuls over the tokens routed to it, split across cores.
func MoEExperts(out, x, weights []float32, ids []int32, gate, up, down []float32, T, H, E, I, k int) error {
	const op = "MoEExperts"
	for _, c := range []struct {
		name      string
		got, want int
	}{{"gate", len(gate), prod(E, I, H)}, {"up", len(up), prod(E, I, H)}, {"down", len(down), prod(E, H, I)}} {
		if err := checkLen(op, c.name, c.got, c.want); err != nil {
			return err
		}
	}
	return moeExperts(out, x, weights, ids, MatrixF32(gate, E*I, H), MatrixF32(up, E*I, H), MatrixF32(down, E*H, I), T, H, E, I, k)
}

// moeExperts is MoEExperts on stacks of any stored type, viewed as
// matrices of their rows: gate and up [E*I,H], down [E*H,I].
func moeExperts(out, x, weights []float32, ids []int32, gate, up, down *Matrix, T, H, E, I, k int) error {
	const op = "MoEExperts"
	if err := checkDims(op, dim{"T", T}, dim{"H", H}, dim{"E", E}, dim{"I", I}, dim{"k", k}); err != nil {
		return err
	}
	for _, c := range []struct {
		name      string
		got, want int
	}{{"x", len(x), prod(T, H)}, {"weights", len(weights), prod(T, k)}, {"ids", len(ids), prod(T, k)}, {"out", len(out), prod(T, H)}} {
		if err := checkLen(op, c.name, c.got, c.want); err != nil {
			return err
		}
	}
	if err := gate.check(op, "gate", E*I, H); err != nil {
		return err
	}
	if err := up.check(op, "up", E*I, H); err != nil {
		return err
	}
	if err := down.check(op, "down", E*H, I); err != nil {
		return err
	}
	// Routes of each expert, in (token, slot) order.
	routes := make([][]int, E)
	for r, e := range ids {
		if e < 0 || int(e) >= E {
			return fmt.Errorf("cpu.%s: expert id %d (token %d) is outside [0, %d)", op, e, r/k, E)
		}
		routes[e] = append(routes[e], r)
	}
	clear(out)
	maxRoutes := 0
	for _, rs := range routes {
		maxRoutes = max(maxRoutes, len(rs))
	}
	xs := make([]float32, maxRoutes*H)
	g := make([]float32, maxRoutes*I)
	u := make([]float32, maxRoutes*I)
	y := make([]float32, maxRoutes*H)
	for e, rs := range routes {
		n := len(rs)
		if n == 0 {
			continue
		}
		for i, r := range rs {
			t := r / k
			copy(xs[i*H:(i+1)*H], x[t*H:(t+1)*H])
		}
		ge, ue, de := gate.Slice(e*I, (e+1)*I), up.Slice(e*I, (e+1)*I), down.Slice(e*H, (e+1)*H)
		matmul(g[:n*I], xs[:n*H], ge, n, H, I, true)
		matmul(u[:n*I], xs[:n*H], ue, n, H, I, true)
		vec.SiLUMul(g[:n*I], g[:n*I], u[:n*I])
		matmul(y[:n*H], g[:n*I], de, n, I, H, true)
		for i, r := range rs {
			t, w := r/k, weights[r]
			or := out[t*H : (t+1)*H]
			for c, yv := range y[i*H : (i+1)*H] {
				or[c] += float32(yv * w)
			}
		}
	}
	return nil
}
