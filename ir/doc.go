// Package ir is lagc's graph: typed values in single-assignment form, ops
// with typed attributes and a shape/dtype rule each, nodes, a verifier, a
// text form (Print/Parse round-trip), DOT and JSON export.
//
// # Walking a graph (executors)
//
//	order, err := g.Order()            // topological, deterministic (ties by Node.ID)
//	env := g.Env(T)                    // bind the symbolic dims: Env{"T": T}
//	for _, n := range order {
//		switch n.Op {                  // names of docs/CONTRACTS.md, e.g. "matmul"
//		case "rms_norm":
//			eps := n.AttrFloat("eps")  // also AttrInt, AttrString, AttrInts, AttrShape
//			x, w := n.Inputs[0], n.Inputs[1]
//			dims, _ := n.Outputs[0].Type.Shape.Eval(env) // concrete []int
//			...
//		}
//	}
//
// Values are g.Inputs (tokens i32[T], pos i32[T]), g.Weights (Kind Weight,
// Name the canonical checkpoint name such as "blk.3.attn_q.weight"; a weight
// with From != nil is derived at load time from other weights) and node
// outputs (Kind Activation, Def the producing node). g.Outputs are the
// results: for Laguna "logits" f32[T,V] and "next" i32[T] (argmax).
// g.Value(name) finds any value by name; g.Shapes(env) binds every shape at
// once. Attribute getters return the op's default when the attribute is
// absent. The op table (Op, OpNames, OpDef.Doc/Attrs) is the contract of
// docs/CONTRACTS.md; the attention op owns its KV cache, addressed by its
// `layer` attribute, so no cache dimension appears in the graph.
//
// Dtypes: f32, f16, bf16, i32 and block-quantised weight types (q8_0,
// q4_0, q4_k, q5_k, q6_k). Graphs built by the frontend have f32 activations; rms_norm,
// softplus_gate and router scores are computed in float32 whatever the
// storage type.
//
// # Building and rewriting (frontends, passes)
//
// NewGraph, AddInput, AddWeight, AddNode (infers output types) and Apply
// build graphs; Pattern/MatchValue/Matches match producer trees (add and
// mul in either operand order), ReplaceUses rewires, DeriveWeight records
// weight transforms (e.g. concat gate and up rows), Graph.Live and
// RemoveNodes drop dead code. Users, NumUses and Derivations give use-def
// information, kept current by the mutation methods. Graph.Rewrite is a
// greedy pattern-rewrite driver: RewritePatterns change the graph through
// a Rewriter (Replace, Derive, EraseDead) until none applies. Verify checks a graph: unique
// single assignment, every input defined, known ops and valid attributes,
// declared types equal to inferred ones, no cycles (via gonum's topo).
// Print/Parse are the text form, WriteDOT (gonum's DOT encoder) and
// WriteJSON the other dump formats; ParamCount counts parameters.
package ir
