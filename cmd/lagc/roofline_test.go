package main

import (
	"math"
	"strings"
	"testing"

	"lagc/cuda"
)

// TestRoofline: a given --bw wins; the H200 whose driver reported 3201 MHz
// and 6016 bits (kernel-bench, 2026-12-05) keeps 4.3 TB/s; an H100 SXM's
// HBM3 (2619 MHz, 5120 bits: 3.35 TB/s peak) gets 4.3 TB/s scaled by
// 3.35/4.81, and so do a GH200 and an H200 at another memory clock;
// unknown attributes fall back to 4.3.
func TestRoofline(t *testing.T) {
	h100 := cuda.Props{Name: "NVIDIA H100 80GB HBM3", MemClockKHz: 2619000, MemBusBits: 5120}
	for _, c := range []struct {
		name string
		bw   float64
		p    cuda.Props
		want float64
		how  string
	}{
		{"flag", 3e12, h100, 3e12, "--bw"},
		{"h200", 0, cuda.Props{Name: "NVIDIA H200", MemClockKHz: 3201000, MemBusBits: 6016}, 4.3e12, "H200 copy"},
		{"h200 other clock", 0, cuda.Props{Name: "NVIDIA H200 NVL", MemClockKHz: 2619000, MemBusBits: 6016}, 4.3e12 * 2619 / 3201, "scaled"},
		{"h100", 0, h100, 4.3e12 * 3.35232e12 / 4.814304e12, "scaled"},
		{"gh200 hbm3", 0, cuda.Props{Name: "NVIDIA GH200 480GB", MemClockKHz: 2619000, MemBusBits: 6144}, 4.3e12 * 4.0228e12 / 4.814304e12, "scaled"},
		{"unknown", 0, cuda.Props{Name: "NVIDIA A100"}, 4.3e12, "unknown"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, how := roofline(c.bw, c.p)
			if math.Abs(got-c.want) > 1e-4*c.want {
				t.Errorf("roofline %.4g, want %.4g", got, c.want)
			}
			if !strings.Contains(how, c.how) {
				t.Errorf("how %q, want it to say %q", how, c.how)
			}
		})
	}
}
