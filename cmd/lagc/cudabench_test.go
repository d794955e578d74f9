package main

import (
	"os"
	"testing"

	"lagc/cuda"
)

// TestCudaBenchKernelsCompile compiles the kernels lagc cuda-bench runs
// (bench.cu) for sm_90a with NVRTC alone, where it loads: read_runs and
// copy16 otherwise first meet a compiler on the GPU machine.
func TestCudaBenchKernelsCompile(t *testing.T) {
	if _, err := cuda.NVRTCVersion(); err != nil {
		if os.Getenv("LAGC_REQUIRE_NVRTC") == "1" {
			t.Fatalf("NVRTC: %v", err)
		}
		t.Skipf("no NVRTC here (%v)", err)
	}
	for _, c := range []struct {
		name string
		dts  []cuda.DType
	}{{"noop", nil}, {"copy16", nil}, {"read_runs", nil}, {"axpy", []cuda.DType{cuda.F32}}} {
		spec, err := cuda.EmbeddedSpec("bench.cu", c.name, c.dts...)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cuda.CompileCheck(spec, "sm_90a"); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}
