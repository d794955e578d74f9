"""gguf-py's reference dequantisation, recorded for lagc's tests.

    reference.py files FILE.gguf...   per tensor: sha256 of gguf.quants.dequantize's
                                      float32 output, and the tensor's type
    reference.py blocks DIR           random blocks of every type lagc reads, and the
                                      sha256 of each block's dequantised float32 values
    reference.py types FILE.gguf...   the type of every tensor

Output is JSON on stdout (blocks also writes DIR/TYPE.bin). Run through
../shared/tools/llamacpp gguf-py (make.sh does).
"""
import hashlib
import json
import sys

import numpy as np
from gguf import GGUFReader, GGMLQuantizationType as Q
from gguf.constants import GGML_QUANT_SIZES
from gguf.quants import dequantize


def sha(a):
    return hashlib.sha256(np.ascontiguousarray(a, dtype="<f4").tobytes()).hexdigest()


def files(paths):
    out = {}
    for path in paths:
        r = GGUFReader(path)
        out[path.split("/")[-1]] = {
            t.name: {"type": t.tensor_type.name.lower(), "sha256": sha(dequantize(t.data, t.tensor_type))}
            for t in r.tensors
        }
    return out


# Byte offsets of the f16 fields of each block: random bytes there are made
# finite, so no NaN reaches the comparison (NaN payloads are not portable).
F16_FIELDS = {
    Q.F16: [0], Q.Q4_0: [0], Q.Q4_1: [0, 2], Q.Q5_0: [0], Q.Q5_1: [0, 2], Q.Q8_0: [0],
    Q.Q2_K: [80, 82], Q.Q3_K: [108], Q.Q4_K: [0, 2], Q.Q5_K: [0, 2], Q.Q6_K: [208],
    Q.IQ4_NL: [0], Q.IQ4_XS: [0], Q.BF16: [], Q.F32: [],
}
NBLOCKS = 48


def blocks(out_dir):
    rng = np.random.default_rng(20261201)
    out = {}
    for qt, fields in F16_FIELDS.items():
        elems, size = GGML_QUANT_SIZES[qt]
        if elems == 1:  # plain types: blocks of 256 values
            elems, size = 256, 256 * size
            fields = list(range(0, size, 2)) if qt == Q.F16 else []
        raw = rng.integers(0, 256, size=(NBLOCKS, size), dtype=np.uint8)
        for off in fields:
            hi = raw[:, off + 1]
            raw[:, off + 1] = np.where(hi & 0x7C == 0x7C, hi & 0xBF, hi)
        name = qt.name.lower()
        raw.tofile(f"{out_dir}/{name}.bin")
        vals = dequantize(raw.reshape(-1), qt) if elems > 1 else dequantize(raw.reshape(-1).view(np.uint8), qt)
        vals = np.asarray(vals, dtype=np.float32).reshape(NBLOCKS, elems)
        out[name] = [sha(v) for v in vals]
    return out


def types(paths):
    return {p.split("/")[-1]: {t.name: t.tensor_type.name.lower() for t in GGUFReader(p).tensors} for p in paths}


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    res = {"files": files, "blocks": lambda a: blocks(a[0]), "types": types}[cmd](args)
    json.dump(res, sys.stdout, indent=1, sort_keys=True)
    print()
