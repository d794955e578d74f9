package lower

import (
	"fmt"
)

// The kernel table: which templates of cuda/kernels each op launches, for
// its dtype signature and shape class, with the launch geometry the
// exec/gpu launchers use (kept in step with them: they compute geometry
// from the same shapes, and the plan records it for inspection and cost
// accounting).

const (
	threads1D   = 256  // grid-stride kernels (elementwise, gate, copies)
	maxBlocks   = 8192 // cap of a grid-stride grid
	decodeTile  = 32   // attn_decode keys per tile
	decodeHeads = 16   // attn_decode query heads (warps) per block at most
	splitKeys   = 32   // a decode split covers at least this many slots
	prefillBQ   = 32   // attn_prefill query rows per block
	prefillBK   = 32   // attn_prefill keys per tile
)

func ceilDiv(a, b int) int { return (a + b - 1) / b }

func grid1D(n int) ([3]int, [3]int) {
	b := max(1, min(ceilDiv(n, threads1D), maxBlocks))
	return [3]int{b, 1, 1}, [3]int{threads1D, 1, 1}
}

func launch(kernel, file string, grid, block [3]int, shmem int, dts ...string) Launch {
	return Launch{Kernel: kernel, File: file, DTypes: dts, Grid: grid, Block: block, Shmem: shmem}
}

func g3(x, y int) [3]int { return [3]int{max(x, 1), max(y, 1), 1} }

// DecodeSplits is the number of blocks per kv head the decode attention
// splits a cache of `slots` over (as gpu.Kernels.DecodeSplits).
func DecodeSplits(slots, nkv, sms int) int {
	byLen := ceilDiv(slots, splitKeys)
	byBlocks := max(1, 2*sms/max(nkv, 1))
	return max(1, min(byLen, byBlocks))
}

// DecodeWorkspace is the split-KV workspace of one decode attention.
func DecodeWorkspace(nsplit, nh, d int) int64 {
	if nsplit <= 1 {
		return 0
	}
	return 4 * int64(nsplit) * int64(nh) * int64(d+2)
}

// launches picks the kernels of one step at `tokens` tokens and returns
// them with the workspace they need. The launchers in exec/gpu own the
// geometry at run time; this mirrors their rules so a plan can be read and
// costed without a GPU, and can lag behind a change to them.
func (l *lowerer) launches(st *Step, class string, tokens int) ([]Launch, int64, error) {
	in := func(i int) Operand { return st.In[i] }
	out := func(i int) Operand { return st.Out[i] }
	T := tokens
	switch st.Op {
	case "embedding":
		H := out(0).Last(T)
		return []Launch{launch("embedding", "embedding.cu", g3(min(ceilDiv(H, 256), 64), T), [3]int{256, 1, 1}, 0, out(0).DType)}, 0, nil
	case "rms_norm":
		n := in(0).Last(T)
		rows := in(0).Elems(T) / n
		if n < 1024 {
			return []Launch{launch("rms_norm_warp", "norm.cu", g3(ceilDiv(rows, 8), 1), [3]int{256, 1, 1}, 0, in(0).DType, out(0).DType)}, 0, nil
		}
		th := min(1024, 32*ceilDiv(ceilDiv(n, 8), 32))
		return []Launch{launch("rms_norm_block", "norm.cu", g3(rows, 1), [3]int{th, 1, 1}, 0, in(0).DType, out(0).DType)}, 0, nil
	case "rope":
		d := in(0).Dims(T)
		if len(d) != 3 {
			return nil, 0, fmt.Errorf("rope input must be [T,n,d], got %v", d)
		}
		const warps = 4
		return []Launch{launch("qk_norm_rope", "rope.cu", g3(ceilDiv(d[0]*d[1], warps), 1), [3]int{32 * warps, 1, 1}, warps*d[2]*4, out(0).DType)}, 0, nil
	case "attention":
		return l.attention(st, class, T)
	case "softplus_gate":
		g, b := grid1D(out(0).Elems(T))
		return []Launch{launch("softplus_gate", "gate.cu", g, b, 0, out(0).DType)}, 0, nil
	case "silu", "mul", "add":
		g, b := grid1D(out(0).Elems(T))
		return []Launch{launch(st.Op, "elementwise_ops.cu", g, b, 0, out(0).DType)}, 0, nil
	case "router_topk":
		E, k := in(0).Last(T), st.Int("top_k")
		rows := in(0).Elems(T) / E
		return []Launch{launch("router_topk", "router.cu", g3(rows, 1), [3]int{min(1024, 32*ceilDiv(E, 32)), 1, 1}, 12*E+4*k, in(0).DType)}, 0, nil
	case "argmax":
		V := in(0).Last(T)
		rows := in(0).Elems(T) / V
		return []Launch{launch("argmax", "argmax.cu", g3(rows, 1), [3]int{min(1024, 32*ceilDiv(V, 32)), 1, 1}, 0, in(0).DType)}, 0, nil
	case "matmul", "matmul_swiglu", "matmul_add", "matmul_split":
		return l.matmul(st, class, T)
	case "moe_experts", "moe_grouped":
		return l.moe(st, class, T)
	case "split", "concat", "reshape":
		// Copies: one strided copy per piece (a reshape of a weight is a
		// plain copy).
		var ls []Launch
		pieces := st.Out
		if st.Op == "concat" {
			pieces = st.In
		}
		for _, p := range pieces {
			g, b := grid1D(p.Elems(T))
			ls = append(ls, launch("copy_rows", "executor.cu", g, b, 0, p.DType))
		}
		return ls, 0, nil
	}
	return nil, 0, fmt.Errorf("no CUDA kernel for op %q", st.Op)
}

