package lower

import (
	"fmt"
	"strings"

	"lagc/quant"
)

// A decode step's attention (with the per-head norm and rotation before
// it) is latency bound and leaves DRAM idle for about 20 us, and the GEMV
// after it (o_proj) streams 30 MB of weights at 2.3 TB/s. With
// Options.L2Prefetch, prefetchL2 puts an l2_prefetch of that GEMV's weight
// rows before the qk_norm_rope (or the attention) so that the GEMV reads
// them from L2. It reads only weights and writes nothing, so no value any
// launch sees changes; it waits for the launch before it (pdl_wait), like
// every kernel, so the programmatic chain of launches stays in order.

// L2Prefetch is the launch prefetching bytes at p into L2.
func L2Prefetch(p Ptr, bytes int64) (Launch, error) {
	if p.Null() || !p.Aligned(16) || bytes <= 0 {
		return Launch{}, fmt.Errorf("l2_prefetch: %d bytes at %s: want a 16-byte aligned pointer and a positive size", bytes, p)
	}
	const threads, chunk = 256, 16384
	blocks := int(min(64, max(1, ceilDiv64(bytes, threads*chunk))))
	return kernel("copy.cu", "l2_prefetch", nil, nil, dims(blocks), dims(threads), 0, ptrArg(p), i64(bytes)), nil
}

func ceilDiv64(a, b int64) int64 { return (a + b - 1) / b }

// prefetchL2 inserts, for each attn_decode launch followed later in the
// stream by a qgemv before any other GEMV, an l2_prefetch of that qgemv's
// weight rows before the attention (before the qk_norm_rope right before
// it, if there is one).
func prefetchL2(steps [][]Launch) {
	type pos struct{ step, i int }
	var all []pos
	for i, ls := range steps {
		for j := range ls {
			all = append(all, pos{i, j})
		}
	}
	at := func(p pos) Launch { return steps[p.step][p.i] }
	insert := map[pos]Launch{}
	for k, p := range all {
		if at(p).Kernel != "attn_decode" {
			continue
		}
		var g Launch
		found := false
		for _, q := range all[k+1:] {
			if l := at(q); strings.HasPrefix(l.Kernel, "qgemv") || strings.HasPrefix(l.Kernel, "gemv") {
				g, found = l, l.Kernel == "qgemv" || l.Kernel == "qgemv_norm"
				break
			}
		}
		if !found {
			continue
		}
		w, bytes, ok := qgemvWeights(g)
		if !ok {
			continue
		}
		pf, err := L2Prefetch(w, bytes)
		if err != nil {
			continue
		}
		where := p
		if k > 0 && at(all[k-1]).Kernel == "qk_norm_rope" {
			where = all[k-1]
		}
		insert[where] = pf
	}
	if len(insert) == 0 {
		return
	}
	for i, ls := range steps {
		var out []Launch
		for j, l := range ls {
			if pf, ok := insert[pos{i, j}]; ok {
				out = append(out, pf)
			}
			out = append(out, l)
		}
		steps[i] = out
	}
}

// qgemvWeights is the weight rows a qgemv launch (or a qgemv_norm: qgemv's
// arguments, then its norm's) reads: rows row0 .. row0+N (2N with SwiGLU)
// of K elements of its type.
func qgemvWeights(l Launch) (Ptr, int64, bool) {
	if l.Kernel == "qgemv_norm" && len(l.DTypes) == 2 && len(l.Ints) == 6 && len(l.Args) > 9 {
		l.Kernel, l.DTypes, l.Ints, l.Args = "qgemv", l.DTypes[:1], l.Ints[:5], l.Args[:9]
	}
	a, ok := parseQGEMV(l)
	if !ok {
		return Ptr{}, 0, false
	}
	rb, err := quant.Type(a.WType).RowBytes(a.K)
	if err != nil {
		return Ptr{}, 0, false
	}
	rows := int64(a.N)
	if a.SwiGLU {
		rows *= 2
	}
	return a.W.At(int64(a.Row0) * rb), rows * rb, true
}
