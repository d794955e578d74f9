#!/usr/bin/env python3
"""Trains the byte-level BPE fixture and computes reference encodings and chat
renderings with Hugging Face tokenizers/transformers (run on the H200 machine,
which has them; no network needed).

    python3 gen_reference.py OUTDIR

Writes OUTDIR/tokenizer.json, reference.json, chat_reference.json, log.txt.
The pre-tokenizer is Laguna's as its tokenizer.json declares it: a Sequence of
Split((?:\\r?\\n)+(?!\\r?\\n), MergedWithNext), Split(<cl100k-style regex with a
single \\p{N}>, Isolated) and ByteLevel(add_prefix_space=False, use_regex=False).
"""
import glob
import json
import os
import sys
import sysconfig
import tempfile
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = sys.argv[1] if len(sys.argv) > 1 else "."
LOG = open(os.path.join(OUT, "log.txt"), "w", encoding="utf-8")


def log(*a):
    s = " ".join(str(x) for x in a)
    print(s, flush=True)
    LOG.write(s + "\n")
    LOG.flush()


NEWLINE_RE = r"(?:\r?\n)+(?!\r?\n)"
LAGUNA_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
             r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# Ids 0, 2, 9, 18, 19, 23, 24, 25, 26 carry Laguna's real names and ids;
# the other names below are Laguna's documented specials placed at guessed
# ids, and 〈|RESERVED_n|〉 fills the gaps.
SPECIALS = [
    "〈|UNK|〉", "〈|CLS|〉", "〈|EOS|〉", "〈|SEP|〉", "〈|MASK|〉",
    "〈|FIM_START|〉", "〈|FIM_MIDDLE|〉", "〈|FIM_SUFFIX|〉", "〈|CODE_START|〉",
    "〈|PAD|〉", "〈|CODE_END|〉", "〈|META_START|〉", "〈|META_END|〉",
    "〈|RESERVED_13|〉", "〈|RESERVED_14|〉", "〈|RESERVED_15|〉", "〈|RESERVED_16|〉",
    "〈|RESERVED_17|〉", "<think>", "</think>", "〈|RESERVED_20|〉",
    "〈|RESERVED_21|〉", "〈|RESERVED_22|〉", "<assistant>", "</assistant>",
    "<tool_call>", "</tool_call>",
]
NOT_SPECIAL = {"<think>", "</think>", "<assistant>", "<tool_call>", "</tool_call>"}
VOCAB_SIZE = 1536


def corpus_files(limit_bytes=6_000_000):
    roots = []
    try:
        roots.append(sysconfig.get_paths()["stdlib"])
    except Exception:
        pass
    roots += sorted(glob.glob("/usr/lib/python3*"))
    seen, files, total = set(), [], 0
    for root in roots:
        for p in sorted(glob.glob(os.path.join(root, "**", "*.py"), recursive=True)):
            if "site-packages" in p or "dist-packages" in p or "/test" in p:
                continue
            rp = os.path.realpath(p)
            if rp in seen:
                continue
            seen.add(rp)
            try:
                n = os.path.getsize(rp)
            except OSError:
                continue
            files.append(rp)
            total += n
            if total >= limit_bytes:
                return roots, files, total
    return roots, files, total


def train():
    from tokenizers import Tokenizer, Regex, decoders, models, pre_tokenizers, processors, trainers
    roots, files, total = corpus_files()
    log("corpus roots", roots, "files", len(files), "bytes", total)
    tok = Tokenizer(models.BPE(byte_fallback=False, ignore_merges=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(NEWLINE_RE), behavior="merged_with_next", invert=False),
        pre_tokenizers.Split(Regex(LAGUNA_RE), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, min_frequency=2, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train(files, trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="〈|EOS|〉 $A", pair="〈|EOS|〉 $A 〈|EOS|〉 $B", special_tokens=[("〈|EOS|〉", 2)])
    doc = json.loads(tok.to_str())
    for at in doc["added_tokens"]:
        if at["content"] in NOT_SPECIAL:
            at["special"] = False
    s = json.dumps(doc, ensure_ascii=False, indent=1)
    tok = Tokenizer.from_str(s)
    for i, name in enumerate(SPECIALS):
        assert tok.token_to_id(name) == i, (name, tok.token_to_id(name), i)
    path = os.path.join(OUT, "tokenizer.json")
    with open(path, "w", encoding="utf-8") as f:
        f.write(s)
    log("vocab", tok.get_vocab_size(), "merges", len(doc["model"]["merges"]), "json bytes", len(s.encode()))
    return tok, s


def encodings(tok, texts):
    out = []
    for t in texts:
        e = tok.encode(t, add_special_tokens=False)
        eb = tok.encode(t, add_special_tokens=True)
        out.append({
            "ids": e.ids,
            "ids_with_special": eb.ids,
            "tokens": e.tokens,
            "pretokens": [p for p, _ in tok.pre_tokenizer.pre_tokenize_str(t)],
            "decoded": tok.decode(e.ids, skip_special_tokens=False),
            "decoded_skip_special": tok.decode(e.ids, skip_special_tokens=True),
        })
    return out


def variant(tok_json):
    """lstrip / rstrip / single_word on three added tokens."""
    from tokenizers import Tokenizer
    doc = json.loads(tok_json)
    for at in doc["added_tokens"]:
        if at["content"] == "<tool_call>":
            at["lstrip"] = True
        if at["content"] == "</tool_call>":
            at["rstrip"] = True
        if at["content"] == "<assistant>":
            at["single_word"] = True
    vt = Tokenizer.from_str(json.dumps(doc, ensure_ascii=False))
    texts = ["a  <tool_call>x</tool_call>  b", "x<assistant>y", " <assistant> y",
             "é<assistant>", "_<assistant>", "1<assistant>", "<assistant><assistant>",
             "\n\t<tool_call>\n</tool_call>\n\n", "  <tool_call>  <tool_call>  ",
             "word <assistant>", "<assistant>word", "\u00a0<tool_call>\u3000"]
    return {"lstrip": ["<tool_call>"], "rstrip": ["</tool_call>"], "single_word": ["<assistant>"],
            "texts": texts, "ids": [vt.encode(t, add_special_tokens=False).ids for t in texts]}


def hf_dir(tok_json, template):
    d = tempfile.mkdtemp()
    with open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8") as f:
        f.write(tok_json)
    cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "〈|EOS|〉",
           "eos_token": "〈|EOS|〉", "pad_token": "〈|PAD|〉", "unk_token": "〈|UNK|〉",
           "clean_up_tokenization_spaces": False, "chat_template": template}
    with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, ensure_ascii=False)
    return d