// attention: decode appends this token's k, v and attends over the cache
// in one kernel (split over the keys when the cache is long, then a
// combine); prefill attends over the cache and the chunk's own keys, then
// stores the chunk (a ring keeps its last window keys).
func (l *lowerer) attention(st *Step, class string, T int) ([]Launch, int64, error) {
	kv := l.p.KV[st.KV]
	q := st.In[0].Dims(T)
	if len(q) != 3 {
		return nil, 0, fmt.Errorf("attention q must be [T,nh,d], got %v", q)
	}
	nh, d, nkv := q[1], kv.HeadDim, kv.NKV
	if nh%nkv != 0 {
		return nil, 0, fmt.Errorf("%d query heads are not a multiple of %d kv heads", nh, nkv)
	}
	dt := st.Out[0].DType
	row := nkv * d
	group := nh / nkv
	appendL := launch("kv_append", "kvcache.cu", g3(ceilDiv(row, 256), T), [3]int{256, 1, 1}, 0, dt)
	if class == Decode {
		ns := DecodeSplits(kv.Slots, nkv, l.o.SMs)
		heads := min(group, decodeHeads)
		d4 := (d + 3) &^ 3
		kp := d4 + (36-d4%32)%32
		shmem := 4 * (heads*d4 + decodeTile*kp + decodeTile*d4)
		att := launch("attn_decode", "attention.cu", [3]int{ns, nkv, ceilDiv(group, heads)}, [3]int{32 * heads, 1, 1}, shmem, dt)
		att.DTypes = append(att.DTypes, fmt.Sprint(ceilDiv(d4, 128)))
		ls := []Launch{att}
		if ns > 1 {
			ls = append(ls, launch("attn_decode_combine", "attention.cu", g3(nh, 1), [3]int{min(128, 32*ceilDiv(d, 32)), 1, 1}, 4*(ns+1), dt))
		}
		return ls, DecodeWorkspace(ns, nh, d), nil
	}
	var att Launch
	if dt == "bf16" && (d == 64 || d == 128) {
		// Tensor cores (attention_prefill_tc.cu): 64 rows of one kv head's
		// query group a CTA; Q and two stages of 64 keys and values, rows
		// padded to d+8 (exec/gpu prefillTCSmem).
		att = launch("attn_prefill_tc", "attention_prefill_tc.cu", g3(ceilDiv(T*group, 64), nkv), [3]int{128, 1, 1}, 2*(d+8)*(64+4*64), dt)
		att.DTypes = append(att.DTypes, fmt.Sprint(d))
	} else {
		dch := ceilDiv(d, 32)
		dp := 32 * dch
		shmem := 4 * (prefillBQ*(dp+1) + prefillBK*(dp+1) + prefillBK*dp + prefillBQ*(prefillBK+1) + 4*prefillBQ)
		att = launch("attn_prefill", "attention.cu", g3(ceilDiv(T*group, prefillBQ), nkv), [3]int{128, 1, 1}, shmem, dt)
		att.DTypes = append(att.DTypes, fmt.Sprint(dch))
	}
	if kv.Window > 0 {
		return []Launch{att, launch("kv_compact_ring", "kvcache.cu", g3(ceilDiv(row, 256), min(T, kv.Window)), [3]int{256, 1, 1}, 0, dt)}, 0, nil
	}
	return []Launch{att, appendL}, 0, nil
}

