#!/usr/bin/env python3
"""Writes the hostile checkpoint files of this directory (see README.md)."""
import struct

def gguf(tensors, data_len, align=32):
    """tensors: [(name, dims, ggml_type, offset)]; data_len bytes of data."""
    h = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), 0)
    for name, dims, typ, off in tensors:
        n = name.encode()
        h += struct.pack("<Q", len(n)) + n + struct.pack("<I", len(dims))
        h += b"".join(struct.pack("<Q", d) for d in dims)
        h += struct.pack("<IQ", typ, off)
    h += b"\0" * (-len(h) % align)
    return h + b"\1" * data_len

F32 = 0
# Two tensors of 16 floats; the second starts inside the first.
open("overlapping.gguf", "wb").write(gguf([("a.weight", [16], F32, 0), ("b.weight", [16], F32, 32)], 96))
# An offset near 2**64: the end of its byte range wraps around.
open("offset_near_2_64.gguf", "wb").write(gguf([("a.weight", [16], F32, 2**64 - 32)], 64))

def safetensors(header, data):
    return struct.pack("<Q", len(header)) + header + data

# A valid header object followed by garbage inside the declared header.
hdr = b'{"a.weight":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}} trailing garbage'
open("trailing_garbage.safetensors", "wb").write(safetensors(hdr, b"\0" * 16))
# Two tensors sharing bytes.
hdr = b'{"a.weight":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"b.weight":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}}'
open("overlapping.safetensors", "wb").write(safetensors(hdr, b"\0" * 24))
