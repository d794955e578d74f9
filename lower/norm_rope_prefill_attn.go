package lower

import "fmt"

// A prefill layer normalises and rotates the chunk's q heads (qk_norm_rope,
// the q heads alone, into a buffer of their own) and the wgmma attention
// reads them once, each (token, head) row in exactly one CTA's Q tile.
// fusePrefillNormRoPEAttention lets the attention do it on its Q tiles
// (attn_prefill_wg with NR = 1), which saves writing and reading the
// rotated q (H200, S-2.1 at 2048 tokens: 43.5 us of qk_norm_rope a
// sliding layer). Its invariant:
//
//	a qk_norm_rope launch N of the q heads alone (no k heads) is dropped,
//	and the attn_prefill_wg launch A that follows it, past qk_norm_rope
//	launches of other norm_rope steps only, becomes
//	PrefillNormRoPEAttention(N, A), only when A reads exactly N's output
//	rows (its q, row stride, heads, tokens and positions), no step but
//	A's reads what the norm_rope steps write, no launch between them
//	writes into N's input rows, and A's output either misses N's input
//	rows or is those rows (each CTA writes only the rows its Q tile
//	read, after reading them).
//
// The k heads keep their launch: every CTA of a kv head reads its K tiles
// and the cache stores them rotated.

// PrefillNormRoPEAttention is the attn_prefill_wg launch a doing the
// qk_norm_rope launch n (of its q heads) on its Q tiles.
func PrefillNormRoPEAttention(n, a Launch) (Launch, error) {
	const op = "PrefillNormRoPEAttention"
	if !isQKNormRoPE(n) {
		return Launch{}, fmt.Errorf("%s: %s is not a qk_norm_rope launch", op, n.NameExpr())
	}
	if a.Kernel != "attn_prefill_wg" || a.File != "attention_prefill_wg.cu" || len(a.Ints) != 4 || a.Ints[3] != 0 ||
		len(a.Args) != 24 || !ArgKinds(a.Args[19:], ArgPtr, ArgF32, ArgPtr, ArgI32, ArgF32) {
		return Launch{}, fmt.Errorf("%s: %s is not an attn_prefill_wg launch as AttentionPrefill builds it", op, a.NameExpr())
	}
	na, aa := n.Args, a.Args
	T, nq, nk, d, ldx, ldo := na[0].Int, na[1].Int, na[2].Int, na[3].Int, na[4].Int, na[5].Int
	x, out, rot := na[6].Ptr(), na[7].Ptr(), na[13].Int
	switch {
	case n.DTypes[0] != "bf16":
		return Launch{}, fmt.Errorf("%s: %s elements (the attention's are bf16)", op, n.DTypes[0])
	case nk != 0 || nq != aa[1].Int || d != a.Ints[0] || d != 128:
		return Launch{}, fmt.Errorf("%s: %d q and %d k heads of %d against the attention's %d of %d", op, nq, nk, d, aa[1].Int, a.Ints[0])
	case T != aa[0].Int || aa[6].Ptr() != na[11].Ptr():
		return Launch{}, fmt.Errorf("%s: %d tokens at %v against the attention's %d at %v", op, T, na[11].Ptr(), aa[0].Int, aa[6].Ptr())
	case aa[7].Ptr() != out || aa[8].Int != ldo:
		return Launch{}, fmt.Errorf("%s: the attention reads q at %v (row stride %d), not the rotated heads at %v (%d)",
			op, aa[7].Ptr(), aa[8].Int, out, ldo)
	case rot <= 0 || rot > d || rot%32 != 0:
		return Launch{}, fmt.Errorf("%s: a rotary width of %d (the fused kernel takes a multiple of 32 up to %d)", op, rot, d)
	case ldx%8 != 0 || !x.Aligned(16):
		return Launch{}, fmt.Errorf("%s: q rows at %v, %d apart, are not 16-byte aligned", op, x, ldx)
	}
	xr := rowsRange(x, T, ldx, nq*d, 2)
	if or := rowsRange(aa[14].Ptr(), T, aa[15].Int, nq*d, 2); or.overlaps(xr) && (aa[14].Ptr() != x || aa[15].Int != ldx) {
		return Launch{}, fmt.Errorf("%s: the output at %v (row stride %d) overlaps the q rows at %v (%d) without being them",
			op, aa[14].Ptr(), aa[15].Int, x, ldx)
	}
	// The rope table of the CTA's tokens after its tiles (wa_nr_tokens),
	// within what keeps the variant's CTAs a multiprocessor.
	nh, nkv := aa[1].Int, aa[2].Int
	if nkv <= 0 || nh%nkv != 0 {
		return Launch{}, fmt.Errorf("%s: %d heads over %d kv heads", op, nh, nkv)
	}
	split, nw := a.Ints[1], a.Ints[2]
	// table is the bytes of the rope table of `rows` rows' tokens: rot
	// floats a token, wa_nr_tokens of them.
	table := func(rows int64) int { return int(4 * rot * ((rows-1)/(nh/nkv) + 2)) }
	ctas := split + 2
	if nw == 2 {
		ctas = 2
	}
	shmem := a.Shmem + table(64*nw)
	if ctas*int64(shmem+1024) > hopperSmemPerSM {
		return Launch{}, fmt.Errorf("%s: %d CTAs of %d bytes of shared memory (with the rope table of %d heads a kv head) exceed a multiprocessor's %d",
			op, ctas, shmem, nh/nkv, hopperSmemPerSM)
	}
	f := a
	f.Shmem = shmem
	f.Ints = []int64{a.Ints[0], a.Ints[1], a.Ints[2], 1}
	f.Args = append([]Arg(nil), aa...)
	f.Args[7], f.Args[8] = ptrArg(x), i64(ldx)
	copy(f.Args[19:], []Arg{na[8], na[10], na[12], na[13], na[14]})
	return f, nil
}

