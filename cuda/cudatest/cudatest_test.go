package cudatest

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestSkipOrFail runs a child test with the driver pointed at a missing
// file: it must skip with the reason, or fail when LAGC_REQUIRE_GPU=1.
func TestSkipOrFail(t *testing.T) {
	if os.Getenv("LAGC_CUDATEST_CHILD") == "1" {
		Device(t)
		t.Fatal("Device returned without a GPU")
	}
	for _, c := range []struct {
		require  string
		wantFail bool
		want     string
	}{
		{"", false, "--- SKIP: TestSkipOrFail"},
		{"0", false, "no GPU: no NVIDIA driver"},
		{"1", true, "GPU required (LAGC_REQUIRE_GPU=1) but unavailable: no NVIDIA driver"},
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestSkipOrFail$", "-test.v")
		cmd.Env = append(os.Environ(), "LAGC_CUDATEST_CHILD=1", "LAGC_CUDA_LIB=/nonexistent/libcuda.so.1", EnvRequireGPU+"="+c.require)
		out, err := cmd.CombinedOutput()
		if (err != nil) != c.wantFail || !strings.Contains(string(out), c.want) {
			t.Errorf("%s=%q: exit error %v, output:\n%s\nwant failure=%v and %q", EnvRequireGPU, c.require, err, out, c.wantFail, c.want)
		}
	}
}
