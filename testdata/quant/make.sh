#!/usr/bin/env bash
# Regenerates testdata/quant from the repository root (see README.md here):
#   testdata/quant/make.sh [path/to/llamacpp]
# Needs Go and ../shared/tools/llamacpp (llama-quantize, gguf-py with numpy).
set -euo pipefail
cd "$(dirname "$0")/../.."
L=${1:-../shared/tools/llamacpp}
[ -x "$L" ] || { echo "make.sh: no llamacpp tool at $L; pass its path" >&2; exit 2; }
Q=testdata/quant
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# ggml-org's Q4_K_M recipe for Laguna: --pure Q4_K, attention, shared expert and LM head in Q8_0.
mixed=(--tensor-type output.weight=q8_0 --tensor-type _shexp=q8_0 --tensor-type attn_=q8_0)

# The random model: every row a multiple of 256 wide.
go test ./ckpt -run TestWriteQuantF32 -count=1 -quant-f32 "$tmp/f32.gguf" >/dev/null
for t in q4_0 q4_1 q5_0 q5_1 q2_k q3_k q5_k q6_k iq4_nl iq4_xs; do
	"$L" llama-quantize --pure "$tmp/f32.gguf" "$Q/$t.gguf" "${t^^}" 2 >"$tmp/$t.log" 2>&1 || { cat "$tmp/$t.log"; exit 1; }
done
"$L" llama-quantize --pure "${mixed[@]}" "$tmp/f32.gguf" "$Q/q4_k_m.gguf" Q4_K 2 >"$tmp/q4_k_m.log" 2>&1 || { cat "$tmp/q4_k_m.log"; exit 1; }
# llama.cpp's own Q4_K_M mixture (no --pure), as most Q4_K_M files are made: the head, and in
# some layers attn_v and the routed and shared experts' ffn_down, in Q6_K.
"$L" llama-quantize "$tmp/f32.gguf" "$Q/q4_k_m-llama.gguf" Q4_K_M 2 >"$tmp/q4_k_m-llama.log" 2>&1 || { cat "$tmp/q4_k_m-llama.log"; exit 1; }
"$L" gguf-py $Q/reference.py files $Q/*.gguf >$Q/reference.json

# Random blocks of every type.
mkdir -p $Q/blocks
"$L" gguf-py $Q/reference.py blocks $Q/blocks >$Q/blocks/reference.json

# The bundled model (rows of 64, 128, 192, 512): llama-quantize's fallbacks.
go run ./cmd/lagc convert --model models/tiny -o "$tmp/tiny.gguf" --dtype f32 2>/dev/null
for t in q8_0 q4_k q6_k q2_k iq4_xs; do
	"$L" llama-quantize --pure "$tmp/tiny.gguf" "$tmp/tiny_$t.gguf" "${t^^}" 2 >/dev/null 2>&1
done
"$L" llama-quantize --pure "${mixed[@]}" "$tmp/tiny.gguf" "$tmp/tiny_q4_k_m.gguf" Q4_K 2 >/dev/null 2>&1
"$L" gguf-py $Q/reference.py types "$tmp"/tiny_*.gguf >$Q/tiny_types.json
ls -l $Q $Q/blocks
