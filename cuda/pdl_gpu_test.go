package cuda_test

import (
	"os"
	"os/signal"
	"syscall"
	"testing"
	"time"

	"lagc/cuda"
	"lagc/cuda/cudatest"
)

// TestGPUProgrammaticLaunch: kernels launched programmatically
// (SetProgrammaticLaunch) still see every earlier kernel's writes (a chain
// of axpy launches, each reading the previous one's output), and after
// them an interrupt reaches Go's handler: the handlers the driver installs
// at the first programmatic launch (SIGINT, SIGTERM and SIGXFSZ without
// SA_ONSTACK, on the H200) are repaired by it.
func TestGPUProgrammaticLaunch(t *testing.T) {
	d := cudatest.Device(t)
	before, err := cuda.SignalsWithoutOnStack(false)
	must(t, err)
	s := stream(t, d)
	if !s.SetProgrammaticLaunch(true) {
		t.Skipf("no programmatic launches on %s (sm_90 and cuLaunchKernelEx needed)", d.Arch())
	}
	k := compile(t, d, "bench.cu", "axpy", cuda.F32)
	const n, reps = 1 << 20, 50
	x, y := alloc(t, d, 4*n), alloc(t, d, 4*n)
	ones := make([]float32, n)
	for i := range ones {
		ones[i] = 1
	}
	must(t, s.CopyHtoD(x, cuda.AsBytes(ones)))
	must(t, s.CopyHtoD(y, make([]byte, 4*n)))
	for i := 0; i < reps; i++ {
		must(t, s.Launch(k, blocks(n), cuda.Dim(256), 0, int64(n), float32(1), x, y))
	}
	got := make([]float32, n)
	must(t, s.CopyDtoH(cuda.AsBytes(got), y))
	for i, v := range got {
		if v != reps {
			t.Fatalf("y[%d] = %v after %d dependent launches, want %d", i, v, reps, reps)
		}
	}
	after, err := cuda.SignalsWithoutOnStack(false)
	must(t, err)
	if len(after) > 0 {
		t.Errorf("signals whose handler lacks SA_ONSTACK: before %v, after programmatic launches %v", before, after)
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt)
	defer signal.Stop(sigs)
	must(t, syscall.Kill(os.Getpid(), syscall.SIGINT))
	select {
	case <-sigs:
	case <-time.After(10 * time.Second):
		t.Fatal("SIGINT not delivered")
	}
}
