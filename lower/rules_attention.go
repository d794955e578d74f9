package lower

import "fmt"

// The attention rule: decode appends this token's k, v and attends over
// the cache in one kernel (split over the keys when the cache is long,
// then a combine); prefill attends over the cache and the chunk's own
// keys, then stores the chunk (a ring keeps its last window of keys).

func init() {
	defRule("attention", rule{launches: attentionRule, scratch: attentionScratch})
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

func attentionRule(c *stepCtx) ([]Launch, error) {
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
	if c.batch {
		// One decode row per sequence: each appends its k, v to its
		// slot's caches and attends over them.
		return AttentionDecode(AttentionDecodeArgs{DType: dt, Cache: cache, Out: c.out[0], Q: c.in[0], K: c.in[1], V: c.in[2],
			Pos: c.in[3], NH: nh, Scale: scale, Workspace: Ptr{BaseWorkspace, 0}, SMs: c.p.SMs,
			Rows: c.T, Seq: Ptr{BaseSeq, 0}, SeqStride: c.p.KVSeqBytes() / int64(dtypeSize(dt))})
	}
	if c.s.Class == Decode {
		if c.T != 1 {
			return nil, fmt.Errorf("decode attention runs one token, got %d", c.T)
		}
		// The attention kernel appends this token's k, v itself.
		return AttentionDecode(AttentionDecodeArgs{DType: dt, Cache: cache, Out: c.out[0], Q: c.in[0], K: c.in[1], V: c.in[2],
			Pos: c.in[3], NH: nh, Scale: scale, Workspace: Ptr{BaseWorkspace, 0}, SMs: c.p.SMs})
	}
	att, err := AttentionPrefill(AttentionPrefillArgs{DType: dt, Cache: cache, Out: c.out[0], Q: c.in[0], K: c.in[1], V: c.in[2],
		Pos: c.in[3], T: c.T, NH: nh, Scale: scale, FFMA: c.p.PrefillFFMA})
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

// attentionScratch: a split decode attention keeps every split's partial
// results in the workspace, for each row of a batched decode step (which
// runs on the prefill schedule's workspace).
func attentionScratch(c *stepCtx) (int64, int64, error) {
	rows := 1
	if c.s.Class != Decode {
		if c.p.seqs() == 1 {
			return 0, 0, nil
		}
		bs := BatchBuckets(c.p.seqs(), c.s.Tokens)
		rows = bs[len(bs)-1]
	}
	_, kv, err := c.cacheOf()
	if err != nil {
		return 0, 0, err
	}
	q := c.st.In[0].Dims(1)
	if len(q) != 3 {
		return 0, 0, fmt.Errorf("attention q must be [T,nh,d], is %v", q)
	}
	return int64(rows) * DecodeWorkspace(DecodeSplits(kv.Slots, kv.NKV, sms(c.p.SMs)), q[1], kv.HeadDim), 0, nil
}
