#!/usr/bin/env bash
# prepared-ab.sh: the A/B runs of the paths prepared without a GPU (on
# 2026-12-05, and sharedDownGateUp on 2026-12-06, measured on an H100 only)
# and made default after runs measured them (docs/PERF.md), each against
# its switch turning it off, one after the other in one device call:
#
#   OUT=$OUT scripts/prepared-ab.sh [ROUNDS] [LAGC]     (defaults 3, .gpu/lagc)
#
# each through scripts/ab-bench.sh at 12 layers of Laguna-S-2.1 with
# synthetic weights, its output under $OUT/NAME/ and its table on stdout:
#   q6k      prefill, q4_k with q6_k expert downs (llama.cpp's Q4_K_M): LAGC_QMOE_SHAPE=noq6k
#   q5k      prefill, q5_k with q6_k downs (Q5_K_M): LAGC_QMOE_SHAPE=noq6k,noq5k
#   topk     decode, pure q4_k (its shared expert among the routed): LAGC_DISABLE_FUSIONS=fuseTopKShared
#   pair     decode, q4_k with q6_k attn_v (v's GEMV apart): LAGC_DISABLE_FUSIONS=fuseQGEMVPair
#   shared   decode, q4_k_m (the shared down in the gate+up's launch): LAGC_DISABLE_FUSIONS=sharedDownGateUp
#   jointrig decode, q4_k_m (the join letting the next GEMV start early):
#            LAGC_NVRTC_OPTIONS=^qgemv_join_norm$:-DLAGC_JOIN_NO_TRIGGER
# (the second row of each table is the path off; its ratio to the first
# is off / on)
# PREPARED_AB=q6k,topk runs only those.
set -euo pipefail
rounds=${1:-3} lagc=${2:-.gpu/lagc}
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-.gpu}
only=${PREPARED_AB:-q6k,q5k,topk,pair,shared,jointrig}
common=(--preset laguna-s-2.1 --synthetic --layers 12 --runs 3)
run() { # NAME ENV -- bench flags
	local name=$1 env_=$2
	shift 3
	case ",$only," in *",$name,"*) ;; *) return 0 ;; esac
	echo "== $name: the default against '$env_'"
	OUT=$out/$name "$here/ab-bench.sh" "$rounds" "$lagc" '' "$env_" -- "${common[@]}" "$@" || echo "prepared-ab: $name failed"
}
run q6k 'LAGC_QMOE_SHAPE=noq6k' -- --quant q4_k --tensor-type 'ffn_down_exps=q6_k' --decode-tokens 8 --prefill 2048
run q5k 'LAGC_QMOE_SHAPE=noq6k,noq5k' -- --quant q5_k --tensor-type 'ffn_down_exps=q6_k' --decode-tokens 8 --prefill 2048
run topk 'LAGC_DISABLE_FUSIONS=fuseTopKShared' -- --quant q4_k --decode-tokens 32 --prefill 64
run pair 'LAGC_DISABLE_FUSIONS=fuseQGEMVPair' -- --quant q4_k --tensor-type 'attn_v=q6_k' --decode-tokens 32 --prefill 64
run shared 'LAGC_DISABLE_FUSIONS=sharedDownGateUp' -- --quant q4_k_m --decode-tokens 32 --prefill 64
run jointrig 'LAGC_NVRTC_OPTIONS=^qgemv_join_norm$:-DLAGC_JOIN_NO_TRIGGER' -- --quant q4_k_m --decode-tokens 32 --prefill 64
