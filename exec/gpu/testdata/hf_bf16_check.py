# How the hfBF16 figures of executor_test.go were measured: transformers 5.17
# bf16 (and f32) on each fixture vs its f32 goldens, and lagc bf16 (lagc run
# --json --logits) vs both. Run from the repository root on the GPU machine
# with the lagc binary at .gpu/exe/lagc and OUT set to an output folder.
# transformers bf16 vs its f32 goldens, and lagc bf16 (lagc run --json) vs both.
import glob, json, os, subprocess, sys
import torch
from transformers import LagunaForCausalLM
out = {}
for d in sorted(glob.glob("testdata/fixtures/*")):
    name = os.path.basename(d)
    g = json.load(open(d + "/golden.json"))
    P = g["prompt_ids"]
    r = {}
    try:
        for dtn, dt in [("bf16", torch.bfloat16), ("f32", torch.float32)]:
            try:
                m = LagunaForCausalLM.from_pretrained(d, attn_implementation="eager", dtype=dt).cuda().eval()
            except TypeError:
                m = LagunaForCausalLM.from_pretrained(d, attn_implementation="eager", torch_dtype=dt).cuda().eval()
            with torch.no_grad():
                o = m(input_ids=torch.tensor([P]).cuda(), use_cache=True)
                lg = o.logits[0].float().cpu()
                pkv = o.past_key_values
                t = int(lg[-1].argmax())
                toks = []
                for i in range(len(g["greedy"])):
                    toks.append(t)
                    o = m(input_ids=torch.tensor([[t]]).cuda(), past_key_values=pkv, use_cache=True)
                    pkv = o.past_key_values
                    t = int(o.logits[0, -1].float().argmax())
            ref = torch.tensor(g["prompt_logits"])
            div = next((i for i, (a, b) in enumerate(zip(toks, g["greedy"])) if a != b), None)
            r["hf_" + dtn] = {"prompt_max_diff": float((lg - ref).abs().max()), "argmax_changed": int((lg.argmax(-1) != torch.tensor(g["argmax"])).sum()),
                              "greedy": toks, "first_divergence": div, "last_logits": lg[-1].tolist()}
        p = subprocess.run([".gpu/exe/lagc", "run", "--model", d, "--prompt-ids", ",".join(map(str, P)), "-n", str(len(g["greedy"])),
                            "--device", "cuda", "--dtype", "bf16", "--json", "--logits"], capture_output=True, text=True)
        j = json.loads(p.stdout)
        ours = torch.tensor(j["last_logits"])
        gen = j["generated_ids"]
        r["lagc_bf16"] = {"greedy": gen, "first_divergence_vs_f32": next((i for i, (a, b) in enumerate(zip(gen, g["greedy"])) if a != b), None),
                          "first_divergence_vs_hf_bf16": next((i for i, (a, b) in enumerate(zip(gen, r["hf_bf16"]["greedy"])) if a != b), None),
                          "last_max_diff_vs_f32": float((ours - torch.tensor(g["last_logits"])).abs().max()),
                          "last_max_diff_vs_hf_bf16": float((ours - torch.tensor(r["hf_bf16"]["last_logits"])).abs().max())}
        r["hf_bf16_last_max_diff_vs_f32"] = float((torch.tensor(r["hf_bf16"]["last_logits"]) - torch.tensor(g["last_logits"])).abs().max())
    except Exception as e:
        r["error"] = repr(e)
    for k in ("hf_bf16", "hf_f32"):
        if k in r:
            r[k].pop("last_logits", None)
    out[name] = r
    print(name, json.dumps(r))
json.dump(out, open(os.environ["OUT"] + "/bf16check.json", "w"), indent=1)
