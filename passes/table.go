package passes

// table is every pass lagc has, in the order of the default pipeline, with
// its ordering constraints: the one place both are stated. CheckTable
// verifies it.
var table = []*Pass{
	{Name: "shapes", Default: true, Run: inferShapes,
		Doc: "infer every node's output types from its inputs, in topological order"},

	// The fusions (fuse_*.go, expert_order.go) rewrite the graph that cse,
	// dce and memplan then see.
	{Name: "qkvg-concat", Default: true, Fusion: true, Run: qkvgConcat,
		Doc: "the q, k, v and gate projections of each attention -> one matmul_split over their concatenated rows (those of q's dtype where the dtypes differ)"},
	// Either side of qkvg-concat, which follows q and k back through it.
	{Name: "norm-rope", Default: true, Fusion: true, Run: normRoPE,
		Doc: "rope(rms_norm(x, w), pos) -> norm_rope: each attention head normalised and rotated by one kernel (q_norm, k_norm)"},
	// Either side of qkvg-concat, which finds the gate projection through
	// either form.
	{Name: "attention-gate", Default: true, Fusion: true, Run: attentionGate,
		Doc: "softplus_gate(attention(q, k, v, pos), g) -> attention_gate: the attention kernels apply the output gate as they write"},
	{Name: "gate-up-fuse", Default: true, Fusion: true, Run: gateUpFuse,
		Doc: "SwiGLU gate and up projections (dense, shared expert, routed expert stacks) -> one GEMM with a silu*mul epilogue"},
	{Name: "shared-expert-merge", Default: true, Fusion: true, Run: sharedExpertMerge,
		Doc: "the shared expert -> one more always-selected expert (weight 1) at the end of the routed stacks, so one grouped GEMM does both"},
	// After gate-up-fuse as the seed engine ordered them; after the merge
	// because folding the shared down_proj would hide the shared expert.
	{Name: "residual-fold", Default: true, Fusion: true, Run: residualFold,
		After: []string{"gate-up-fuse", "shared-expert-merge"},
		Doc:   "add(r, matmul(x, W)) -> matmul_add (o_proj, down projections); add(r, moe) -> moe_grouped{residual=1}: the GEMM epilogue accumulates into r"},
	// Scheduling sees the final MoE nodes.
	{Name: "expert-order", Default: true, Fusion: true, Run: expertOrder,
		After: []string{"gate-up-fuse", "shared-expert-merge", "residual-fold"},
		Doc:   "MoE grouped-GEMM schedule: experts in descending tokens-routed order (order only, never results; lower adds the N-bands of L2 reuse)"},

	// CSE compares types.
	{Name: "cse", Default: true, Run: CSE,
		After: []string{"shapes", "qkvg-concat", "norm-rope", "attention-gate", "gate-up-fuse", "shared-expert-merge", "residual-fold"},
		Doc:   "merge nodes applying the same op with the same attributes to the same inputs"},
	// DCE drops what CSE left dead; shapes keeps its view of types current.
	{Name: "dce", Default: true, Run: DCE,
		After: []string{"shapes", "cse", "qkvg-concat", "norm-rope", "attention-gate", "gate-up-fuse", "shared-expert-merge", "residual-fold"},
		Doc:   "drop nodes whose results reach no output (attention kept: it writes its cache) and unused weights"},
	// Plan only what runs, in its final form.
	{Name: "memplan", Default: true, Run: memPlan,
		After: []string{"shapes", "cse", "dce", "qkvg-concat", "norm-rope", "attention-gate", "gate-up-fuse", "shared-expert-merge", "residual-fold", "expert-order"},
		Doc:   "liveness of activations -> offsets in one arena (weights excluded), for decode and prefill step sizes"},
}

// DefaultPipeline is the pass order used when none is given (derived from
// the table).
var DefaultPipeline = tableNames(func(p *Pass) bool { return p.Default })

// FusionPasses are the rewrites that fuse ops, in their default order
// (derived from the table).
var FusionPasses = tableNames(func(p *Pass) bool { return p.Fusion })

func tableNames(keep func(*Pass) bool) []string {
	var out []string
	for _, p := range table {
		if keep(p) {
			out = append(out, p.Name)
		}
	}
	return out
}
