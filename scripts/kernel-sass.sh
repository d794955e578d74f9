#!/usr/bin/env bash
# kernel-sass.sh: where one decode kernel's warps wait, instruction by
# instruction, on the GPU machine (ncu there): Nsight Compute's source page
# of one launch of the kernels matching REGEX in a 2-layer decode step of
# the captured graph, printed as the SASS instructions with the most warp
# stall samples, then the kernel's landmarks (barriers, atomics, fences,
# global loads and stores, exits) with the samples summed up to each, so
# that a phase's share is the difference of two lines.
#
#   scripts/kernel-sass.sh REGEX SKIP LAGC [lagc bench flags...]
#   scripts/kernel-sass.sh attn_decode 3 .gpu/lagc --preset laguna-s-2.1 --synthetic --quant q4_k_m
#   scripts/kernel-sass.sh --parse FILE.csv      # an earlier source-page CSV, no GPU needed
#
# SKIP matching launches are passed over first (the eager step's come
# first; with 2 layers a per-layer kernel's third launch is the graph's
# MoE layer). Runs `LAGC bench FLAGS --layers 2 --runs 1 --decode-tokens 3
# --prefill 64` under `ncu --set full` (caches and clocks as they run).
# Samples are summed over warps: a phase run by a few blocks (a split
# merge, a tail) shows fewer samples than its share of the time.
# The report and CSV are kept in $OUT (or .gpu/) as kernel-sass.*.
set -euo pipefail

parse() {
	python3 - "$1" <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
hi = next((i for i, r in enumerate(rows) if 'Source' in r), None)
if hi is None:
    sys.exit("kernel-sass: no source page in " + sys.argv[1])
h = rows[hi]
src = h.index('Source')
sc = next(i for i, c in enumerate(h) if c.startswith('Warp Stall Sampling (All'))
ex = next((i for i, c in enumerate(h) if c == 'Instructions Executed'), None)
body = [r for r in rows[hi + 1:] if len(r) == len(h)]
def num(x):
    try:
        return float(x.replace(',', ''))
    except ValueError:
        return 0.0
tot = sum(num(r[sc]) for r in body) or 1.0
print(f"{len(body)} instructions, {tot:.0f} stall samples\n\nmost stalled:")
for i, r in sorted(enumerate(body), key=lambda p: -num(p[1][sc]))[:30]:
    print(f"{i:6d} {num(r[sc]):7.0f} {100 * num(r[sc]) / tot:5.1f}%  {r[src].strip()[:100]}")
print("\nlandmarks (index, times executed, samples up to and including it):")
keys = ('BAR', 'ATOM', 'RED.', 'MEMBAR', 'LDG', 'STG', 'LDGSTS', 'UBLKCP', 'UTMALDG', 'SYNCS', 'EXIT', 'ACQBULK')
cum = 0.0
for i, r in enumerate(body):
    cum += num(r[sc])
    if ex is not None and num(r[ex]) > 0 and any(k in r[src] for k in keys):
        print(f"{i:6d} {num(r[ex]):9.0f} {cum:8.0f} {100 * cum / tot:5.1f}%  {r[src].strip()[:90]}")
PY
}

if [ "${1:-}" = --parse ]; then
	[ $# -eq 2 ] || { echo "usage: $0 --parse FILE.csv" >&2; exit 2; }
	parse "$2"
	exit
fi
[ $# -ge 3 ] || { sed -n 2,21p "$0" >&2; exit 2; }
regex=$1 skip=$2 lagc=$3
shift 3
ncu=${NCU:-/usr/local/cuda/bin/ncu}
out=${OUT:-.gpu}
mkdir -p "$out"
"$ncu" --graph-profiling node --kernel-name-base demangled -k "regex:$regex" --launch-skip "$skip" --launch-count 1 \
	--cache-control none --clock-control none --set full --import-source no -o "$out/kernel-sass" -f \
	"$lagc" bench "$@" --layers 2 --runs 1 --decode-tokens 3 --prefill 64 >"$out/kernel-sass.log" 2>&1 ||
	{ tail -20 "$out/kernel-sass.log" >&2; exit 1; }
"$ncu" -i "$out/kernel-sass.ncu-rep" --print-details all 2>&1 |
	grep -E 'Duration|Registers Per|Achieved Occupancy|Warp Cycles Per Issued|Stall [A-Z]' | grep -vE ' 0(\.0+)?$' | sort -u
"$ncu" -i "$out/kernel-sass.ncu-rep" --page source --csv --print-source sass >"$out/kernel-sass.csv"
parse "$out/kernel-sass.csv"