// hopperSmemPerSM is an H100 or H200 multiprocessor's shared memory, 1
// KiB of it reserved for each CTA.
const hopperSmemPerSM = 228 << 10

// fusePrefillNormRoPEAttention fuses each q heads' qk_norm_rope launch
// into the prefill attention after it where the invariant above holds.
func fusePrefillNormRoPEAttention(meta []Step, steps [][]Launch) {
	if len(meta) != len(steps) {
		return
	}
	for i := range steps {
		for k := 0; k < len(steps[i]); k++ {
			n := steps[i][k]
			if n.Kernel != "qk_norm_rope" || meta[i].Op != "norm_rope" || len(n.Args) != 16 || len(n.DTypes) != 1 {
				continue
			}
			// The next launch of the stream that is not a qk_norm_rope of a
			// norm_rope step; those passed must not write into n's input.
			xr := rowsRange(n.Args[6].Ptr(), n.Args[0].Int, n.Args[4].Int, n.Args[1].Int*n.Args[3].Int, int64(dtypeSize(n.DTypes[0])))
			j, m, ok := i, k+1, true
			for ok {
				if m == len(steps[j]) {
					if j+1 == len(steps) {
						ok = false
						break
					}
					j, m = j+1, 0
					continue
				}
				l := steps[j][m]
				if l.Kernel != "qk_norm_rope" || meta[j].Op != "norm_rope" {
					break
				}
				if len(l.Args) != 16 || len(l.DTypes) != 1 || rowsRange(l.Args[7].Ptr(), l.Args[0].Int, l.Args[5].Int,
					(l.Args[1].Int+l.Args[2].Int)*l.Args[3].Int, int64(dtypeSize(l.DTypes[0]))).overlaps(xr) {
					ok = false
				}
				m++
			}
			if !ok || m != 0 || !onlyReader(meta, i, j) {
				continue // A opens its step: the launches before it in that step would run between
			}
			f, err := PrefillNormRoPEAttention(n, steps[j][m])
			if err != nil {
				continue
			}
			steps[j][m] = f
			steps[i] = append(steps[i][:k:k], steps[i][k+1:]...)
			k--
		}
	}
}
