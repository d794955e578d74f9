#!/usr/bin/env bash
# nvrtc-local.sh: NVRTC (CUDA 12.4, from Debian's non-free archive) on a
# machine without a GPU, so every kernel can be compiled and checked there.
#
#   scripts/nvrtc-local.sh install        fetch into ~/.cache/lagc-nvrtc (once, ~18 MB)
#   scripts/nvrtc-local.sh env            print the exports that make lagc find it
#   eval "$(scripts/nvrtc-local.sh env)"; go test -run Compile ./exec/gpu
#
# NVRTC needs no driver and no device: lagc's kernel-compile tests run with
# it, GPU tests still skip.
#
#   scripts/nvrtc-local.sh sass 'attn_prefill_wg<128, 1, 2, 1>' [DIR]
#
# compiles the plan's instantiations whose name contains the pattern and
# disassembles them (nvdisasm from Debian's nvidia-cuda-toolkit, fetched
# once, ~87 MB) into DIR (default /tmp/lagc-sass), with each kernel's
# opcode counts and its loops' address ranges: a kernel's SASS without
# device time. NVRTC here is 12.4, the H200's 13: read the shape of the
# code, not its exact schedule.
#
#   eval "$(scripts/nvrtc-local.sh nvcc)"; nvcc -arch=sm_90a -o /tmp/p scripts/probes/gemv-chain.cu
#
# installs nvcc 12.4 (once) and puts it on PATH: the standalone probes
# compile here, host code included (they run only on the GPU machine).
set -euo pipefail
D=${LAGC_NVRTC_DIR:-$HOME/.cache/lagc-nvrtc}
L=$D/x/usr/lib/x86_64-linux-gnu
case "${1:-}" in
install)
	mkdir -p "$D/lists/partial" "$D/debs"
	m=$(grep -hE '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}' | grep -v security | head -1)
	[ -n "$m" ] || m=$(grep -hE '^deb ' /etc/apt/sources.list 2>/dev/null | awk '{print $2}' | head -1)
	[ -n "$m" ] || { echo "nvrtc-local: no Debian mirror found in the apt sources" >&2; exit 1; }
	echo "deb $m sid main contrib non-free" >"$D/sid.list"
	o=(-o Dir::Etc::SourceList="$D/sid.list" -o Dir::Etc::SourceParts=/dev/null -o Dir::State::Lists="$D/lists")
	apt-get "${o[@]}" update >/dev/null
	(cd "$D/debs" && apt-get "${o[@]}" download libnvrtc12 'libnvrtc-builtins12.*' >/dev/null 2>&1)
	rm -rf "$D/x" && for f in "$D"/debs/*.deb; do dpkg -x "$f" "$D/x"; done
	ls "$L"/libnvrtc.so.12* >/dev/null
	echo "nvrtc-local: installed in $D"
	;;
env)
	[ -e "$L/libnvrtc.so.12" ] || { echo "nvrtc-local: not installed; run: $0 install" >&2; exit 1; }
	echo "export LAGC_NVRTC_LIB=$L/libnvrtc.so.12 LD_LIBRARY_PATH=$L\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
	;;
sass)
	[ -e "$L/libnvrtc.so.12" ] || { echo "nvrtc-local: not installed; run: $0 install" >&2; exit 1; }
	pat=${2:?usage: $0 sass PATTERN [DIR]}
	out=${3:-/tmp/lagc-sass}
	nd=$D/tk/usr/bin/nvdisasm
	if [ ! -x "$nd" ]; then
		o=(-o Dir::Etc::SourceList="$D/sid.list" -o Dir::Etc::SourceParts=/dev/null -o Dir::State::Lists="$D/lists")
		(cd "$D/debs" && apt-get "${o[@]}" download nvidia-cuda-toolkit >/dev/null 2>&1) || { echo "nvrtc-local: could not fetch nvidia-cuda-toolkit" >&2; exit 1; }
		rm -rf "$D/tk" && dpkg-deb --fsys-tarfile "$D"/debs/nvidia-cuda-toolkit_*.deb | (mkdir -p "$D/tk" && cd "$D/tk" && tar x ./usr/bin/nvdisasm)
		rm -f "$D"/debs/nvidia-cuda-toolkit_*.deb # 87 MB, nvdisasm alone is kept
	fi
	rm -rf "$out" && mkdir -p "$out"
	root=$(cd "$(dirname "$0")/.." && pwd)
	(cd "$root" && LAGC_NVRTC_LIB=$L/libnvrtc.so.12 LD_LIBRARY_PATH=$L LAGC_REQUIRE_NVRTC=1 LAGC_COMPILE_MATCH="${pat%%<*}" \
		LAGC_DUMP_CUBIN="$out" LAGC_DUMP_CUBIN_MATCH="$(printf '%s' "$pat" | sed 's/[][\.*^$()+?{}|]/\\&/g')" \
		go test -count=1 ./exec/gpu -run 'TestPlanKernelsCompile$' >/dev/null) || { echo "nvrtc-local: the compile test failed" >&2; exit 1; }
	for f in "$out"/*.cubin; do
		[ -e "$f" ] || { echo "nvrtc-local: no instantiation matches $pat" >&2; exit 1; }
		"$nd" -c "$f" >"${f%.cubin}.sass"
		python3 - "${f%.cubin}.sass" <<'PY'
import collections, re, sys
ins, lab, cur = [], {}, None
for l in open(sys.argv[1]):
    m = re.match(r'\s*\.(L_x_\d+):', l)
    if m:
        cur = m.group(1)
        continue
    a = re.search(r'/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;', l)
    if a:
        ins.append((int(a.group(1), 16), a.group(2)))
        if cur:
            lab[cur], cur = ins[-1][0], None
ops = collections.Counter(re.sub(r'^@!?U?P\w+\s+', '', t).split()[0].split('.')[0] for _, t in ins)
print(f"{sys.argv[1]}: {len(ins)} instructions; " + ", ".join(f"{o} {n}" for o, n in ops.most_common(12)))
for a, t in ins:
    b = re.search(r'BRA.*`\(\.(L_x_\d+)\)', t)
    if b and lab.get(b.group(1), a) < a:
        n = sum(1 for x, _ in ins if lab[b.group(1)] <= x <= a)
        print(f"  loop {lab[b.group(1)]:#x}-{a:#x}: {n} instructions")
PY
	done
	;;
nvcc)
	# nvcc 12.4 from Debian (toolkit 87 MB; from nvidia-cuda-dev, 934 MB fetched
	# once, the headers, the static runtime and libcuda's stub kept): compiles the standalone probes
	# (scripts/probes/*.cu, host code and all) here; they still run only on the GPU
	# machine. Prints the PATH export.
	T=$D/nvcc
	B=$T/usr/lib/nvidia-cuda-toolkit/bin
	if [ ! -x "$B/nvcc" ] || [ ! -e "$T/usr/include/cuda_runtime.h" ]; then
		o=(-o Dir::Etc::SourceList="$D/sid.list" -o Dir::Etc::SourceParts=/dev/null -o Dir::State::Lists="$D/lists")
		mkdir -p "$D/debs/nvcc" && (cd "$D/debs/nvcc" && apt-get "${o[@]}" download nvidia-cuda-toolkit nvidia-cuda-dev libnvvm4 >/dev/null 2>&1) ||
			{ echo "nvrtc-local: could not fetch nvidia-cuda-toolkit, nvidia-cuda-dev and libnvvm4" >&2; exit 1; }
		rm -rf "$T" && mkdir -p "$T"
		for f in "$D"/debs/nvcc/nvidia-cuda-toolkit_*.deb "$D"/debs/nvcc/libnvvm4_*.deb; do dpkg -x "$f" "$T"; done
		dpkg-deb --fsys-tarfile "$D"/debs/nvcc/nvidia-cuda-dev_*.deb | (cd "$T" && tar x ./usr/include \
			./usr/lib/x86_64-linux-gnu/libcudart_static.a ./usr/lib/x86_64-linux-gnu/libcudadevrt.a \
			./usr/lib/x86_64-linux-gnu/stubs/libcuda.so)
		rm -rf "$D/debs/nvcc"
		# Debian's profile names /usr/lib/nvidia-cuda-toolkit: point it here
		rm -f "$B/nvcc.profile"
		printf 'NVVMIR_LIBRARY_DIR = %s\nPATH += %s:%s:\nINCLUDES += -I%s\nLIBRARIES =+ $(_SPACE_) -L%s -L%s\n' \
			"$T/usr/lib/nvidia-cuda-toolkit/libdevice" "$B" "$T/usr/bin" "$T/usr/include" \
			"$T/usr/lib/x86_64-linux-gnu/stubs" "$T/usr/lib/x86_64-linux-gnu" >"$B/nvcc.profile"
	fi
	echo "export PATH=$B\${PATH:+:\$PATH}"
	;;
*)
	sed -n '2,25p' "$0"
	exit 2
	;;
esac
