package cuda_test

import (
	"os"
	"os/signal"
	"syscall"
	"testing"
	"time"

	"lagc/cuda"
)

// TestNVRTCSignals: after an NVRTC compile (whose first one installs
// handlers of SIGINT, SIGTERM and SIGXFSZ without SA_ONSTACK) no handler
// lacks the flag, and SIGTERMs sent to the process reach Go's handler
// (without the repair Go's runtime died of such a signal, now and then:
// "non-Go code set up signal handler without SA_ONSTACK flag", first
// seen in cmd/lagc's serve test beside an NVRTC compile).
func TestNVRTCSignals(t *testing.T) {
	if _, err := cuda.NVRTCVersion(); err != nil {
		if os.Getenv("LAGC_REQUIRE_NVRTC") == "1" {
			t.Fatalf("NVRTC: %v", err)
		}
		t.Skipf("no NVRTC here (%v)", err)
	}
	spec, err := cuda.EmbeddedSpec("bench.cu", "noop")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cuda.CompileCheck(spec, "sm_90a"); err != nil {
		t.Fatal(err)
	}
	bad, err := cuda.SignalsWithoutOnStack(false)
	if err != nil {
		t.Fatal(err)
	}
	if len(bad) > 0 {
		t.Fatalf("after an NVRTC compile, signals whose handler lacks SA_ONSTACK: %v", bad)
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM)
	defer signal.Stop(sigs)
	for i := 0; i < 20; i++ {
		if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		select {
		case <-sigs:
		case <-time.After(10 * time.Second):
			t.Fatalf("SIGTERM %d not delivered", i)
		}
	}
}
