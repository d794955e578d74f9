#!/usr/bin/env bash
# kernel-profile.sh: why a decode kernel takes its time, on the GPU machine
# (ncu there): for the kernels matching REGEX in a 2-layer decode step of
# the captured graph, Nsight Compute's duration, the spread of SM activity
# (a tail: max far above the average), DRAM throughput, occupancy and the
# warps' stall reasons, one block of lines per kernel.
#
#   scripts/kernel-profile.sh REGEX LAGC [lagc bench flags...]
#   scripts/kernel-profile.sh 'moe_gateup|moe_down' .gpu/lagc --preset laguna-s-2.1 --synthetic --quant q4_k_m
#
# Runs `LAGC bench FLAGS --layers 2 --runs 1 --decode-tokens 3 --prefill 64`
# with graph nodes profiled one by one, caches and clocks as they run
# (--cache-control none --clock-control none), skipping the first two
# matches (the eager step). The report is kept in $OUT (or .gpu/) as
# kernel-profile.ncu-rep for `ncu -i` (e.g. --page source).
#
# KP_PREFILL=T profiles prefill kernels instead: `--prefill T`, eager
# launches (no graph), the first KP_COUNT (default 8) matches after
# KP_SKIP (default 0), with the DRAM bytes each read; the bench's warm-up
# prefills come first, so a layer's launches repeat in the list. E.g. the
# bf16 grouped GEMMs at 2048 tokens (docs/PERF.md, "from 09:00"):
#   KP_PREFILL=2048 scripts/kernel-profile.sh gemm_wgmma .gpu/lagc --preset laguna-s-2.1 --synthetic
set -euo pipefail
[ $# -ge 2 ] || { sed -n 2,21p "$0" >&2; exit 2; }
regex=$1 lagc=$2
shift 2
ncu=${NCU:-/usr/local/cuda/bin/ncu}
out=${OUT:-.gpu}
mkdir -p "$out"
if [ -n "${KP_PREFILL:-}" ]; then
	mode=(--launch-skip "${KP_SKIP:-0}" --launch-count "${KP_COUNT:-8}") prefill=$KP_PREFILL
else
	mode=(--graph-profiling node --launch-skip 2 --launch-count 4) prefill=64
fi
"$ncu" "${mode[@]}" -k "regex:$regex" \
	--cache-control none --clock-control none \
	--section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats \
	--metrics sm__cycles_active.avg,sm__cycles_active.max,sm__cycles_active.min,dram__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum,sm__warps_active.avg.pct_of_peak_sustained_active \
	--print-details all -o "$out/kernel-profile" -f \
	"$lagc" bench "$@" --layers 2 --runs 1 --decode-tokens 3 --prefill "$prefill" >"$out/kernel-profile.log" 2>&1 ||
	{ tail -20 "$out/kernel-profile.log" >&2; exit 1; }
"$ncu" -i "$out/kernel-profile.ncu-rep" --print-details all 2>&1 |
	grep -E '^  [a-zA-Z_].*\(|Duration|Elapsed Cycles|sm__cycles_active|dram__throughput|dram__bytes_read|Registers Per|Achieved Occupancy|Theoretical Occupancy|Waves Per SM|Warp Cycles Per Issued|Stall [A-Z]' |
	grep -vE ' 0(\.0+)?$' | sed -E 's/\(int, .*\) \(/(/'
