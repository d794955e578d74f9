package lower

import "fmt"

// A decode layer of llama.cpp's Q4_K_M, Q4_K_S or Q5_K_M keeps attn_v in
// another type than q, k and the gate, so qkvg-concat leaves v's GEMV
// apart and the step makes two quantised GEMVs of the same activations
// one after the other: two links of a latency-bound chain where one would
// do. fuseQGEMVPair runs them as one launch (QGEMVPair, qgemv_pair in
// quant.cu). Its invariant:
//
//	a qgemv launch A right before a qgemv launch B in the stream become
//	QGEMVPair(A, B) when both are as QGEMV builds them (256 threads, no
//	shared memory) of the same rows, and neither writes what the other
//	reads or writes (A's and B's y against the other's quantised
//	activations and y).
//
// The pair's first blocks run A's body on their own block index, the rest
// B's on theirs less A's block count: memory after the launch is what it
// was after A then B.

// QGEMVPair is the qgemv launches a and b, neither touching what the other
// writes, as one qgemv_pair launch.
func QGEMVPair(a, b Launch) (Launch, error) {
	const op = "QGEMVPair"
	ga, okA := parseQGEMV(a)
	gb, okB := parseQGEMV(b)
	if !okA || !okB {
		return Launch{}, fmt.Errorf("%s: %s and %s are not qgemv launches as QGEMV builds them", op, a.NameExpr(), b.NameExpr())
	}
	if a.Block != dims(256) || b.Block != dims(256) || a.Shmem != 0 || b.Shmem != 0 || a.Grid[1] != 1 || b.Grid[1] != 1 {
		return Launch{}, fmt.Errorf("%s: blocks of %v and %v threads, %d and %d bytes of shared memory", op, a.Block, b.Block, a.Shmem, b.Shmem)
	}
	if ga.T != gb.T {
		return Launch{}, fmt.Errorf("%s: GEMVs of %d and %d rows", op, ga.T, gb.T)
	}
	ya := span{ga.Y, int64(ga.T) * int64(ga.N) * int64(dtypeSize(ga.YType))}
	yb := span{gb.Y, int64(gb.T) * int64(gb.N) * int64(dtypeSize(gb.YType))}
	if w, ok := clash([]span{ya}, []span{{gb.XQ, Q8XBytes(gb.T, gb.K)}, yb}); ok {
		return Launch{}, fmt.Errorf("%s: one GEMV writes %v, which the other uses", op, w.at)
	}
	if w, ok := clash([]span{yb}, []span{{ga.XQ, Q8XBytes(ga.T, ga.K)}, ya}); ok {
		return Launch{}, fmt.Errorf("%s: one GEMV writes %v, which the other uses", op, w.at)
	}
	args := append([]Arg{i32(a.Grid[0])}, a.Args...)
	args = append(args, b.Args...)
	ints := []int64{a.Ints[1], a.Ints[0], a.Ints[2], a.Ints[3], a.Ints[4], b.Ints[0], b.Ints[2], b.Ints[3], b.Ints[4]}
	return kernel("quant.cu", "qgemv_pair", []string{a.DTypes[0], b.DTypes[0]}, ints, dims(a.Grid[0]+b.Grid[0]), dims(256), 0, args...), nil
}

// fuseQGEMVPair fuses each two quantised GEMVs in a row that QGEMVPair
// takes.
func fuseQGEMVPair(steps [][]Launch) {
	fusePairs(steps, false, func(a, b Launch, _ []Launch) (Launch, bool) {
		if a.Kernel != "qgemv" || b.Kernel != "qgemv" {
			return Launch{}, false
		}
		l, err := QGEMVPair(a, b)
		return l, err == nil
	})
}
