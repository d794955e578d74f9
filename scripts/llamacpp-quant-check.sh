#!/usr/bin/env bash
# llamacpp-quant-check.sh: do lagc's quantised GGUF files of the bundled model run in
# llama.cpp, and give the same greedy text there as llama-quantize's files and as lagc?
#
#   scripts/llamacpp-quant-check.sh [path/to/llamacpp] [RECIPE...]   (default: q8_0 q4_k_m)
#
# Needs Go and ../shared/tools/llamacpp (llama-quantize, llama-completion). For each recipe
# it writes models/tiny with `lagc convert --quant RECIPE` and with llama-quantize (--pure,
# and ggml-org's --tensor-type overrides for q4_k_m and q5_k_m), then generates 64 greedy
# tokens after "func main() {" with llama-completion on both, with `lagc run --device cpu`
# on lagc's file, and with both engines on the f32 conversion. Texts are compared without
# the whitespace at their ends (llama-completion's trailing newlines vary). It prints one
# line per run and exits 1 if any text differs from lagc's f32 run; a run that fails
# (lagc's CPU executor without quantised weights, say) is reported, not counted as a match.
set -uo pipefail
cd "$(dirname "$0")/.."
L=${1:-../shared/tools/llamacpp}
[ $# -gt 0 ] && shift
recipes=("$@")
[ ${#recipes[@]} -eq 0 ] && recipes=(q8_0 q4_k_m)
[ -x "$L" ] || { echo "no llamacpp tool at $L; pass its path" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prompt="func main() {"
CGO_ENABLED=0 go build -o "$tmp/lagc" ./cmd/lagc || exit 2
"$tmp/lagc" convert --model models/tiny -o "$tmp/f32.gguf" --dtype f32 2>/dev/null || exit 2

llama() { # file -> text
	"$L" llama-completion -m "$1" -p "$prompt" -n 64 -no-cnv --temp 0 -s 1 -t 2 \
		--no-display-prompt --simple-io </dev/null 2>/dev/null
}
lagc() { # file -> text
	"$tmp/lagc" run --model "$1" --prompt "$prompt" -n 64 --device cpu --json 2>"$tmp/err" |
		sed -n 's/.*"text":\("[^"\\]*\(\\.[^"\\]*\)*"\).*/\1/p' | python3 -c 'import json,sys; sys.stdout.write(json.loads(sys.stdin.read() or "null") or "")'
}
trim() { python3 -c 'import sys; sys.stdout.write(sys.stdin.read().strip())'; }

ref=$(lagc "$tmp/f32.gguf" | trim)
[ -n "$ref" ] || { echo "lagc run on the f32 file failed: $(cat "$tmp/err")"; exit 2; }
fail=0
check() { # label text
	if [ -z "$2" ]; then
		echo "FAILED TO RUN  $1"
	elif [ "$2" == "$ref" ]; then
		echo "same text      $1"
	else
		echo "DIFFERENT      $1: $(printf %s "$2" | head -c 80 | tr '\n' ' ')"
		fail=1
	fi
}
check "llama.cpp, f32" "$(llama "$tmp/f32.gguf" | trim)"
for r in "${recipes[@]}"; do
	"$tmp/lagc" convert --model models/tiny -o "$tmp/lagc_$r.gguf" --quant "$r" 2>/dev/null || { echo "lagc convert --quant $r failed"; fail=1; continue; }
	base=${r%_m}
	extra=()
	[ "$base" != "$r" ] && extra=(--tensor-type output.weight=q8_0 --tensor-type _shexp=q8_0 --tensor-type attn_=q8_0)
	"$L" llama-quantize --pure "${extra[@]}" "$tmp/f32.gguf" "$tmp/ref_$r.gguf" "${base^^}" 2 >/dev/null 2>&1 || echo "llama-quantize $r failed"
	types() { "$tmp/lagc" inspect "$1" --json | python3 -c 'import json,sys; print([(t["name"], t["type"]) for t in json.load(sys.stdin)["tensors"]])'; }
	if [ "$(types "$tmp/lagc_$r.gguf")" == "$(types "$tmp/ref_$r.gguf")" ]; then
		echo "same types     lagc's and llama-quantize's $r"
	else
		echo "DIFFERENT      types of lagc's and llama-quantize's $r"
		fail=1
	fi
	check "llama.cpp, lagc's $r" "$(llama "$tmp/lagc_$r.gguf" | trim)"
	check "llama.cpp, llama-quantize's $r" "$(llama "$tmp/ref_$r.gguf" | trim)"
	t=$(lagc "$tmp/lagc_$r.gguf" | trim)
	[ -z "$t" ] && echo "               (lagc run: $(tail -1 "$tmp/err"))"
	check "lagc run, lagc's $r" "$t"
done
exit $fail
