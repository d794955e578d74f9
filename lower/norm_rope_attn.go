package lower

import "fmt"

// A decode layer normalises and rotates this token's q and k heads
// (qk_norm_rope, one small launch) right before the decode attention reads
// them. fuseNormRoPEAttention lets the attention do it (attn_decode with
// NR = 1, attention.cu), one launch fewer a layer. Its invariant:
//
//	a qk_norm_rope launch N is dropped, and the attn_decode launch A right
//	after it becomes NormRoPEAttention(N, A), only when N is one token's
//	q heads then k heads rotated in place, A is one row's attention
//	reading exactly those q heads and that k row (this token's, which A
//	appends to the cache), at N's position, and no step but A's reads
//	what the norm_rope steps write (their output values).
//
// The fused kernel stages and rotates each head with qk_norm_rope's code
// and rounds to the element type as N stored it, so A computes on the same
// values; the q,k,v GEMV's output then keeps the unrotated q and k, which
// only A read.

// isQKNormRoPE reports whether l is a qk_norm_rope launch as NormRoPE
// builds it (the argument layout the fusions read).
func isQKNormRoPE(l Launch) bool {
	return l.Kernel == "qk_norm_rope" && l.File == "rope.cu" && len(l.DTypes) == 1 && len(l.Ints) == 1 && len(l.Args) == 16 &&
		ArgKinds(l.Args, ArgI32, ArgI32, ArgI32, ArgI32, ArgI64, ArgI64, ArgPtr, ArgPtr, ArgPtr, ArgPtr, ArgF32, ArgPtr, ArgPtr, ArgI32, ArgF32, ArgI32)
}

// isPlainAttnDecode reports whether a is an attn_decode launch as
// AttentionDecode builds it, doing no norm or rotation (NR 0).
func isPlainAttnDecode(a Launch) bool {
	return a.Kernel == "attn_decode" && a.File == "attention.cu" && len(a.DTypes) == 1 && len(a.Ints) == 4 && a.Ints[1] == 0 &&
		len(a.Args) == attnArgCount
}

// NormRoPEAttention is the attn_decode launch a doing the qk_norm_rope
// launch n before it.
func NormRoPEAttention(n, a Launch) (Launch, error) {
	const op = "NormRoPEAttention"
	if !isQKNormRoPE(n) {
		return Launch{}, fmt.Errorf("%s: %s is not a qk_norm_rope launch", op, n.NameExpr())
	}
	if !isPlainAttnDecode(a) {
		return Launch{}, fmt.Errorf("%s: %s is not an attn_decode launch as AttentionDecode builds it", op, a.NameExpr())
	}
	na, aa := n.Args, a.Args
	T, nq, nk, d, ldx, ldo := na[0].Int, na[1].Int, na[2].Int, na[3].Int, na[4].Int, na[5].Int
	x, out := na[6].Ptr(), na[7].Ptr()
	nh, nkv, ad := aa[attnArgNH].Int, aa[attnArgNKV].Int, aa[attnArgD].Int
	switch {
	case n.DTypes[0] != a.DTypes[0]:
		return Launch{}, fmt.Errorf("%s: %s and %s elements", op, n.DTypes[0], a.DTypes[0])
	case T != 1 || x != out || ldx != ldo || ldx%4 != 0:
		return Launch{}, fmt.Errorf("%s: not one token rotated in place (T %d, row strides %d, %d)", op, T, ldx, ldo)
	case nq != nh || nk != nkv || d != ad || nkv <= 0 || nh%nkv != 0:
		return Launch{}, fmt.Errorf("%s: %d+%d heads of %d against the attention's %d, %d of %d", op, nq, nk, d, nh, nkv, ad)
	}
	group := int(nh / nkv)
	if zh := ceilDiv(group, min(group, decodeHeads)); a.Grid[2] != zh {
		return Launch{}, fmt.Errorf("%s: the attention runs %d rows", op, a.Grid[2]/zh)
	}
	kx := x.At(nq * d * int64(dtypeSize(n.DTypes[0])))
	if aa[attnArgQ].Ptr() != x || aa[attnArgK].Ptr() != kx || aa[attnArgPos].Ptr() != na[11].Ptr() {
		return Launch{}, fmt.Errorf("%s: the attention reads q at %v, k at %v, pos at %v, not the rotated heads at %v, %v and %v",
			op, aa[attnArgQ].Ptr(), aa[attnArgK].Ptr(), aa[attnArgPos].Ptr(), x, kx, na[11].Ptr())
	}
	f := a
	f.Ints = []int64{a.Ints[0], 1, a.Ints[2], a.Ints[3]}
	f.Args = append([]Arg(nil), aa...)
	copy(f.Args[attnArgNR:], []Arg{na[8], na[9], na[10], na[12], na[13], na[14]})
	f.Shmem += 4 * int((d+3)&^3) // kT: this token's rotated k head
	return f, nil
}

