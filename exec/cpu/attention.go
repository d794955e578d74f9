package cpu

import (
	"fmt"
	"math"

	"lagc/exec/cpu/internal/vec"
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
	return BatchAttention(out, q, k, v, pos, T, nh, nkv, d, window, scale, []AttnSeq{{Rows: T, Cache: cache}})
}

// AttnSeq is a run of consecutive rows of one sequence in a batched
// attention step, with that sequence's cache.
type AttnSeq struct {
	Rows  int
	Cache *KVCache
}

// BatchAttention is Attention over several sequences in one step: the T
// rows are the seqs' rows one run after the other, each run attending only
// to its own cache and its own rows, with positions consecutive within the
// run. Every (row, kv head) pair is computed exactly as Attention computes
// it for that sequence alone, so batching never changes a result.
func BatchAttention(out, q, k, v []float32, pos []int32, T, nh, nkv, d int, window int, scale float32, seqs []AttnSeq) error {
	if err := checkDims("Attention", dim{"T", T}, dim{"nh", nh}, dim{"nkv", nkv}, dim{"d", d}); err != nil {
		return err
	}
	if nh%nkv != 0 {
		return fmt.Errorf("cpu.Attention: %d query heads are not a multiple of %d kv heads", nh, nkv)
	}
	for _, c := range []struct {
		name      string
		got, want int
	}{{"pos", len(pos), T}, {"q", len(q), prod(T, nh, d)}, {"k", len(k), prod(T, nkv, d)}, {"v", len(v), prod(T, nkv, d)}, {"out", len(out), prod(T, nh, d)}} {
		if err := checkLen("Attention", c.name, c.got, c.want); err != nil {
			return err
		}
	}
	seqOf := make([]int32, T) // the sequence of each row
	row0 := make([]int, len(seqs))
	span := 0 // longest key range of any query
	r := 0
	for s, sq := range seqs {
		cache := sq.Cache
		if cache == nil {
			return fmt.Errorf("cpu.Attention: no KV cache")
		}
		if cache.NKV != nkv || cache.HeadDim != d || cache.Window != window {
			return fmt.Errorf("cpu.Attention: cache is for %d kv heads x %d channels, window %d; the op has %d x %d, window %d",
				cache.NKV, cache.HeadDim, cache.Window, nkv, d, window)
		}
		if sq.Rows <= 0 || sq.Rows > T-r {
			return fmt.Errorf("cpu.Attention: sequence %d has %d rows; %d of the %d rows are left", s, sq.Rows, T-r, T)
		}
		for i := range seqs[:s] {
			if seqs[i].Cache == cache {
				return fmt.Errorf("cpu.Attention: sequences %d and %d share a KV cache", i, s)
			}
		}
		p0 := int(pos[r])
		for t, p := range pos[r : r+sq.Rows] {
			if int(p) != p0+t {
				return fmt.Errorf("cpu.Attention: positions must be consecutive: pos[%d] = %d after pos[%d] = %d", r+t, p, r, p0)
			}
			seqOf[r+t] = int32(s)
		}
		if err := cache.canAppend(p0, sq.Rows); err != nil {
			return fmt.Errorf("cpu.Attention: %w", err)
		}
		row0[s] = r
		span = max(span, p0+sq.Rows)
		r += sq.Rows
	}
	if r != T {
		return fmt.Errorf("cpu.Attention: the sequences have %d rows, the step %d", r, T)
	}
	if window > 0 {
		span = min(span, window)
	}
	for s, sq := range seqs {
		sq.Cache.grow(int(pos[row0[s]]) + sq.Rows) // so a linear cache's rows exist before they are read
	}

	group := nh / nkv
	// One item is a token and a kv head with its group of query heads.
	parallelFor(T*nkv, 2*group*span*d, func(lo, hi int) {
		buf := getScratch(span)
		defer putScratch(buf)
		probs := *buf
		runs := make([]kvRun, 0, 4)
		for it := lo; it < hi; it++ {
			t, kvh := it/nkv, it%nkv
			s := seqOf[t]
			cache, r0 := seqs[s].Cache, row0[s]
			p0 := int(pos[r0])
			p := int(pos[t])
			first := 0
			if window > 0 {
				first = max(0, p-window+1)
			}
			row := r0 * nkv * d // the sequence's first row of this step's k and v
			runs = kvRuns(runs[:0], cache, k[row:], v[row:], first, p, p0, kvh, nkv, d)
			for h := t*nh + kvh*group; h < t*nh+(kvh+1)*group; h++ { // rows of q and out
				attendRuns(out[h*d:(h+1)*d], q[h*d:(h+1)*d], runs, nkv*d, d, scale, probs)
			}
		}
	})
	for s, sq := range seqs {
		r0, row := row0[s], nkv*d
		sq.Cache.store(k[r0*row:(r0+sq.Rows)*row], v[r0*row:(r0+sq.Rows)*row], int(pos[r0]), sq.Rows)
	}
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
	vec.ExpShifted(s, m)
	var sum float64
	for _, e := range s {
		sum += float64(e)
	}
	vec.Divide(s, sum)
}
