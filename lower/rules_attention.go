package lower

import "fmt"

// The attention rules: decode appends this token's k, v and attends over
// the cache in one kernel (split over the keys when the cache is long, the
// blocks merging their splits themselves); prefill attends over the cache
// and the chunk's own keys, then stores the chunk (a ring keeps its last
// window of keys). attention_gate is attention whose kernels multiply by
// the output gate as they write.

func init() {
	defRule("attention", rule{launches: func(c *stepCtx) ([]Launch, error) { return attentionRule(c, OutputGate{}) },
		scratch: attentionScratch, counters: attentionCounters})
	defRule("attention_gate", rule{launches: func(c *stepCtx) ([]Launch, error) {
		st := c.st
		if st.In[4].DType != st.Out[0].DType {
			return nil, fmt.Errorf("attention gate %s is %s, the output %s", st.In[4].Value, st.In[4].DType, st.Out[0].DType)
		}
		return attentionRule(c, OutputGate{Gate: c.in[4], G: st.In[4].Last(c.T)})
	}, scratch: attentionScratch, counters: attentionCounters})
}

// cacheOf is the step's KV cache in the plan's KV allocation.
func (c *stepCtx) cacheOf() (Cache, KV, error) {
	st := c.st
	if st.KV < 0 || st.KV >= len(c.p.KV) {
		return Cache{}, KV{}, fmt.Errorf("no KV cache for layer %d", st.Layer)
	}
	kv := c.p.KV[st.KV]
	return Cache{K: Ptr{BaseKV, kv.Offset}, V: Ptr{BaseKV, kv.Offset + kv.Half()}, NKV: kv.NKV, HeadDim: kv.HeadDim,
		Window: kv.Window, Slots: kv.Slots}, kv, nil
}

func attentionRule(c *stepCtx, gate OutputGate) ([]Launch, error) {
	st := c.st
	cache, kv, err := c.cacheOf()
	if err != nil {
		return nil, err
	}
	for _, o := range append(st.In[:3:3], st.Out[0]) {
		if o.DType != kv.DType {
			return nil, fmt.Errorf("attention operands must be %s (the cache dtype), %s is %s", kv.DType, o.Value, o.DType)
		}
	}
	q := st.In[0].Dims(1)
	if len(q) != 3 {
		return nil, fmt.Errorf("attention q must be [T,nh,d], is %v", q)
	}
	nh, scale, dt := q[1], float32(st.Float("scale")), kv.DType
	if c.batch || c.s.Class == Decode {
		rows := 1
		if c.batch {
			rows = c.T
		}
		a := AttentionDecodeArgs{DType: dt, Cache: cache, Out: c.out[0], Q: c.in[0], K: c.in[1], V: c.in[2],
			Pos: c.in[3], NH: nh, Scale: scale, Gate: gate, Workspace: Ptr{BaseWorkspace, attentionQ8XReserve(rows, nh, kv.HeadDim)},
			Counters: Ptr{BaseSync, 0}, Splits: c.decodeSplits(kv), Stages: c.p.DecodeStages, MMA: c.p.DecodeMMA, SMs: c.p.SMs}
		if c.batch {
			// One decode row per sequence: each appends its k, v to its
			// slot's caches and attends over them.
			a.Rows, a.Seq, a.SeqStride = c.T, Ptr{BaseSeq, 0}, c.p.KVSeqBytes()/int64(dtypeSize(dt))
		} else if c.T != 1 {
			return nil, fmt.Errorf("decode attention runs one token, got %d", c.T)
		}
		// The attention kernel appends this token's k, v itself.
		return AttentionDecode(a)
	}
	att, err := AttentionPrefill(AttentionPrefillArgs{DType: dt, Cache: cache, Out: c.out[0], Q: c.in[0], K: c.in[1], V: c.in[2],
		Pos: c.in[3], T: c.T, NH: nh, Scale: scale, Gate: gate, FFMA: c.p.PrefillFFMA,
		Wgmma: !c.p.PrefillAttnTC, WgRows: c.p.PrefillAttnRows, WgStages: c.p.PrefillAttnStages, CC: c.p.cc()})
	if err != nil {
		return nil, err
	}
	store := KVStoreArgs{DType: dt, Cache: cache, K: c.in[1], V: c.in[2], Pos: c.in[3], T: c.T}
	var st2 Launch
	if cache.Window > 0 {
		st2, err = KVCompactRing(store)
	} else {
		st2, err = KVAppend(store)
	}
	if err != nil {
		return nil, err
	}
	return []Launch{att, st2}, nil
}

// decodeRows is the most rows a step's decode attention runs: 1 in the
// decode schedule, the largest batch bucket in the prefill schedule of a
// plan with several sequence slots (batched decode runs on it), 0 where
// no decode attention runs.
func (c *stepCtx) decodeRows() int {
	if c.s.Class == Decode {
		return 1
	}
	if c.p.SeqSlots() == 1 {
		return 0
	}
	return maxBucket(c.p.SeqSlots(), c.s.Tokens)
}

// attentionHeads returns the step's query heads and KV cache.
func (c *stepCtx) attentionHeads() (int, KV, error) {
	_, kv, err := c.cacheOf()
	if err != nil {
		return 0, KV{}, err
	}
	q := c.st.In[0].Dims(1)
	if len(q) != 3 {
		return 0, KV{}, fmt.Errorf("attention q must be [T,nh,d], is %v", q)
	}
	return q[1], kv, nil
}

// attentionScratch: a split decode attention keeps every split's partial
// results in the workspace, for each row of a batched decode step (which
// runs on the prefill schedule's workspace).
func attentionScratch(c *stepCtx) (int64, int64, error) {
	rows := c.decodeRows()
	if rows == 0 {
		return 0, 0, nil
	}
	nh, kv, err := c.attentionHeads()
	if err != nil {
		return 0, 0, err
	}
	return attentionQ8XReserve(rows, nh, kv.HeadDim) + int64(rows)*DecodeWorkspace(c.decodeSplits(kv), nh, kv.HeadDim), 0, nil
}

// decodeSplits is the decode attention's split count over the cache kv:
// Options.DecodeSplits where given, else DecodeSplits.
func (c *stepCtx) decodeSplits(kv KV) int {
	if c.p.DecodeSplits > 0 {
		return c.p.DecodeSplits
	}
	return DecodeSplits(kv.Slots, kv.NKV, sms(c.p.SMs))
}

// attentionQ8XReserve is the start of the workspace a decode attention
// leaves to the quantised copy of its output (rows x nh*d, Q8XBytes): the
// next quantised GEMV quantises that output there (at the workspace's
// start), and fuseAttnQ8X lets the attention write it, which it may only
// where its partials lie apart.
func attentionQ8XReserve(rows, nh, d int) int64 { return align256(Q8XBytes(rows, nh*d)) }

// attentionCounters: a split decode attention's blocks count themselves
// done per row, kv head and block of query heads (BaseSync).
func attentionCounters(c *stepCtx) (int64, error) {
	rows := c.decodeRows()
	if rows == 0 {
		return 0, nil
	}
	nh, kv, err := c.attentionHeads()
	if err != nil || c.decodeSplits(kv) == 1 {
		return 0, err
	}
	return DecodeCounters(rows, nh, kv.NKV), nil
}