// A batched decode step (a bucket's program: the prefill schedule at T =
// rows) has q and k in arrays of their own, rotated by two qk_norm_rope
// launches, q's heads then k's. fuseRowsKNormRoPEAttention lets the
// attention rotate the k heads (attn_decode with NR = 2: the block holding
// a row's position rotates that row's k head as one-token decode does, and
// appends it), one launch fewer a layer. q keeps its launch: rotated in the
// attention (NR = 1) every split's block of a row would do it again, which
// measured slower from 4 rows; this form measured level with the two
// launches (the one-block k launch overlaps under programmatic launch), so
// it is opt-in (docs/PERF.md). Its invariant:
//
//	a qk_norm_rope launch N, the only launch of its norm_rope step, is
//	dropped, and the attn_decode launch A right after it becomes
//	NormKRoPEAttentionRows(N, A), only when N rotates A's nkv k heads of
//	A's rows, each row's heads back to back (the stride A reads them at),
//	at A's positions, A reads k where N writes it, A's output lies apart
//	from the unrotated k and from v, and no step but A's reads what N
//	writes.

// NormKRoPEAttentionRows is the attn_decode launch a doing the
// qk_norm_rope launch nk (its k heads) before it.
func NormKRoPEAttentionRows(nk, a Launch) (Launch, error) {
	const op = "NormKRoPEAttentionRows"
	if !isQKNormRoPE(nk) {
		return Launch{}, fmt.Errorf("%s: %s is not a qk_norm_rope launch", op, nk.NameExpr())
	}
	if !isPlainAttnDecode(a) {
		return Launch{}, fmt.Errorf("%s: %s is not an attn_decode launch as AttentionDecode builds it", op, a.NameExpr())
	}
	aa, na := a.Args, nk.Args
	nh, nkv, d := aa[attnArgNH].Int, aa[attnArgNKV].Int, aa[attnArgD].Int
	if nkv <= 0 || nh%nkv != 0 || aa[attnArgK].Ptr().Null() {
		return Launch{}, fmt.Errorf("%s: the attention takes %d q heads over %d kv heads, k at %v", op, nh, nkv, aa[attnArgK].Ptr())
	}
	group := int(nh / nkv)
	zh := ceilDiv(group, min(group, decodeHeads))
	if a.Grid[2]%zh != 0 {
		return Launch{}, fmt.Errorf("%s: the attention's grid %v is not whole rows of %d head blocks", op, a.Grid, zh)
	}
	rows := int64(a.Grid[2] / zh)
	switch {
	case nk.DTypes[0] != a.DTypes[0]:
		return Launch{}, fmt.Errorf("%s: %s elements, the attention's %s", op, nk.DTypes[0], a.DTypes[0])
	case na[0].Int != rows || na[1].Int != nkv || na[2].Int != 0 || na[3].Int != d:
		return Launch{}, fmt.Errorf("%s: %d rows of %d+%d heads of %d rotated, the attention reads %d rows of %d k heads of %d",
			op, na[0].Int, na[1].Int, na[2].Int, na[3].Int, rows, nkv, d)
	case na[4].Int != nkv*d || na[5].Int != nkv*d:
		return Launch{}, fmt.Errorf("%s: rows %d and %d elements apart, the attention's %d", op, na[4].Int, na[5].Int, nkv*d)
	case na[7].Ptr() != aa[attnArgK].Ptr() || na[6].Ptr().Null():
		return Launch{}, fmt.Errorf("%s: k rotated into %v (from %v), the attention reads %v", op, na[7].Ptr(), na[6].Ptr(), aa[attnArgK].Ptr())
	case na[11].Ptr() != aa[attnArgPos].Ptr():
		return Launch{}, fmt.Errorf("%s: k rotated at positions %v, the attention's %v", op, na[11].Ptr(), aa[attnArgPos].Ptr())
	}
	// A kv head's output is stored by its group's last block while the
	// block holding another row's position may still read that row's
	// unrotated k (and v): they must lie apart.
	es := int64(dtypeSize(a.DTypes[0]))
	out, k, v, kn := aa[attnArgOut].Ptr(), na[6].Ptr(), aa[attnArgK+1].Ptr(), rows*nkv*d*es
	if on := rows * nh * d * es; overlaps(out, on, k, kn) || overlaps(out, on, v, kn) {
		return Launch{}, fmt.Errorf("%s: the attention's output %v overlaps k %v or v %v", op, out, k, v)
	}
	f := a
	f.Ints = []int64{a.Ints[0], 2, a.Ints[2], a.Ints[3]}
	f.Args = append([]Arg(nil), aa...)
	f.Args[attnArgK] = na[6]
	copy(f.Args[attnArgNR:], []Arg{ptrArg(Ptr{}), na[8], na[10], na[12], na[13], na[14]})
	f.Shmem += 4 * int((d+3)&^3) // kT: this token's rotated k head
	return f, nil
}

