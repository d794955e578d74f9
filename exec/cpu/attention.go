package cpu

import (
	"fmt"
	"math"
)

// Attention is the attention op: causal grouped-query attention of q
// [T,nh,d] over the layer's cache extended by this step's k, v [T,nkv,d],
// written to out [T,nh,d]; then k and v are appended to the cache.
//
// pos [T] must be consecutive positions p0, p0+1, ... (see KVCache for
// which p0 a cache accepts); a position at or past the cache's MaxPos is an
// error (a prompt longer than the context). Query head h uses kv head
// h/(nh/nkv). window must equal cache.Window: 0 for full attention, else the
// query at position i sees keys j with i-window < j <= i. Scores are
// q.k*scale in float32, softmax in float32 (its sum in float64).
//
// Keys of this step are read from k and v directly and the cache only for
// earlier positions, so a prefill chunk longer than a sliding window never
// reads a ring slot it has overwritten, and all (token, kv head) pairs run
// in parallel, each with its group of query heads. Keys are visited in position order whether they come from the
// cache or from this step, so the result does not depend on how a prompt is
// split into steps.
func Attention(out, q, k, v []float32, pos []int32, T, nh, nkv, d int, window int, scale float32, cache *KVCache) error {
	if err := checkDims("Attention", dim{"T", T}, dim{"nh", nh}, dim{"nkv", nkv}, dim{"d", d}); err != nil {
		return err
	}
	if nh%nkv != 0 {
		return fmt.Errorf("cpu.Attention: %d query heads are not a multiple of %d kv heads", nh, nkv)
	}
	if cache == nil {
		return fmt.Errorf("cpu.Attention: no KV cache")
	}
	if cache.NKV != nkv || cache.HeadDim != d || cache.Window != window {
		return fmt.Errorf("cpu.Attention: cache is for %d kv heads x %d channels, window %d; the op has %d x %d, window %d",
			cache.NKV, cache.HeadDim, cache.Window, nkv, d, window)
	}
	for _, c := range []struct {
		name      string
		got, want int
	}{{"pos", len(pos), T}, {"q", len(q), prod(T, nh, d)}, {"k", len(k), prod(T, nkv, d)}, {"v", len(v), prod(T, nkv, d)}, {"out", len(out), prod(T, nh, d)}} {
		if err := checkLen("Attention", c.name, c.got, c.want); err != nil {
			return err
		}
	}
	p0 := int(pos[0])
	for t, p := range pos {
		if int(p) != p0+t {
			return fmt.Errorf("cpu.Attention: positions must be consecutive: pos[%d] = %d after pos[0] = %d", t, p, p0)
		}
	}
	if err := cache.canAppend(p0, T); err != nil {
		return fmt.Errorf("cpu.Attention: %w", err)
	}
	cache.grow(p0 + T) // so a linear cache's rows exist before they are read

	group := nh / nkv
	span := p0 + T // longest key range of any query
	if window > 0 {
		span = min(span, window)
	}
	// One item is a token and a kv head with its group of query heads.
	parallelFor(T*nkv, 2*group*span*d, func(lo, hi int) {
		probs := alignedFloats(span)
		qa := alignedFloats(d)
		var runs []kvRun
		for it := lo; it < hi; it++ {
			t, kvh := it/nkv, it%nkv
			p := p0 + t
			first := 0
			if window > 0 {
				first = max(0, p-window+1)
			}
			runs = kvRuns(runs[:0], cache, k, v, first, p, p0, kvh, nkv, d)
			for h := t*nh + kvh*group; h < t*nh+(kvh+1)*group; h++ { // rows of q and out
				attendRuns(out[h*d:(h+1)*d], q[h*d:(h+1)*d], runs, nkv*d, d, scale, probs, qa)
			}
		}
	})
	cache.store(k, v, p0, T)
	return nil
}

// softmax replaces scores by their softmax: exp(s - max) in float32, the
// sum in float64, each probability rounded once.
func softmax(s []float32) {
	m := float32(math.Inf(-1))
	for _, x := range s {
		if x > m {
			m = x
		}
	}
	var sum float64
	for i, x := range s {
		e := float32(math.Exp(float64(x - m)))
		s[i] = e
		sum += float64(e)
	}
	for i, e := range s {
		s[i] = float32(float64(e) / sum)
	}
}
