package main

import (
	"fmt"

	"lagc/cuda"
)

// The byte roofline of lagc bench and kernel-bench. Every figure in
// docs/PERF.md and the issues' targets is against 4.3 TB/s, a copy measured
// on the H200; on another GPU that figure would overstate the roofline
// (an H100's HBM3 peaks at 3.35 TB/s), so --bw 0 (the default) scales it by
// the GPU's peak memory bandwidth against that H200's, both from the
// driver's memory clock and bus width (the H200's as its driver reported
// them through kernel-bench on 2026-12-05: 3201 MHz, 6016 bits, 4.81 TB/s;
// so that H200 gets 4.3 TB/s exactly).
const (
	h200Roofline = 4.3e12
	h200PeakBW   = 2 * 3201e6 * 6016 / 8
)

// bwRule is --bw's flag rule (bench and kernel-bench): 0 asks for
// roofline's default.
func bwRule(bw float64) flagRule {
	return flagRule{"--bw", bw, bw >= 0, "want a number >= 0 (0: the default roofline)"}
}

// roofline is the bytes/s the report divides by, and how it was chosen:
// bw where given (> 0), else 4.3 TB/s scaled by peak bandwidth (4.3 TB/s
// unscaled where the driver gives no memory clock or bus width).
func roofline(bw float64, p cuda.Props) (float64, string) {
	switch peak := p.PeakMemBandwidth(); {
	case bw > 0:
		return bw, "--bw"
	case peak == h200PeakBW: // whole numbers of bytes/s: exact in a float64
		return h200Roofline, "an H200 copy measured 4.3 TB/s"
	case peak > 0:
		return h200Roofline * peak / h200PeakBW, fmt.Sprintf("4.3 TB/s scaled by this GPU's peak memory bandwidth, %.2f TB/s, against an H200's %.2f", peak/1e12, h200PeakBW/1e12)
	default:
		return h200Roofline, "the H200's 4.3 TB/s: this GPU's memory clock or bus width is unknown"
	}
}