// fuseRowsKNormRoPEAttention fuses each qk_norm_rope launch of its own
// norm_rope step into the batched decode attention right after it where
// the invariant above holds.
func fuseRowsKNormRoPEAttention(meta []Step, steps [][]Launch) {
	if len(meta) != len(steps) {
		return
	}
	for i := 0; i+1 < len(steps); i++ {
		j := i + 1
		if meta[i].Op != "norm_rope" || len(steps[i]) != 1 || len(steps[j]) == 0 || !onlyReader(meta, i, j) {
			continue
		}
		if f, err := NormKRoPEAttentionRows(steps[i][0], steps[j][0]); err == nil {
			steps[j][0] = f
			steps[i] = steps[i][:0]
		}
	}
}

// fuseNormRoPEAttention fuses each qk_norm_rope launch into the decode
// attention right after it where the invariant above holds.
func fuseNormRoPEAttention(meta []Step, steps [][]Launch) {
	if len(meta) != len(steps) {
		return
	}
	for i := range steps {
		for k := 0; k < len(steps[i]); k++ {
			if steps[i][k].Kernel != "qk_norm_rope" || meta[i].Op != "norm_rope" {
				continue
			}
			// The next launch of the stream, and the norm_rope steps before it.
			j, m := i, k+1
			for m == len(steps[j]) && j+1 < len(steps) && meta[j+1].Op == "norm_rope" {
				j, m = j+1, 0
			}
			if m == len(steps[j]) && j+1 < len(steps) {
				j, m = j+1, 0
			}
			if m >= len(steps[j]) || !onlyReader(meta, i, j) {
				continue
			}
			f, err := NormRoPEAttention(steps[i][k], steps[j][m])
			if err != nil {
				continue
			}
			steps[j][m] = f
			steps[i] = append(steps[i][:k:k], steps[i][k+1:]...)
			k--
		}
	}
}

// onlyReader reports whether step j is the only step reading the values
// the norm_rope steps i..j-1 write.
func onlyReader(meta []Step, i, j int) bool {
	written := map[string]bool{}
	for s := i; s < j; s++ {
		if meta[s].Op != "norm_rope" {
			return false
		}
		for _, o := range meta[s].Out {
			written[o.Value] = true
		}
	}
	for s := range meta {
		if s == j {
			continue
		}
		for _, o := range meta[s].In {
			if written[o.Value] {
				return false
			}
		}
	}
	return true
}