// Tensor-core tile constants of matmul.cu (gpu.DefaultMMAK = 64:
// three pipeline stages of K steps of 64, rows padded by 8 elements).
const (
	gemvMaxRows = 8
	mmaBN       = 128
	mmaBK       = 64
	mmaStages   = 3
)

func mmaSmem(mi int) int { return mmaStages * (32*mi + mmaBN) * (mmaBK + 8) * 2 }

func dtypeSize(dt string) int {
	if dt == "f32" || dt == "i32" {
		return 4
	}
	return 2
}

// matmulLaunch mirrors gpu.PlanMatMul: the GEMV for T <= 8 rows, the
// bf16 tensor-core GEMM for bf16 x and w with K % 8 == 0, else the FFMA
// GEMM. Arena and weight offsets are 256-byte aligned, so vector loads
// apply wherever K allows.
func (l *lowerer) matmulLaunch(T, K, N int, x, w, y string, swiglu bool) Launch {
	sw := "0"
	if swiglu {
		sw = "1"
	}
	switch {
	case T <= gemvMaxRows:
		vec := "0"
		if K%(16/dtypeSize(w)) == 0 {
			vec = "1"
		}
		vecs := K / (16 / dtypeSize(w))
		split := 1
		for split < 8 && N*split < 32*l.o.SMs && vecs/(32*split*2) >= 1 {
			split *= 2
		}
		return launch("gemv", "matmul.cu", g3(ceilDiv(N, 8/split), 1), [3]int{256, 1, 1}, 0, x, w, y, fmt.Sprint(T), sw, vec)
	case x == "bf16" && w == "bf16" && K%8 == 0:
		bn := 128
		if swiglu {
			bn = 64
		}
		mi := 4
		if ceilDiv(T, 128)*ceilDiv(N, bn) < 2*l.o.SMs {
			mi = 2
		}
		return launch("gemm_bf16", "matmul.cu", g3(ceilDiv(T, 32*mi), ceilDiv(N, bn)), [3]int{256, 1, 1},
			mmaSmem(mi), y, fmt.Sprint(mi), sw, fmt.Sprint(mmaBK))
	}
	return launch("gemm_simple", "matmul.cu", g3(ceilDiv(T, 64), ceilDiv(N, 64)), [3]int{256, 1, 1}, 0, x, w, y, sw)
}

// matmul covers matmul and its fused forms (ir/optable_fused.go) that
// MatMul's epilogues implement; matmul_split runs one GEMV over the whole
// weight when its outputs form one row (decode; see SplitRow), else one
// GEMM per row block.
func (l *lowerer) matmul(st *Step, class string, T int) ([]Launch, int64, error) {
	x, w := st.In[0], st.In[1]
	wd := w.Dims(T)
	if len(wd) != 2 {
		return nil, 0, fmt.Errorf("weight %s must be [N,K], is %v", w.Value, wd)
	}
	N, K := wd[0], wd[1]
	rows := x.Elems(T) / max(K, 1)
	switch st.Op {
	case "matmul_swiglu":
		return []Launch{l.matmulLaunch(rows, K, N/2, x.DType, w.DType, st.Out[0].DType, true)}, 0, nil
	case "matmul_split":
		if st.SplitRow(T) {
			return []Launch{l.matmulLaunch(rows, K, N, x.DType, w.DType, st.Out[0].DType, false)}, 0, nil
		}
		var ls []Launch
		for _, o := range st.Out {
			ls = append(ls, l.matmulLaunch(rows, K, o.Last(T), x.DType, w.DType, o.DType, false))
		}
		return ls, 0, nil
	}
	return []Launch{l.matmulLaunch(rows, K, N, x.DType, w.DType, st.Out[0].DType, false)}, 0, nil
}

