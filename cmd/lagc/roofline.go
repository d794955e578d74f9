package main

import (
	"fmt"
	"strings"

	"lagc/cuda"
)

// The byte roofline of lagc bench and kernel-bench. Every figure in
// docs/PERF.md and the issues' targets is against 4.3 TB/s, a copy measured
// on the H200; on another GPU that figure would overstate the roofline
// (an H100's HBM3 peaks at 3.35 TB/s), so --bw 0 (the default) scales it by
// the GPU's peak memory bandwidth against the H200's, both from the
// driver's memory clock and bus width (the H200's: 3201 MHz, as nvidia-smi
// reported on 2026-12-05, and its 6144-bit HBM3e bus, not read there).
const (
	h200Roofline = 4.3e12
	h200PeakBW   = 2 * 3201e6 * 6144 / 8
)

// bwRule is --bw's flag rule (bench and kernel-bench): 0 asks for
// roofline's default.
func bwRule(bw float64) flagRule {
	return flagRule{"--bw", bw, bw >= 0, "want a number >= 0 (0: the default roofline)"}
}

// roofline is the bytes/s the report divides by, and how it was chosen:
// bw where given (> 0), else the H200's 4.3 TB/s on an H200 (by name, so
// its figures stay comparable whatever its attributes say) and the same
// scaled by peak bandwidth elsewhere (4.3 TB/s unscaled where the driver
// gives no memory clock or bus width).
func roofline(bw float64, p cuda.Props) (float64, string) {
	switch peak := p.PeakMemBandwidth(); {
	case bw > 0:
		return bw, "--bw"
	case strings.Contains(p.Name, "H200") && !strings.Contains(p.Name, "GH200"): // a GH200's HBM3 may be 4 TB/s: scaled below
		return h200Roofline, "an H200 copy measured 4.3 TB/s"
	case peak > 0:
		return h200Roofline * peak / h200PeakBW, fmt.Sprintf("4.3 TB/s scaled by this GPU's peak memory bandwidth, %.2f TB/s, against an H200's %.2f", peak/1e12, h200PeakBW/1e12)
	default:
		return h200Roofline, "the H200's 4.3 TB/s: this GPU's memory clock or bus width is unknown"
	}
}
