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
*)
	sed -n '2,10p' "$0"
	exit 2
	;;
esac