// moe mirrors gpu.MoEExperts: per-route GEMVs over the selected
// experts for T <= 8 (or where the grouped path cannot run), else routes
// grouped by expert on the device and grouped tensor-core GEMMs.
//
// moe_grouped runs on the same kernels: its fused gate_up stack is stored
// as separate gate and up stacks (LayoutGateUpSplit), its shared experts
// (at the end of the stacks) become extra routes of weight 1 appended to
// every token's by moe_add_shared, and its residual is copied into the
// output first, which the experts then accumulate into.
func (l *lowerer) moe(st *Step, class string, T int) ([]Launch, int64, error) {
	d := st.In[len(st.In)-1-st.Int("residual")].Dims(T) // down [E,H,I]
	if len(d) != 3 {
		return nil, 0, fmt.Errorf("down stack must be [E,H,I], is %v", d)
	}
	E, H, I := d[0], d[1], d[2]
	k := st.In[1].Last(T) + st.Int("shared")
	R := T * k
	var pre []Launch
	var aux int64
	if st.Op == "moe_grouped" && st.Int("shared") > 0 {
		g, b := grid1D(R)
		pre = append(pre, launch("moe_add_shared", "executor.cu", g, b, 0))
		aux = 2 * align(int64(4*R))
	}
	x, wt, y := st.In[0].DType, st.In[3].DType, st.Out[0].DType
	grouped := T > gemvMaxRows && x == "bf16" && wt == "bf16" && H%8 == 0 && I%8 == 0 && E <= 1024
	if !grouped {
		vec := "0"
		p := 16 / dtypeSize(wt)
		if H%p == 0 && I%p == 0 {
			vec = "1"
		}
		ws := align(int64(4 * R * I))
		return append(pre,
			launch("moe_gateup_gemv", "moe.cu", g3(ceilDiv(R*I, 8), 1), [3]int{256, 1, 1}, 0, x, wt, vec),
			launch("moe_down_gemv", "moe.cu", g3(ceilDiv(T*H, 8), 1), [3]int{256, 1, 1}, 0, wt, y, vec),
		), ws + aux, nil
	}
	mi := 2
	if R >= 128*E {
		mi = 4
	}
	ch := max(256, (ceilDiv(R, 128)+31)&^31)
	nchunks := ceilDiv(R, ch)
	maxTiles := ceilDiv(R, 32*mi) + min(E, R)
	smem := mmaSmem(mi)
	v := 1
	if H%8 == 0 {
		v = 8
	}
	ws := 2*align(int64(4*nchunks*E)) + 3*align(int64(4*E)) + align(4) + align(int64(16*maxTiles)) +
		2*align(int64(4*R)) + align(int64(2*R*I)) + align(int64(2*R*H))
	return append(pre,
		launch("moe_hist", "moe.cu", g3(nchunks, 1), [3]int{256, 1, 1}, 0),
		launch("moe_schedule", "moe.cu", g3(1, 1), [3]int{1024, 1, 1}, 0),
		launch("moe_scatter", "moe.cu", g3(nchunks, 1), [3]int{32, 1, 1}, 0),
		launch("moe_gateup_mma", "moe.cu", g3(maxTiles, ceilDiv(I, 64)), [3]int{256, 1, 1}, smem, fmt.Sprint(mi), fmt.Sprint(mmaBK)),
		launch("moe_down_mma", "moe.cu", g3(maxTiles, ceilDiv(H, mmaBN)), [3]int{256, 1, 1}, smem, fmt.Sprint(mi), fmt.Sprint(mmaBK)),
		launch("moe_combine", "moe.cu", g3(min(ceilDiv(T*(H/v), 256), l.o.SMs*32), 1), [3]int{256, 1, 1}, 0, y, fmt.Sprint(v)),
	), ws + aux, nil
}

// SplitRow reports whether a matmul_split step's outputs at t tokens are
// one contiguous row [1, sum(sizes)] in the order of the weight's row
// blocks, all of one dtype (the decode schedule lays them out so), which a
// single GEMV over the whole weight writes.
func (st *Step) SplitRow(t int) bool {
	if st.Op != "matmul_split" || t != 1 || len(st.Out) == 0 {
		return false
	}
	off := st.Out[0].Offset
	for _, o := range st.Out {
		if o.Kind != "activation" || o.DType != st.Out[0].DType || o.Offset != off {
			return false
		}
		off += int64(o.Elems(t) * dtypeSize(o.DType))
	}
	return true
}
