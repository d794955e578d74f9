package lower

import (
	"fmt"
	"strings"

	"lagc/quant"
)

// A decode step's attention (with the per-head norm and rotation before
// it) is latency bound and leaves DRAM idle for about 20 us; the GEMVs
// after it stream their weights from DRAM (o_proj 30 MB at 2.3 TB/s; the
// router's and the shared expert's, smaller, latency bound). With
// Options.L2Prefetch, prefetchL2 puts one l2_prefetch before the
// qk_norm_rope (or the attention) asking L2 for those weights, so that the
// GEMVs read them from L2: level 1 o_proj's alone, level 2 every GEMV's up
// to the routed experts (which stream their own), L2PrefetchMax bytes at
// most. It reads only weights and writes nothing, so no value any launch
// sees changes; it waits for the launch before it (pdl_wait), like every
// kernel, so the programmatic chain of launches stays in order.

// L2PrefetchRanges is the most ranges one l2_prefetch takes; L2PrefetchMax
// the most bytes prefetchL2 asks for at once (of an H200's 60 MB of L2).
const (
	L2PrefetchRanges = 4
	L2PrefetchMax    = 40 << 20
)

// L2Span is a range of device memory to prefetch.
type L2Span struct {
	At    Ptr
	Bytes int64
}

// L2Prefetch is the launch prefetching the spans (1 to L2PrefetchRanges,
// each 16-byte aligned) into L2.
func L2Prefetch(spans ...L2Span) (Launch, error) {
	if len(spans) == 0 || len(spans) > L2PrefetchRanges {
		return Launch{}, fmt.Errorf("l2_prefetch: %d ranges (1 to %d)", len(spans), L2PrefetchRanges)
	}
	var total int64
	args := make([]Arg, 0, 2*L2PrefetchRanges)
	for _, s := range spans {
		if s.At.Null() || !s.At.Aligned(16) || s.Bytes <= 0 {
			return Launch{}, fmt.Errorf("l2_prefetch: %d bytes at %s: want a 16-byte aligned pointer and a positive size", s.Bytes, s.At)
		}
		total += s.Bytes
		args = append(args, ptrArg(s.At), i64(s.Bytes))
	}
	for len(args) < 2*L2PrefetchRanges {
		args = append(args, ptrArg(Ptr{}), i64(0))
	}
	const threads, chunk = 256, 16384
	blocks := int(min(64, max(1, ceilDiv64(total, threads*chunk))))
	return kernel("copy.cu", "l2_prefetch", nil, nil, dims(blocks), dims(threads), 0, args...), nil
}

func ceilDiv64(a, b int64) int64 { return (a + b - 1) / b }

// prefetchL2 inserts, for each attn_decode launch, an l2_prefetch of the
// weights of the GEMVs after it (level 1: the first, when it is a
// quantised GEMV; level 2: each GEMV up to the routed experts or the next
// attention) before the attention, or before the qk_norm_rope right
// before it.
func prefetchL2(steps [][]Launch, level int) {
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
		var spans []L2Span
		var total int64
		for _, q := range all[k+1:] {
			l := at(q)
			if l.Kernel == "attn_decode" || strings.HasPrefix(l.Kernel, "moe_") {
				break
			}
			w, ok := gemvWeights(l)
			if !ok {
				continue
			}
			if level == 1 && !strings.HasPrefix(l.Kernel, "qgemv") {
				break
			}
			if len(spans) == L2PrefetchRanges || total+w.Bytes > L2PrefetchMax {
				break
			}
			spans, total = append(spans, w), total+w.Bytes
			if level == 1 {
				break
			}
		}
		if len(spans) == 0 {
			continue
		}
		pf, err := L2Prefetch(spans...)
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

// gemvWeights is the weight rows a decode GEMV launch reads (the quantised
// GEMVs: N rows (2N with SwiGLU) of K elements of their type from row0;
// the float GEMV and the fused router: N rows of K elements of its weight
// dtype), read back from its arguments; false for any other launch.
func gemvWeights(l Launch) (L2Span, bool) {
	a := l.Args
	switch l.Kernel {
	case "qgemv", "qgemv_norm", "qgemv_xin", "qgemv_xin_norm":
		// N, K, rows, row0, w first; the type then R, SWIGLU first of Ints.
		if len(a) < 5 || !ArgKinds(a[:5], ArgI32, ArgI32, ArgI64, ArgI64, ArgPtr) || len(l.Ints) < 3 {
			return L2Span{}, false
		}
		rb, err := quant.Type(l.Ints[0]).RowBytes(int(a[1].Int))
		if err != nil || a[0].Int <= 0 || a[3].Int < 0 {
			return L2Span{}, false
		}
		rows := a[0].Int
		if l.Ints[2] == 1 {
			rows *= 2
		}
		return L2Span{a[4].Ptr().At(a[3].Int * rb), rows * rb}, true
	case "gemv", "router_fused":
		// N, K, split, x, w first; x's and w's dtypes first.
		if len(a) < 5 || !ArgKinds(a[:5], ArgI32, ArgI32, ArgI32, ArgPtr, ArgPtr) || len(l.DTypes) < 2 || len(l.Ints) < 2 {
			return L2Span{}, false
		}
		rows := a[0].Int
		if l.Kernel == "gemv" && l.Ints[1] == 1 { // SwiGLU: gate and up rows
			rows *= 2
		}
		return L2Span{a[4].Ptr(), rows * a[1].Int * int64(dtypeSize(l.DTypes[1]))}, rows > 0
	}
	return L2Span{}, false
}
