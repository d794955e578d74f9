#!/usr/bin/env bash
# gpu-suite.sh: run every GPU test binary and print ONE summary line,
#   GPU suite: N passed, M failed, K skipped
#
# The GPU machine has no Go toolchain, so this works in two steps:
#   scripts/gpu-suite.sh build [PKG...]   here: compile test binaries into .gpu/
#                                         (default: the packages with GPU tests)
#                                         and, without PKG, .gpu/lagc too (for
#                                         benches and scripts/targets.sh), each
#                                         compressed: a device call carries at most
#                                         64 MiB (xz where it is installed, about
#                                         60 MiB with lagc; else gzip, which
#                                         leaves lagc out to fit)
#   scripts/gpu-suite.sh unpack           there: decompress .gpu/ (xz, or python3's
#                                         lzma where xz is missing; gunzip)
#   scripts/gpu-suite.sh run              there: unpack, then run .gpu/*.test, each
#                                         from its package directory, with
#                                         LAGC_REQUIRE_GPU=1
# Binaries are named after their package: .gpu/exec__gpu.test runs in exec/gpu.
# Counted: every test and subtest result line (--- PASS/FAIL/SKIP); a binary
# (or shard) that dies without reporting (a crash, a timeout) counts as one
# failure. Logs go to $OUT (when set) or .gpu/logs; 00-failures.log there
# holds every failed top-level test's output (from its === RUN line to its
# --- FAIL) and a dead shard's last lines, whichever shard ran it: a device
# call brings back only a few files (by name, so it sorts first), and
# 01-times.txt every top-level test's seconds, longest first. Extra arguments after `run` are passed to
# every binary (e.g. -test.run GPU).
# The binaries run side by side, each in its own process (CUDA context), and
# the largest (exec/gpu, about 330 s alone: NVRTC compiles, CPU-bound, take
# much of it) in GPU_SUITE_SHARDS (default 10) processes, each taking
# every tenth of its tests; without extra arguments only (on the 16-core
# H200 machine, 2026-12-04: with 8, shard 0 passed 320 s, its tests' share
# uneven; with 10, the whole suite in 272 s). GPU_SUITE_SHARDS=1 runs
# each binary whole; GPU_SUITE_TIMEOUT (540 s) bounds each process.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
mode=${1:-run}
[ $# -gt 0 ] && shift

case "$mode" in
build)
	export CGO_ENABLED=0
	mkdir -p .gpu
	pkgs=("$@")
	whole=0
	[ ${#pkgs[@]} -eq 0 ] && pkgs=(./cuda/... ./exec/gpu ./engine ./cmd/lagc) whole=1
	pack() { # compress one file in place: xz where installed, else gzip
		if command -v xz >/dev/null; then
			xz -f -T2 -6 "$1"
		else
			gzip -f "$1"
		fi
	}
	mod=$(go list -m)
	n=0
	for pkg in $(go list -f '{{if or .TestGoFiles .XTestGoFiles}}{{.ImportPath}}{{end}}' "${pkgs[@]}"); do
		rel=${pkg#"$mod"}
		rel=${rel#/}
		name=${rel:-root}
		name=${name//\//__}
		go test -c -ldflags='-s -w' -o ".gpu/$name.test" "$pkg" || exit 1
		pack ".gpu/$name.test" || exit 1
		n=$((n + 1))
	done
	what="$n test binaries"
	if [ "$whole" = 1 ] && command -v xz >/dev/null; then
		go build -ldflags='-s -w' -o .gpu/lagc ./cmd/lagc || exit 1
		pack .gpu/lagc || exit 1
		what+=" and lagc"
	fi
	echo "built $what in .gpu/ ($(du -sh .gpu | cut -f1) with what was there; carry .gpu)"
	;;
unpack)
	shopt -s nullglob
	for z in .gpu/*.gz; do gunzip -f "$z" || exit 1; done
	for z in .gpu/*.xz; do
		if command -v xz >/dev/null; then
			xz -d -f "$z" || exit 1
		else
			python3 -c 'import lzma, os, sys; f = sys.argv[1]; open(f[:-3], "wb").write(lzma.open(f).read()); os.remove(f)' "$z" || exit 1
		fi
		chmod 755 "${z%.xz}"
	done
	;;
run)
	"$0" unpack || exit 1
	logs=${OUT:-$root/.gpu/logs}
	mkdir -p "$logs"
	export LAGC_REQUIRE_GPU=${LAGC_REQUIRE_GPU:-1}
	passed=0 failed=0 skipped=0
	failures=()
	died=()
	shopt -s nullglob
	bins=(.gpu/*.test)
	if [ ${#bins[@]} -eq 0 ]; then
		echo "no test binaries in .gpu/ (run: scripts/gpu-suite.sh build)" >&2
		echo "GPU suite: 0 passed, 1 failed, 0 skipped"
		exit 1
	fi
	shards=${GPU_SUITE_SHARDS:-10}
	[ $# -gt 0 ] && shards=1
	jobs=() # name|dir|bin|log|-test.run regexp (empty: every test)
	for bin in "${bins[@]}"; do
		name=$(basename "$bin" .test)
		dir=${name//__//}
		[ "$name" = root ] && dir=.
		n=1
		[ "$name" = exec__gpu ] && n=$shards
		if [ "$n" -le 1 ]; then
			jobs+=("$name|$dir|$bin|$logs/$name.log|")
			continue
		fi
		mapfile -t tests < <(cd "$root/$dir" && "$root/$bin" -test.list '^(Test|Fuzz|Example)' 2>/dev/null)
		if [ ${#tests[@]} -eq 0 ]; then # cannot list: run it whole
			jobs+=("$name|$dir|$bin|$logs/$name.log|")
			continue
		fi
		for ((i = 0; i < n; i++)); do
			re=""
			for ((j = i; j < ${#tests[@]}; j += n)); do re+="${re:+|}${tests[j]}"; done
			[ -n "$re" ] && jobs+=("$name.$i|$dir|$bin|$logs/$name.$i.log|^($re)\$")
		done
	done
	pids=()
	for job in "${jobs[@]}"; do
		IFS='|' read -r name dir bin log re <<<"$job"
		run=()
		[ -n "$re" ] && run=(-test.run "$re")
		(cd "$root/$dir" && timeout "${GPU_SUITE_TIMEOUT:-540}" "$root/$bin" -test.v -test.count=1 "${run[@]}" "$@") >"$log" 2>&1 &
		pids+=($!)
	done
	for k in "${!jobs[@]}"; do
		wait "${pids[k]}"
		rc=$?
		IFS='|' read -r name dir bin log re <<<"${jobs[k]}"
		p=$(grep -cE '^\s*--- PASS' "$log")
		f=$(grep -cE '^\s*--- FAIL' "$log")
		s=$(grep -cE '^\s*--- SKIP' "$log")
		passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + s))
		while read -r line; do failures+=("$name: $line"); done < <(grep -E '^\s*--- FAIL' "$log" | sed 's/^ *--- FAIL: //')
		if [ $rc -ne 0 ] && [ "$f" -eq 0 ]; then
			died[k]=1
			failed=$((failed + 1))
			failures+=("$name: exited $rc without a failing test (crash or timeout); see $log")
		fi
	done
	# Each failed top-level test's lines, from the logs that hold one.
	: >"$logs/00-failures.log"
	for job in "${jobs[@]}"; do
		IFS='|' read -r name dir bin log re <<<"$job"
		grep -qE '^--- FAIL' "$log" || continue
		awk -v job="$name" '
			FNR == NR { if ($0 ~ /^--- FAIL: /) bad[$3] = 1; next }
			$1 == "===" && $2 == "RUN" && ($3 in bad) { on = 1; print "## " job ": " $3 }
			on { print }
			/^--- FAIL: / && ($3 in bad) { on = 0 }
		' "$log" "$log" >>"$logs/00-failures.log"
	done
	for k in "${!jobs[@]}"; do # a shard that died without a --- FAIL: its last lines
		IFS='|' read -r name dir bin log re <<<"${jobs[k]}"
		if [ -n "${died[k]:-}" ]; then
			{ echo "## $name: died (last 40 lines)"; tail -40 "$log"; } >>"$logs/00-failures.log"
		fi
	done
	# Every top-level test's time, longest first (01- sorts next to
	# 00-failures.log, so a device call brings it back): where the wall
	# time goes, and what a shard that ran long held.
	for job in "${jobs[@]}"; do
		IFS='|' read -r name dir bin log re <<<"$job"
		sed -nE 's/^--- (PASS|FAIL|SKIP): ([^ ]+) \(([0-9.]+)s\)$/\3 \2 \1 '"$name"'/p' "$log"
	done | sort -k1,1 -gr >"$logs/01-times.txt"
	for x in "${failures[@]}"; do echo "FAIL $x"; done
	echo "GPU suite: $passed passed, $failed failed, $skipped skipped"
	[ "$failed" -eq 0 ]
	;;
*)
	echo "usage: scripts/gpu-suite.sh build [PKG...] | unpack | run [TEST FLAGS...]" >&2
	exit 2
	;;
esac
