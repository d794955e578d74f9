#!/usr/bin/env bash
# ab-bench.sh: lagc bench under several environments, interleaved, on the GPU
# machine (python3, no Go): medians per configuration and their ratio to the
# first, so an A/B of a switch (LAGC_PDL=0, LAGC_QMOE=serial, ...) is one call.
#
#   scripts/ab-bench.sh ROUNDS LAGC 'ENV A' 'ENV B' ... -- [lagc bench flags]
#   scripts/ab-bench.sh 3 .gpu/lagc '' 'LAGC_PDL=0' 'LAGC_QMOE=serial' -- \
#       --preset laguna-s-2.1 --synthetic --quant q4_k_m --layers 2 --runs 3 --decode-tokens 32 --prefill 2048
#
# Each round runs every configuration once (in order, so drift hits all
# alike); '' is the environment as it is. Prints, per configuration, the
# median over rounds of graph and eager decode (ms/token and tok/s at full
# depth), the MoE layer's graph decode time, each prefill length's ms (and
# the last-row-only prefill's, where the build has it: nan where not),
# then each one's ratio of time to the first configuration's (with --batch:
# each batch size's ms a step instead of the decode rows). Raw JSON lines
# go to $OUT (or .gpu/) as ab-bench.jsonl. A configuration may name its own
# binary first, '@PATH [ENV...]' (two builds: main's and a branch's):
#   scripts/ab-bench.sh 3 .gpu/lagc '' '@.gpu/lagc-main' -- --preset ...
# and words of a configuration that start with -- are bench flags of its
# own, in --flag=value form (a pass off, a plan's other choice):
#   scripts/ab-bench.sh 3 .gpu/lagc '' '--disable-pass=shared-expert-merge' -- --preset ...
# AB_SMI=1 also samples nvidia-smi every 20 ms through each run (SM clock,
# power, throttle reasons; $OUT/smi.CONFIG.ROUND.csv) and adds columns per
# configuration: the median SM clock and the share of samples under the
# software power cap while the GPU draws over 300 W (the H200 in prefill
# runs at its 700 W cap, where clocks fall: docs/PERF.md), and the peak
# power. A configuration that is faster only through its history of heat
# shows there.
set -euo pipefail
[ $# -ge 4 ] || { sed -n 2,17p "$0" >&2; exit 2; }
rounds=$1 lagc=$2
shift 2
envs=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do
	envs+=("$1")
	shift
done
[ "${1:-}" = -- ] && shift
out=${OUT:-.gpu}
mkdir -p "$out"
here=$(dirname "$0")
# shellcheck source=smi.sh
. "$here/smi.sh"
log=$out/ab-bench.jsonl
: >"$log"
for r in $(seq "$rounds"); do
	for i in "${!envs[@]}"; do
		bin=$lagc env_=${envs[$i]}
		if [ "${env_#@}" != "$env_" ]; then # '@PATH [ENV...]': its own binary
			read -r bin env_ <<<"${env_#@}" || true
		fi
		vars=() flags=()
		for w in $env_; do
			case $w in
			--*) flags+=("$w") ;;
			*) vars+=("$w") ;;
			esac
		done
		[ "${AB_SMI:-0}" = 1 ] && smi_start "$out/smi.$i.$r.csv"
		line=$(env "${vars[@]}" "$bin" bench "$@" "${flags[@]}" --json) || { echo "ab-bench: config '${envs[$i]}' failed" >&2; exit 1; }
		smi_stop
		printf '%s\t%s\n' "$i" "$(echo "$line" | tr -d '\n')" >>"$log"
	done
done
python3 - "$here" "$log" "${AB_SMI:-0}" "${envs[@]}" <<'PY'
import glob, json, os, statistics, sys
sys.dont_write_bytecode = True  # no __pycache__ in the tree
sys.path.insert(0, sys.argv[1])
from smi_summary import summary
log, smi, envs = sys.argv[2], sys.argv[3] == '1', sys.argv[4:]
runs = {i: [] for i in range(len(envs))}
for l in open(log):
    i, js = l.split('\t', 1)
    runs[int(i)].append(json.loads(js))
def med(vals):
    return statistics.median(vals) if vals else float('nan')
def decode(run):  # the GPU bench's rows; the CPU bench's one row as mode "cpu"
    d = run.get('decode', [])
    if isinstance(d, dict):
        return [{'mode': 'cpu', 'ms_per_token': d['ms'], 'tok_per_s_full_depth': d['tok_per_s']}]
    return d
modes = sorted({x['mode'] for rs in runs.values() for run in rs for x in decode(run)}, reverse=True)
rows = []
for i, rs in runs.items():
    r = {}
    for mode in modes:
        d = [x for run in rs for x in decode(run) if x['mode'] == mode]
        r[mode + ' ms'] = med([x['ms_per_token'] for x in d])
        r[mode + ' tok/s 48'] = med([x['tok_per_s_full_depth'] for x in d])
    # lagc bench --batch: each batch size's ms a step (its graph-replayed
    # batched decode step).
    for b in sorted({x['batch'] for run in rs for x in run.get('batches', [])}):
        r[f'batch {b} ms'] = med([x['ms_per_step'] for run in rs for x in run.get('batches', []) if x['batch'] == b])
    if any('decode_moe_layer_us_graph' in run for run in rs):
        r['MoE layer us'] = med([run['decode_moe_layer_us_graph'] for run in rs if 'decode_moe_layer_us_graph' in run])
    for p in sorted({x['tokens'] for run in rs for x in run.get('prefill', [])}):
        r[f'prefill {p} ms'] = med([x['ms'] for run in rs for x in run.get('prefill', []) if x['tokens'] == p])
    # The prefill that computes only the last row after the last attention
    # (as lagc run), where the build has it.
    for p in sorted({x['tokens'] for run in rs for x in run.get('prefill_last_row', [])}):
        r[f'last-row {p} ms'] = med([x['ms'] for run in rs for x in run.get('prefill_last_row', []) if x['tokens'] == p])
    if smi:  # busy samples (over 300 W): smi_summary.py
        st = summary(glob.glob(os.path.join(os.path.dirname(log), f'smi.{i}.*.csv'))) or (float('nan'),) * 3
        r['busy SM MHz'], r['busy % capped'], r['peak W'] = st
    rows.append(r)
keys = list(dict.fromkeys(k for r in rows for k in r))
for r in rows:
    for k in keys:
        r.setdefault(k, float('nan'))
name = lambda i: envs[i] or '(as is)'
w = max(len(name(i)) for i in range(len(envs)))
print(f"{'':<{w}}  " + '  '.join(f'{k:>16}' for k in keys))
for i, r in enumerate(rows):
    print(f'{name(i):<{w}}  ' + '  '.join(f'{r[k]:16.3f}' for k in keys))
for i, r in enumerate(rows[1:], 1):
    ratios = [r[k] / rows[0][k] if rows[0][k] else float('nan') for k in keys]
    print(f'{name(i) + " / first":<{w}}  ' + '  '.join(f'{x:16.3f}' for x in ratios))
PY
