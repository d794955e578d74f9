#!/usr/bin/env bash
# targets.sh: the figures issues 12 and 13 set targets for, measured in one
# device call (the GPU machine: python3, no Go), one line each with its goal:
#
#   scripts/targets.sh [LAGC]          LAGC defaults to .gpu/lagc
#
# Runs `lagc bench --json` on synthetic Laguna-S-2.1 weights: q4_k_m at full
# depth (graph decode tok/s, the MoE layer's fraction of its byte roofline,
# prefill 2048 every row and last row), q4_k and iq4_xs at full depth (graph
# decode), bf16 at 24 layers scaled to 48 (prefill 2048) and q4_k_m and
# iq4_xs at 24 layers (their prefill 2048 time against bf16's), then `lagc
# kernel-bench --json` (the dense prefill GEMMs and the grouped MoE at 2048
# and 4096 tokens, bf16 and q4_k), `lagc profile` of the q4_k_m and bf16
# runs (where the time goes, in the tarball), and q4_k_m's decode at a
# context of 32768 and prefill of 32768 tokens (informational). After the
# goals: the grouped calls at 2048 by launch (alone and in the call), the
# GPU's state, the driver's memory figures, the synthetic routers' spread.
# TARGETS_RUNS (default 5) is each bench's --runs. Raw JSON goes to
# $OUT/targets.tar.gz (or .gpu/); a step that fails prints its error and
# the others still run. Takes a few minutes on the H200 (85 s with
# TARGETS_RUNS=3 before the 32768-token prefill was added).
set -uo pipefail
cd "$(dirname "$0")/.."
lagc=${1:-.gpu/lagc}
out=${OUT:-.gpu}/targets
runs=${TARGETS_RUNS:-5}
mkdir -p "$out"

step() { # name, then the lagc arguments
	local name=$1
	shift
	if ! "$lagc" "$@" >"$out/$name.json" 2>"$out/$name.err"; then
		echo "targets: $name failed: $(tail -1 "$out/$name.err")" >&2
		rm -f "$out/$name.json"
	fi
}
s21=(bench --preset laguna-s-2.1 --synthetic --json --runs "$runs" --decode-tokens 64 --prefill 2048)
step q4_k_m "${s21[@]}" --quant q4_k_m --profile "$out/q4_k_m.pprof"
step q4_k "${s21[@]}" --quant q4_k
step iq4_xs "${s21[@]}" --quant iq4_xs
step bf16 "${s21[@]}" --layers 24 --profile "$out/bf16.pprof"
# Issue 12's "quantised prefill no slower than bf16": bf16 does not fit at
# full depth, so the 4-bit recipes at bf16's 24 layers, right after it.
for q in q4_k_m iq4_xs; do
	step "$q-24" "${s21[@]}" --quant "$q" --layers 24 --decode-tokens 8
done
# Where the time goes (lagc profile: the profiled eager runs, per kernel
# summed over the layers), packed with the rest.
for name in q4_k_m bf16; do
	[ -f "$out/$name.pprof" ] && "$lagc" profile --top 30 "$out/$name.pprof" >"$out/$name-profile.txt" 2>&1
done
# The GPU's state through kernel-bench (smi.sh, as ab-bench's AB_SMI): its
# grouped MoE rows move with it at the power cap (docs/PERF.md), so the
# summary says what it was.
# shellcheck source=smi.sh
. scripts/smi.sh
smi_start "$out/kernels.smi.csv"
step kernels kernel-bench --json --runs "$runs" --gemm-t 2048 --moe-t 2048,4096 --moe-quant q4_k
smi_stop
# Decode at a long context (no goal in the issues; the full layers'
# attention over the cache is the difference: docs/PERF.md).
# The same run times a 32768-token prompt's prefill beside 2048's (the
# full layers' prefill attention over the cache grows with the position).
step q4_k_m-32768 bench --preset laguna-s-2.1 --synthetic --json --runs "$runs" --decode-tokens 32 --prefill 2048,32768 --quant q4_k_m --ctx 32768

