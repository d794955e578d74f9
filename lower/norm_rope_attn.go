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

// NormRoPEAttention is the attn_decode launch a doing the qk_norm_rope
// launch n before it.
func NormRoPEAttention(n, a Launch) (Launch, error) {
	const op = "NormRoPEAttention"
	if n.Kernel != "qk_norm_rope" || n.File != "rope.cu" || len(n.DTypes) != 1 || len(n.Ints) != 1 || len(n.Args) != 16 ||
		!ArgKinds(n.Args, ArgI32, ArgI32, ArgI32, ArgI32, ArgI64, ArgI64, ArgPtr, ArgPtr, ArgPtr, ArgPtr, ArgF32, ArgPtr, ArgPtr, ArgI32, ArgF32, ArgI32) {
		return Launch{}, fmt.Errorf("%s: %s is not a qk_norm_rope launch", op, n.NameExpr())
	}
	if a.Kernel != "attn_decode" || a.File != "attention.cu" || len(a.DTypes) != 1 || len(a.Ints) != 2 || a.Ints[1] != 0 ||
		len(a.Args) != attnArgCount {
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
	f.Ints = []int64{a.Ints[0], 1}
	f.Args = append([]Arg(nil), aa...)
	copy(f.Args[attnArgNR:], []Arg{na[8], na[9], na[10], na[12], na[13], na[14]})
	f.Shmem += 4 * int((d+3)&^3) // kT: this token's rotated k head
	return f, nil
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
