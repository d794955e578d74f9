package cuda

import (
	"os"
	"testing"
)

// TestCudaBenchKernelsCompile compiles the kernels lagc cuda-bench runs
// (bench.cu) for sm_90a with NVRTC alone, where it loads: read_runs and
// copy16 otherwise first meet a compiler on the GPU machine. (It was in
// cmd/lagc, where its compile, before NVRTC's signal handlers were
// repaired (TestNVRTCSignals), made the serve test's SIGTERM kill the
// test binary now and then.)
func TestCudaBenchKernelsCompile(t *testing.T) {
	if _, err := NVRTCVersion(); err != nil {
		if os.Getenv("LAGC_REQUIRE_NVRTC") == "1" {
			t.Fatalf("NVRTC: %v", err)
		}
		t.Skipf("no NVRTC here (%v)", err)
	}
	for _, c := range []struct {
		name string
		dts  []DType
	}{{"noop", nil}, {"copy16", nil}, {"read_runs", nil}, {"axpy", []DType{F32}}} {
		spec, err := EmbeddedSpec("bench.cu", c.name, c.dts...)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := CompileCheck(spec, "sm_90a"); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}