python3 - "$out" <<'EOF'
import json, os, sys
out = sys.argv[1]
def load(name):
    p = os.path.join(out, name + ".json")
    return json.load(open(p)) if os.path.exists(p) else None
rows = []  # (issue, what, measured, goal, unit, higher is better)
def bench(name, label, quant):
    b = load(name)
    if b is None:
        rows.append(("", label, None, None, "", True)); return
    graph = [d for d in b.get("decode", []) if d["mode"] == "graph"]
    if quant and graph:
        goal = 450 if name == "q4_k_m" else 600
        rows.append(("12", f"{label}: graph decode, full depth", graph[0]["tok_per_s_full_depth"], goal, "tok/s", True))
    if quant:
        rows.append(("12", f"{label}: decode MoE layer, of its byte roofline", 100 * b.get("decode_moe_layer_roofline_fraction", 0), 65, "%", True))
    for key, what in (("prefill", "every row"), ("prefill_last_row", "last row")):
        for p in b.get(key) or []:
            if p["tokens"] == 2048 and (name in ("q4_k_m", "bf16")):
                rows.append(("13", f"{label}: prefill 2048 ({what}), full depth", p["tok_per_s_full_depth"], 20000, "tok/s", True))
bench("q4_k_m", "q4_k_m", True)
bench("q4_k", "q4_k", True)
bench("iq4_xs", "iq4_xs", True)
bench("bf16", "bf16 (24 layers, scaled)", False)
def prefill_ms(name):
    b = load(name)
    for p in (b or {}).get("prefill") or []:
        if p["tokens"] == 2048:
            return p["ms"]
    return None
for q in ("q4_k_m", "iq4_xs"):
    mq, mb = prefill_ms(q + "-24"), prefill_ms("bf16")
    rows.append(("12", f"{q}: prefill 2048 time at 24 layers, of bf16's", mq / mb if mq and mb else None, 1.0, "x", False))
k = load("kernels")
if k is None:
    rows.append(("", "kernel-bench", None, None, "", True))
else:
    for r in k["rows"]:
        kern = r["kernel"]
        if kern.startswith("gemm wgmma") and r["t"] == 2048:
            rows.append(("13", f"dense GEMM {r['case']} T={r['t']}", 100 * r["roofline_fraction"], 65, "% of FLOP/s", True))
        if kern in ("moe-grouped wgmma", "moe-grouped q4_k"):
            rows.append(("13", f"{kern} T={r['t']}", 100 * r["roofline_fraction"], 40, "% of FLOP/s", True))
met = 0
for issue, what, got, goal, unit, hi in rows:
    if got is None:
        print(f"  -   {what}: not measured (see the .err files in {out}.tar.gz)")
        continue
    ok = got >= goal if hi else got <= goal
    met += ok
    fmt = ",.3f" if unit == "x" else ",.1f"
    print(f"  {issue}  {what}: {got:{fmt}} {unit} (goal {goal:,} {unit}) {'met' if ok else 'NOT met'}")
print(f"targets: {met} of {sum(r[2] is not None for r in rows)} measured met")
lc = load("q4_k_m-32768")
lcg = [d for d in (lc or {}).get("decode", []) if d["mode"] == "graph"]
if lcg:
    print(f"  long context (no goal): q4_k_m graph decode at {lc.get('decode_context')} tokens, full depth: {lcg[0]['tok_per_s_full_depth']:,.1f} tok/s")
else:
    print(f"  -   long context (no goal): q4_k_m decode at 32768 tokens not measured (see the .err files in {out}.tar.gz)")
lp = {(key, p["tokens"]): p["tok_per_s_full_depth"] for key in ("prefill", "prefill_last_row") for p in (lc or {}).get(key) or []}
if ("prefill", 32768) in lp and ("prefill", 2048) in lp:
    print(f"  long context (no goal): q4_k_m prefill 32768 tokens, full depth: {lp[('prefill', 32768)]:,.1f} tok/s every row, "
          f"{lp.get(('prefill_last_row', 32768), 0):,.1f} last row (2048 in the same run: {lp[('prefill', 2048)]:,.1f} / "
          f"{lp.get(('prefill_last_row', 2048), 0):,.1f})")
