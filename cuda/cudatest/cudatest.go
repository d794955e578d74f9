// Package cudatest gives GPU tests their device: it skips the test, with
// the reason, where CUDA cannot run, and fails it instead when
// LAGC_REQUIRE_GPU=1 (set on GPU machines so a broken setup cannot pass as
// "skipped").
package cudatest

import (
	"embed"
	"fmt"
	"os"
	"sync"
	"testing"

	"lagc/cuda"
)

// EnvRequireGPU turns skips for a missing GPU into failures when "1".
const EnvRequireGPU = "LAGC_REQUIRE_GPU"

var (
	once   sync.Once
	shared *cuda.Device
	reason string
	err    error
)

// open opens device 0 once per test binary and checks NVRTC is there too.
func open() {
	d, e := cuda.Open(0)
	if e != nil {
		err = e
		if cuda.Unavailable(e) {
			reason = e.Error()
		}
		return
	}
	if _, e := cuda.NVRTCVersion(); e != nil {
		_ = d.Close()
		err = e
		if cuda.Unavailable(e) {
			reason = e.Error()
		}
		return
	}
	shared = d
}

// Device returns the test binary's shared device 0 (never closed: it lives
// as long as the process). No GPU, driver or NVRTC skips t with the reason,
// or fails it when LAGC_REQUIRE_GPU=1; any other error fails t.
func Device(t testing.TB) *cuda.Device {
	t.Helper()
	once.Do(open)
	if shared != nil {
		return shared
	}
	if reason != "" {
		if os.Getenv(EnvRequireGPU) == "1" {
			t.Fatalf("GPU required (%s=1) but unavailable: %s", EnvRequireGPU, reason)
		}
		t.Skipf("no GPU: %s", reason)
	}
	t.Fatalf("opening CUDA device 0: %v", err)
	return nil
}

//go:embed kernels/*.cu
var testKernels embed.FS

// Spec is the kernel spec of a test-only kernel (cuda/cudatest/kernels:
// conversions, reductions, a toy decode step, a wild write): kernels the
// tests compile that have no place in the lagc binary.
func Spec(file, name string, dtypes ...cuda.DType) (cuda.KernelSpec, error) {
	b, err := testKernels.ReadFile("kernels/" + file)
	if err != nil {
		return cuda.KernelSpec{}, fmt.Errorf("cudatest: no test kernel source %q: %w", file, err)
	}
	return cuda.KernelSpec{Name: name, Source: string(b), File: file, DTypes: dtypes}, nil
}
