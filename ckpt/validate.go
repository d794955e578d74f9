package ckpt

import (
	"fmt"
	"strings"
)

// Expected is one tensor a model reads, with the reason for its shape
// (for messages).
type Expected struct {
	Name  string
	Shape []int
	Why   string
}

// maxProblems bounds how many problems one error lists.
const maxProblems = 8

// Validate checks what a checkpoint says about itself: a valid model
// configuration, and element types lagc knows for every tensor. Which
// tensors the model reads, and their shapes, come from the model's graph:
// see CheckTensors.
func Validate(ck Checkpoint) error {
	cfg := ck.Config()
	if cfg == nil {
		return fmt.Errorf("checkpoint has no model configuration")
	}
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("model configuration: %w", err)
	}
	var problems []string
	for _, t := range ck.Tensors() {
		if !t.DType.Known() {
			problems = append(problems, fmt.Sprintf("tensor %s (%s) has unknown element type %s", t.Name, ck.Source(t.Name), t.DType))
		}
	}
	return problemsError("checkpoint does not match its configuration", problems)
}

// CheckTensors checks that ck holds exactly the tensors want lists, each
// with its shape. The error names every problem (up to a limit) with the
// expected and actual shapes and the reason for the expected one.
func CheckTensors(ck Checkpoint, want []Expected) error {
	var problems []string
	wanted := map[string]bool{}
	for _, e := range want {
		wanted[e.Name] = true
		t, ok := ck.Tensor(e.Name)
		if !ok {
			problems = append(problems, fmt.Sprintf("missing tensor %s %v (%s)%s", e.Name, e.Shape, e.Why, hfHint(ck, e.Name)))
			continue
		}
		if !equalShape(t.Shape, e.Shape) {
			problems = append(problems, fmt.Sprintf("tensor %s (%s) has shape %v, expected %v (%s)",
				e.Name, ck.Source(e.Name), t.Shape, e.Shape, e.Why))
		}
	}
	for _, t := range ck.Tensors() {
		if !wanted[t.Name] {
			problems = append(problems, fmt.Sprintf("unexpected tensor %s %v (%s): the model reads no such weight",
				t.Name, t.Shape, ck.Source(t.Name)))
		}
	}
	return problemsError("checkpoint does not match the model", problems)
}

func problemsError(what string, problems []string) error {
	if len(problems) == 0 {
		return nil
	}
	msg := strings.Join(problems[:min(len(problems), maxProblems)], "; ")
	if len(problems) > maxProblems {
		msg += fmt.Sprintf("; and %d more problems", len(problems)-maxProblems)
	}
	return fmt.Errorf("%s: %s", what, msg)
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
