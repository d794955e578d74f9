# smi.sh: sourced by ab-bench.sh and targets.sh. The GPU's state through a
# run, as nvidia-smi samples it every 20 ms: SM clock (MHz), power (W) and
# the active throttle reasons (0x4: the software power cap), one CSV line a
# sample; smi_summary.py reads the files back.
#
#   smi_start FILE   sample into FILE in the background (nothing where
#                    nvidia-smi is missing)
#   smi_stop         end the sampler smi_start began, if any

smi_pid=
smi_start() {
	smi_pid=
	command -v nvidia-smi >/dev/null || return 0
	nvidia-smi --query-gpu=clocks.sm,power.draw,clocks_throttle_reasons.active \
		--format=csv,noheader,nounits -lms 20 >"$1" 2>/dev/null &
	smi_pid=$!
}
smi_stop() {
	[ -n "$smi_pid" ] || return 0
	kill "$smi_pid" 2>/dev/null || true
	wait "$smi_pid" 2>/dev/null || true
	smi_pid=
}
