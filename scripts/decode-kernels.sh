#!/usr/bin/env bash
# decode-kernels.sh: one decode step of the captured graph, kernel by kernel,
# on the GPU machine (it has ncu and python3, no Go): where a layer's time goes.
#
#   scripts/decode-kernels.sh LAGC [lagc bench flags...]
#   scripts/decode-kernels.sh .gpu/lagc --preset laguna-s-2.1 --synthetic --quant q4_k_m
#   scripts/decode-kernels.sh --parse FILE.csv      # an earlier ncu CSV, no GPU needed
#
# Runs `LAGC bench FLAGS --layers 2 --runs 1 --decode-tokens 3 --prefill 64`
# under Nsight Compute (graph nodes profiled one by one, caches and clocks
# left as they run: --cache-control none --clock-control none), keeps
# gpu__time_duration of every kernel, and prints the last whole decode step
# (embedding .. step_next): each kernel's microseconds, and the step's sum,
# which graph replay matches within a few percent (docs/PERF.md). Timings
# under ncu are of kernels run one at a time; programmatic launches overlap
# neighbours in a real replay, so the sum is an upper bound then.
# The CSV is kept in $OUT (or .gpu/) as decode-kernels.csv.
set -euo pipefail

parse() {
	python3 - "$1" <<'PY'
import csv, io, sys
lines = [l for l in open(sys.argv[1]) if l.startswith('"')]
rows = list(csv.reader(io.StringIO(''.join(lines))))
if not rows:
    sys.exit("decode-kernels: no kernel rows in " + sys.argv[1])
h = rows[0]
ki, vi, gi, bi = h.index('Kernel Name'), h.index('Metric Value'), h.index('Grid Size'), h.index('Block Size')
seq = []
for r in rows[1:]:
    name = r[ki].split('(')[0].replace('void ', '').strip()
    seq.append((name, float(r[vi].replace(',', '')) / 1000, r[gi], r[bi]))
# the last run embedding .. step_next of the decode schedule (one token: grid x of 1 token's rows)
end = max((i for i, s in enumerate(seq) if s[0].startswith('step_next')), default=-1)
if end < 0:
    sys.exit("decode-kernels: no step_next kernel: not a decode run?")
start = max(i for i in range(end + 1) if seq[i][0].startswith('embedding'))
step = seq[start:end + 1]
w = max(len(s[0]) for s in step)
for name, us, grid, block in step:
    print(f"{name:<{w}}  {us:7.2f} us  grid {grid} block {block}")
print(f"{'sum of ' + str(len(step)) + ' kernels':<{w}}  {sum(s[1] for s in step):7.2f} us")
PY
}

if [ "${1:-}" = --parse ]; then
	parse "$2"
	exit 0
fi
[ $# -ge 1 ] || { sed -n 2,8p "$0" >&2; exit 2; }
lagc=$1
shift
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
[ -x "$ncu" ] || { echo "decode-kernels: no ncu (Nsight Compute) found" >&2; exit 1; }
out=${OUT:-.gpu}
mkdir -p "$out"
"$ncu" --graph-profiling node --metrics gpu__time_duration.sum --cache-control none --clock-control none \
	--csv --print-units base "$lagc" bench "$@" --layers 2 --runs 1 --decode-tokens 3 --prefill 64 \
	>"$out/decode-kernels.csv" 2>"$out/decode-kernels.err" || { tail -5 "$out/decode-kernels.err" >&2; exit 1; }
parse "$out/decode-kernels.csv"