def main():
    import tokenizers
    meta = {"tokenizers": tokenizers.__version__, "newline_regex": NEWLINE_RE, "laguna_regex": LAGUNA_RE,
            "vocab_size": VOCAB_SIZE}
    log("tokenizers", tokenizers.__version__, "python", sys.version.split()[0])
    tok, tok_json = train()
    texts = json.load(open(os.path.join(HERE, "texts.json"), encoding="utf-8"))
    ref = {"meta": meta, "texts": texts}
    try:
        ref["encodings"] = encodings(tok, texts)
    except Exception:
        log(traceback.format_exc())
    try:
        ref["variant"] = variant(tok_json)
    except Exception:
        log(traceback.format_exc())

    lag_tpl = open(os.path.join(HERE, "laguna_chat_template.jinja"), encoding="utf-8").read()
    chatml_tpl = open(os.path.join(HERE, "chatml_blocks_template.jinja"), encoding="utf-8").read()
    chat = {"templates": {"laguna_chat_template.jinja": [], "chatml_blocks_template.jinja": []}}
    try:
        import transformers
        from transformers import AutoTokenizer
        meta["transformers"] = transformers.__version__
        log("transformers", transformers.__version__)
        at = AutoTokenizer.from_pretrained(hf_dir(tok_json, lag_tpl))
        log("AutoTokenizer class", type(at).__name__)
        meta["auto_tokenizer_class"] = type(at).__name__
        diffs = []
        for i, t in enumerate(texts):
            a = at(t, add_special_tokens=False)["input_ids"]
            b = at(t, add_special_tokens=True)["input_ids"]
            e = ref["encodings"][i]
            if a != e["ids"] or b != e["ids_with_special"]:
                diffs.append({"index": i, "ids": a, "ids_with_special": b})
            dec = at.decode(e["ids"], skip_special_tokens=False)
            if dec != e["decoded"]:
                diffs.append({"index": i, "decode": dec})
        ref["transformers_diffs"] = diffs
        log("transformers vs tokenizers diffs:", len(diffs))
        cases = json.load(open(os.path.join(HERE, "chat_cases.json"), encoding="utf-8"))
        for name, tpl in [("laguna_chat_template.jinja", lag_tpl), ("chatml_blocks_template.jinja", chatml_tpl)]:
            for c in cases:
                try:
                    r = at.apply_chat_template(c["messages"], tools=c.get("tools"), chat_template=tpl,
                                               add_generation_prompt=c["add_generation_prompt"],
                                               tokenize=False, **c.get("kwargs", {}))
                    if not isinstance(r, str):
                        log("apply_chat_template returned", type(r))
                        r = r[0] if isinstance(r, list) else str(r)
                    chat["templates"][name].append({"name": c["name"], "text": r,
                                                    "ids": tok.encode(r, add_special_tokens=False).ids})
                except Exception:
                    log("case", name, c["name"], traceback.format_exc())
                    chat["templates"][name].append({"name": c["name"], "error": traceback.format_exc()})
    except Exception:
        log(traceback.format_exc())
    chat["meta"] = meta
    with open(os.path.join(OUT, "reference.json"), "w", encoding="utf-8") as f:
        json.dump(ref, f, ensure_ascii=False, indent=1)
    with open(os.path.join(OUT, "chat_reference.json"), "w", encoding="utf-8") as f:
        json.dump(chat, f, ensure_ascii=False, indent=1)
    log("done")


if __name__ == "__main__":
    try:
        main()
    except Exception:
        log(traceback.format_exc())
        sys.exit(1)