else:
    print(f"  -   long context (no goal): q4_k_m prefill of 32768 tokens not measured (see the .err files in {out}.tar.gz)")
# The GPU's state while kernel-bench ran (smi_summary.py: the samples over
# 300 W).
sys.dont_write_bytecode = True  # no __pycache__ in the tree
sys.path.insert(0, "scripts")
from smi_summary import summary
st = summary([os.path.join(out, "kernels.smi.csv")])
if st:
    print(f"  kernel-bench's GPU state: busy SM clock median {st[0]:.0f} MHz, {st[1]:.0f}% of busy samples "
          f"under the software power cap, peak {st[2]:.0f} W (the grouped MoE rows move with it)")
# The driver's memory figures (roofline.go scales the 4.3 TB/s measured on
# the H200 by them: that H200's 3201 MHz and 6016 bits give 4.3 exactly).
if k and k.get("peak_mem_bytes_per_s"):
    print(f"  memory (driver): {k['mem_clock_khz'] // 1000} MHz, {k['mem_bus_bits']}-bit bus, peak {k['peak_mem_bytes_per_s'] / 1e12:.2f} TB/s; "
          f"roofline {k['roofline_bytes_per_s'] / 1e12:.2f} TB/s ({k['roofline_from']})")
# Each grouped call at 2048 tokens: its whole time against its launches
# alone ("stage") and their shares of the call ("in call", which add up to
# the whole; kernel-bench since 2026-12-05), the GEMMs' first.
calls = []
for r in (k or {}).get("rows", []):
    kern = r["kernel"]
    if not kern.startswith(" "):
        calls.append({"name": kern, "t": r["t"], "us": r["us"], "stage": [], "in call": []})
    elif calls and kern.strip() in ("stage", "in call"):
        calls[-1][kern.strip()].append((r["case"].split("<")[0], r["us"]))
for c in calls:
    if c["name"] not in ("moe-grouped wgmma", "moe-grouped q4_k") or c["t"] != 2048 or not c["stage"]:
        continue
    def parts(rows):
        gemm = ", ".join(f"{us:.1f}" for name, us in rows if name.startswith("gemm_"))
        return f"GEMMs {gemm}, the rest {sum(us for name, us in rows if not name.startswith('gemm_')):.1f}"
    line = f"  {c['name']} T=2048: whole {c['us']:.1f} us; alone {parts(c['stage'])} (sum {sum(us for _, us in c['stage']):.1f})"
    if c["in call"]:
        line += f"; in call {parts(c['in call'])}"
    print(line)
# How the synthetic weights' routers spread the 2048-token prefills
# (kernel-bench routes uniformly: every expert used, about 80 routes each).
for name in ("q4_k_m", "bf16"):
    rt = (load(name) or {}).get("prefill_routes")
    if rt and rt.get("layers"):
        collapsed = rt.get("collapsed", False)  # lagc bench's summary and rule (routesReport)
        print(f"  routing ({name}, prefill {rt['tokens']}): {rt['used_min']}-{rt['used_max']} of {rt['experts']} experts used a layer "
              f"(median {rt['used_median']}), busiest expert median {rt['busiest_median']} routes "
              f"(even: {rt['tokens'] * rt['top_k'] / rt['experts']:.0f})"
              + (f", grouped-GEMM row tiles median {rt['tiles_128_median']} of 128 rows / {rt['tiles_96_median']} of 96"
                 if "tiles_128_median" in rt else "")
              + (f" / {rt['tiles_112_median']} of 112" if "tiles_112_median" in rt else "")
              + (": COLLAPSED, the prefill rows above are not a trained model's" if collapsed else ""))
EOF
# One file back from a device call (a call returns at most 8): the raw
# JSON and errors packed beside the directory.
tar -czf "$out.tar.gz" -C "$(dirname "$out")" "$(basename "$out")" && rm -rf "$out"
