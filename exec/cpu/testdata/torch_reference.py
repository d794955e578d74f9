#!/usr/bin/env python3
"""Reference outputs of transformers' Laguna for exec/cpu's kernel tests.

    python3 exec/cpu/testdata/torch_reference.py exec/cpu/testdata/torch_reference.json

Builds two tiny LagunaForCausalLM models (transformers 5.17, CPU, float32) whose
weights come from a generator that Go reproduces bit for bit (splitmix64 seeded
with the FNV-1a hash of the tensor's name; see reference_test.go), runs a 9-token
prompt through each, and records the rotary tables, every decoder layer's output
and the logits at every position. Only outputs are stored; Go regenerates the
weights from the names, shapes, offsets and scales listed here.
"""
import json
import sys

import torch
import transformers
from transformers import LagunaConfig, LagunaForCausalLM

M64 = (1 << 64) - 1
FULL, SLIDING = "full_attention", "sliding_attention"


def fnv1a(s):
    h = 0xCBF29CE484222325
    for b in s.encode():
        h = ((h ^ b) * 0x100000001B3) & M64
    return h


def values(name, n, offset, scale):
    """offset + scale*u, u = 24 random bits / 2^23 - 1 in [-1, 1), exact in float64."""
    state = fnv1a(name)
    out = []
    for _ in range(n):
        state = (state + 0x9E3779B97F4A7C15) & M64
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
        z ^= z >> 31
        u = float(z >> 40) / 8388608.0 - 1.0
        out.append(offset + scale * u)
    return out


def spread(name):
    if name.endswith("norm.weight") or "layernorm" in name:
        return 1.0, 0.25
    if "e_score_correction_bias" in name:
        return 0.0, 0.125
    if "embed_tokens" in name:
        return 0.0, 1.0
    return 0.0, 0.5


BASE = dict(
    vocab_size=40, hidden_size=24, intermediate_size=20, num_key_value_heads=2, head_dim=16,
    num_attention_heads=4, max_position_embeddings=1024, rms_norm_eps=1e-6, sliding_window=3,
    num_experts=5, num_experts_per_tok=2, moe_intermediate_size=12, shared_expert_intermediate_size=10,
    hidden_act="silu", attention_bias=False,
)

MODELS = [
    dict(name="perhead_yarn_softcap", config=dict(
        BASE, num_hidden_layers=4, num_attention_heads_per_layer=[4, 8, 2, 4],
        layer_types=[FULL, SLIDING, SLIDING, FULL], mlp_layer_types=["dense", "sparse", "sparse", "sparse"],
        gating=True, tie_word_embeddings=False, moe_routed_scaling_factor=2.5, moe_router_logit_softcapping=2.0,
        rope_parameters={
            FULL: {"rope_type": "yarn", "rope_theta": 10000.0, "partial_rotary_factor": 0.5, "factor": 4.0,
                   "original_max_position_embeddings": 256},
            SLIDING: {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 1.0},
        })),
    dict(name="perelement_tied", config=dict(
        BASE, num_hidden_layers=3, num_attention_heads_per_layer=[2, 4, 8],
        layer_types=[SLIDING, FULL, SLIDING], mlp_layer_types=["dense", "dense", "sparse"],
        gating="per-element", tie_word_embeddings=True, moe_routed_scaling_factor=1.0, moe_router_logit_softcapping=0.0,
        rope_parameters={
            FULL: {"rope_type": "yarn", "rope_theta": 500000.0, "partial_rotary_factor": 0.5, "factor": 4.0,
                   "original_max_position_embeddings": 256, "beta_fast": 16.0, "beta_slow": 2.0,
                   "attention_factor": 1.25},
            SLIDING: {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
        })),
]

PROMPT = [3, 17, 5, 39, 0, 22, 8, 31, 12]


def build(spec):
    cfg = LagunaConfig(**spec["config"])
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    model = LagunaForCausalLM(cfg).eval()
    tensors = []
    with torch.no_grad():
        for name, t in sorted(model.state_dict().items()):
            if spec["config"]["tie_word_embeddings"] and name == "lm_head.weight":
                continue  # the same storage as the embedding
            offset, scale = spread(name)
            v = torch.tensor(values(name, t.numel(), offset, scale), dtype=torch.float64).float().reshape(t.shape)
            t.copy_(v)
            tensors.append(dict(name=name, shape=list(t.shape), offset=offset, scale=scale))
    return cfg, model, tensors


def run(spec):
    cfg, model, tensors = build(spec)
    layer_out = []
    hooks = [l.register_forward_hook(lambda m, i, o: layer_out.append((o[0] if isinstance(o, tuple) else o)[0].tolist()))
             for l in model.model.layers]
    with torch.no_grad():
        logits = model(torch.tensor([PROMPT]), use_cache=False).logits[0]
    for h in hooks:
        h.remove()
    rot = model.model.rotary_emb
    rope = {}
    for lt in sorted(set(cfg.layer_types)):
        inv = getattr(rot, f"{lt}_inv_freq")
        rope[lt] = dict(inv_freq=inv.float().tolist(), attention_scaling=float(getattr(rot, f"{lt}_attention_scaling")))
    return dict(name=spec["name"], config=json.loads(cfg.to_json_string()), tensors=tensors, prompt=PROMPT,
                rope=rope, layer_outputs=layer_out, logits=logits.tolist())


def main():
    torch.set_num_threads(1)
    out = dict(transformers=transformers.__version__, torch=torch.__version__, models=[run(s) for s in MODELS])
    with open(sys.argv[1], "w") as f:
        json.dump(out, f, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
