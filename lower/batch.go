package lower

import "fmt"

// Batched decode (continuous batching): a step of B decode rows, one for
// each of B sequences, each sequence in its own slot of KV caches. It runs
// the prefill schedule at T=B (its arena holds B <= Tokens rows and every
// op but attention treats rows independently), with the attention step
// lowered to the decode kernel over B rows: row r appends its k, v at
// pos[r] in the caches of slot seq[r] and attends over them. B is a bucket
// (BatchBuckets) so that one CUDA graph per bucket serves every step;
// padding rows have slot -1.
//
// A row's result does not depend on B: the matmuls and experts run their
// decode GEMVs, which compute each row in the same order at any row count
// up to GEMVMaxRows, over runs of GEMVMaxRows rows; every other kernel
// treats rows alike at any T (norms are chosen by row length, attention's
// split count by the cache, and its splits are merged in split order). So
// a sequence decodes the same bits in any
// batch. Options.BatchGEMM trades that for fewer weight reads: buckets
// above GEMVMaxRows run the GEMMs, whose rounding differs from the GEMVs'.

// BaseSeq is the region of each row's sequence slot, i32 [T].
const BaseSeq = "seq"

// MaxSeqs bounds Options.Seqs: every slot holds a full set of KV caches.
const MaxSeqs = 1024

// BatchBuckets are the batch sizes a plan of seqs sequence slots and
// prefill chunk runs decode steps at: powers of two up to the first that
// holds every slot, none above the chunk (the arena's rows).
func BatchBuckets(seqs, chunk int) []int {
	var out []int
	for b := 1; b <= maxBucket(seqs, chunk); b *= 2 {
		out = append(out, b)
	}
	return out
}

// maxBucket is the largest of BatchBuckets.
func maxBucket(seqs, chunk int) int {
	b := 1
	for b < seqs && 2*b <= chunk {
		b *= 2
	}
	return b
}

// Bucket is the smallest of BatchBuckets that holds n rows, or the largest
// when none does (the caller splits the rows). It allocates nothing: the
// executor asks it every decode step.
func (p *Plan) Bucket(n int) int {
	top, b := maxBucket(p.SeqSlots(), p.Prefill.Tokens), 1
	for b < n && b < top {
		b *= 2
	}
	return b
}

// SeqSlots is the plan's sequence slots (plans written before they
// existed hold one).
func (p *Plan) SeqSlots() int { return max(p.Seqs, 1) }

// KVSeqBytes is the distance between two sequence slots' KV caches: the
// executor allocates Seqs times KVBytes, slot s at s*KVBytes.
func (p *Plan) KVSeqBytes() int64 { return align(p.KVBytes) }

// DeviceBytes is about what an executor of p allocates on the device: the
// weights, every sequence slot's KV caches, the rope tables, the bf16
// weight copies and the largest schedule's activations, workspace and
// routes (not the CUDA context, modules or libraries' workspaces).
func (p *Plan) DeviceBytes() int64 {
	n := align(p.WeightBytes) + int64(p.SeqSlots())*p.KVSeqBytes() + align(p.RopeBytes) + align(p.ShadowBytes)
	var arena, ws, routes int64
	for _, s := range []*Schedule{p.Decode, p.Prefill} {
		if s != nil {
			arena, ws, routes = max(arena, s.Arena), max(ws, s.Workspace), max(routes, s.Routes)
		}
	}
	return n + align(arena) + align(ws) + align(routes)
}

// AtBatch returns the launches of a batched decode step of b rows (a
// bucket): the prefill schedule at T=b with batched decode attention.
func (p *Plan) AtBatch(b int) ([][]Launch, error) {
	if b < 1 || b > p.Prefill.Tokens {
		return nil, fmt.Errorf("lower: a batched decode step runs 1 to %d rows (the prefill chunk), not %d", p.Prefill.Tokens, b)
	}
	return p.at(p.Prefill, b, true)
}

// gemvRuns is f(0, T), or in a batched decode step of more rows than a
// GEMV takes, f(r, n) for every run of n <= GEMVMaxRows rows from row r:
// each row then gets exactly the arithmetic it gets in any other batch,
// unless the plan lets large batches run the GEMMs (Options.BatchGEMM).
func (c *stepCtx) gemvRuns(T int, f func(r, n int) ([]Launch, error)) ([]Launch, error) {
	if c.p.BatchGEMM {
		return f(0, T)
	}
	return c.rowRuns(T, f)
}

// rowRuns is gemvRuns whatever Plan.BatchGEMM says: a batched step's rows
// in runs of GEMVMaxRows.
func (c *stepCtx) rowRuns(T int, f func(r, n int) ([]Launch, error)) ([]Launch, error) {
	if !c.batch || T <= GEMVMaxRows {
		return f(0, T)
	}
	var ls []Launch
	for r := 0; r < T; r += GEMVMaxRows {
		l, err := f(r, min(GEMVMaxRows, T-r))
		if err != nil {
			return nil, err
		}
		ls = append(ls, l...)
	}
	return ls, nil
}
