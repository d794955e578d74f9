package ckpt

import (
	"fmt"
	"lagc/config"
	"strings"
)

// Expected is one tensor a configuration implies, with the reason for its
// shape (for messages).
type Expected struct {
	Name  string
	Shape []int
	Why   string
}

// ExpectedTensors lists every canonical tensor cfg implies, in Tensors order.
func ExpectedTensors(cfg *config.Config) []Expected {
	V, H, d, kv := cfg.VocabSize, cfg.HiddenSize, cfg.HeadDim, cfg.NumKVHeads
	out := []Expected{
		{"token_embd.weight", []int{V, H}, "vocab_size, hidden_size"},
		{"output_norm.weight", []int{H}, "hidden_size"},
	}
	if !cfg.TieWordEmbeddings {
		out = append(out, Expected{"output.weight", []int{V, H}, "vocab_size, hidden_size; tie_word_embeddings is false"})
	}
	for l := 0; l < cfg.NumLayers; l++ {
		p := fmt.Sprintf("blk.%d.", l)
		nh := cfg.Heads(l)
		q := fmt.Sprintf("%d heads x head_dim %d", nh, d)
		gw := fmt.Sprintf("%s gating with %d heads", cfg.Gating, nh)
		if cfg.Gating == config.GatingPerElement {
			gw += fmt.Sprintf(" x head_dim %d", d)
		}
		out = append(out,
			Expected{p + "attn_norm.weight", []int{H}, "hidden_size"},
			Expected{p + "attn_q.weight", []int{nh * d, H}, q + ", hidden_size"},
			Expected{p + "attn_k.weight", []int{kv * d, H}, "num_key_value_heads x head_dim, hidden_size"},
			Expected{p + "attn_v.weight", []int{kv * d, H}, "num_key_value_heads x head_dim, hidden_size"},
			Expected{p + "attn_q_norm.weight", []int{d}, "head_dim"},
			Expected{p + "attn_k_norm.weight", []int{d}, "head_dim"},
			Expected{p + "attn_gate.weight", []int{cfg.GateRows(l), H}, gw + ", hidden_size"},
			Expected{p + "attn_output.weight", []int{H, nh * d}, "hidden_size, " + q},
			Expected{p + "ffn_norm.weight", []int{H}, "hidden_size"},
		)
		if !cfg.IsMoE(l) {
			I := cfg.IntermediateSize
			out = append(out,
				Expected{p + "ffn_gate.weight", []int{I, H}, "dense layer: intermediate_size, hidden_size"},
				Expected{p + "ffn_up.weight", []int{I, H}, "dense layer: intermediate_size, hidden_size"},
				Expected{p + "ffn_down.weight", []int{H, I}, "dense layer: hidden_size, intermediate_size"},
			)
			continue
		}
		E, Ie, Is := cfg.NumExperts, cfg.MoEIntermediateSize, cfg.SharedExpertSize
		out = append(out,
			Expected{p + "ffn_gate_inp.weight", []int{E, H}, "MoE layer: num_experts, hidden_size"},
			Expected{p + "exp_probs_b.bias", []int{E}, "MoE layer: num_experts"},
			Expected{p + "ffn_gate_exps.weight", []int{E, Ie, H}, "num_experts, moe_intermediate_size, hidden_size"},
			Expected{p + "ffn_up_exps.weight", []int{E, Ie, H}, "num_experts, moe_intermediate_size, hidden_size"},
			Expected{p + "ffn_down_exps.weight", []int{E, H, Ie}, "num_experts, hidden_size, moe_intermediate_size"},
		)
		if Is > 0 {
			out = append(out,
				Expected{p + "ffn_gate_shexp.weight", []int{Is, H}, "shared_expert_intermediate_size, hidden_size"},
				Expected{p + "ffn_up_shexp.weight", []int{Is, H}, "shared_expert_intermediate_size, hidden_size"},
				Expected{p + "ffn_down_shexp.weight", []int{H, Is}, "hidden_size, shared_expert_intermediate_size"},
			)
		}
	}
	return out
}

// maxProblems bounds how many problems one Validate error lists.
const maxProblems = 8

// Validate checks that ck holds exactly the tensors its configuration
// implies, each with the implied shape and a float dtype or a known
// quantised one. The error names every problem (up to a limit) with the
// expected and actual shapes.
func Validate(ck Checkpoint) error {
	cfg := ck.Config()
	if cfg == nil {
		return fmt.Errorf("checkpoint has no model configuration")
	}
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("model configuration: %w", err)
	}
	var problems []string
	want := map[string]bool{}
	for _, e := range ExpectedTensors(cfg) {
		want[e.Name] = true
		t, ok := ck.Tensor(e.Name)
		if !ok {
			problems = append(problems, fmt.Sprintf("missing tensor %s %v (%s)%s", e.Name, e.Shape, e.Why, hfHint(ck, e.Name)))
			continue
		}
		if !equalShape(t.Shape, e.Shape) {
			problems = append(problems, fmt.Sprintf("tensor %s (%s) has shape %v, expected %v (%s)",
				e.Name, ck.Source(e.Name), t.Shape, e.Shape, e.Why))
			continue
		}
		if !t.DType.Known() {
			problems = append(problems, fmt.Sprintf("tensor %s (%s) has unknown element type %s", e.Name, ck.Source(e.Name), t.DType))
		}
	}
	for _, t := range ck.Tensors() {
		if !want[t.Name] {
			problems = append(problems, fmt.Sprintf("unexpected tensor %s %v (%s): the configuration implies no such weight",
				t.Name, t.Shape, ck.Source(t.Name)))
		}
	}
	if len(problems) == 0 {
		return nil
	}
	msg := strings.Join(problems[:min(len(problems), maxProblems)], "; ")
	if len(problems) > maxProblems {
		msg += fmt.Sprintf("; and %d more problems", len(problems)-maxProblems)
	}
	return fmt.Errorf("checkpoint does not match its configuration: %s", msg)
}

// hfHint names the HF tensor a missing canonical one comes from.
func hfHint(ck Checkpoint, name string) string {
	if ck.Format() != "safetensors" {
		return ""
	}
	switch name {
	case "token_embd.weight":
		return ": expected model.embed_tokens.weight"
	case "output_norm.weight":
		return ": expected model.norm.weight"
	case "output.weight":
		return ": expected lm_head.weight"
	}
	b, rest, ok := splitBlock(name)
	if !ok {
		return ""
	}
	for hf, c := range hfLayerNames {
		if c == rest && !strings.Contains(hf, "shared_experts") && !strings.HasPrefix(hf, "mlp.gate.e_") && !strings.HasPrefix(hf, "mlp.experts.down_proj") {
			return fmt.Sprintf(": expected model.layers.%d.%s", b, hf)
		}
	}
	switch rest {
	case "ffn_gate_exps.weight", "ffn_up_exps.weight":
		return fmt.Sprintf(": expected model.layers.%d.mlp.experts.gate_up_proj or mlp.experts.N.%s_proj.weight", b, strings.TrimSuffix(strings.TrimPrefix(rest, "ffn_"), "_exps.weight"))
	case "ffn_down_exps.weight":
		return fmt.Sprintf(": expected model.layers.%d.mlp.experts.down_proj or mlp.experts.N.down_proj.weight", b)
	}
	return ""
}
