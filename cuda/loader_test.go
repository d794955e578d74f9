package cuda

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// fakeTree makes files under a temp root and returns the root and a glob
// over it.
func fakeTree(t *testing.T, files ...string) string {
	t.Helper()
	root := t.TempDir()
	for _, f := range files {
		p := filepath.Join(root, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestNVRTCCandidates(t *testing.T) {
	root := fakeTree(t,
		"cuda/lib64/libnvrtc.so",
		"cuda/lib64/libnvrtc.so.13",
		"cuda/lib64/libnvrtc.so.13.0.88",
		"cuda/lib64/libnvrtc.alt.so",
		"cuda/lib64/libnvrtc.alt.so.13",
		"cuda/lib64/libnvrtc-builtins.so.13.0",
		"cuda/lib64/libnvrtc.so.12",
		"old/lib64/libnvrtc.so.11.2",
	)
	dirs := []string{filepath.Join(root, "cuda/lib64"), filepath.Join(root, "old/lib64"), filepath.Join(root, "missing")}
	got := nvrtcCandidates("", dirs, globAll)
	rel := func(s []string) []string {
		var out []string
		for _, p := range s {
			out = append(out, strings.TrimPrefix(p, root+"/"))
		}
		return out
	}
	want := []string{
		"cuda/lib64/libnvrtc.so.13",
		"cuda/lib64/libnvrtc.so.12",
		"cuda/lib64/libnvrtc.so",
		"cuda/lib64/libnvrtc.so.13.0.88",
		"old/lib64/libnvrtc.so.11.2",
		"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11",
		"libnvrtc.so",
	}
	if !reflect.DeepEqual(rel(got), want) {
		t.Errorf("candidates:\n got %q\nwant %q", rel(got), want)
	}
	for _, c := range got {
		if strings.Contains(c, ".alt") || strings.Contains(c, "builtins") {
			t.Errorf("candidate %s must never be chosen", c)
		}
	}
	if got := nvrtcCandidates("/opt/x/libnvrtc.so.13", dirs, globAll); !reflect.DeepEqual(got, []string{"/opt/x/libnvrtc.so.13"}) {
		t.Errorf("override: got %q", got)
	}
}

func TestDriverCandidates(t *testing.T) {
	root := fakeTree(t,
		"cuda/lib64/stubs/libcuda.so",
		"nvidia/lib64/libcuda.so.1",
		"sys/libcuda.so",
	)
	dirs := []string{filepath.Join(root, "cuda/lib64/stubs"), filepath.Join(root, "nvidia/lib64"), filepath.Join(root, "sys")}
	got := driverCandidates("", dirs, fileExists)
	want := []string{"libcuda.so.1", filepath.Join(root, "nvidia/lib64/libcuda.so.1"), filepath.Join(root, "sys/libcuda.so")}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %q\nwant %q", got, want)
	}
	if got := driverCandidates("/x/libcuda.so.1", dirs, fileExists); !reflect.DeepEqual(got, []string{"/x/libcuda.so.1"}) {
		t.Errorf("override: got %q", got)
	}
}

func TestSearchDirs(t *testing.T) {
	glob := func(p string) []string {
		switch p {
		case "/usr/local/cuda-*/lib64":
			return []string{"/usr/local/cuda-12.4/lib64", "/usr/local/cuda-13.0/lib64", "/usr/local/cuda-12.10/lib64"}
		case "/usr/local/cuda/targets/*/lib":
			return []string{"/usr/local/cuda/targets/x86_64-linux/lib"}
		}
		return nil
	}
	got := searchDirs("/my/lib::/usr/local/cuda/lib64", glob)
	wantPrefix := []string{
		"/my/lib", "/usr/local/cuda/lib64", "/usr/local/cuda/lib",
		"/usr/local/cuda/targets/x86_64-linux/lib",
		"/usr/local/cuda-13.0/lib64", "/usr/local/cuda-12.10/lib64", "/usr/local/cuda-12.4/lib64",
	}
	if len(got) < len(wantPrefix) || !reflect.DeepEqual(got[:len(wantPrefix)], wantPrefix) {
		t.Errorf("got %q\nwant prefix %q", got, wantPrefix)
	}
	seen := map[string]bool{}
	for _, d := range got {
		if seen[d] {
			t.Errorf("directory %s listed twice", d)
		}
		seen[d] = true
	}
}

// TestMissingLibrariesAreClear runs a child process (the libraries load
// once per process) with the libraries pointed at absent and junk files:
// each must give one clear error, not a crash.
func TestMissingLibrariesAreClear(t *testing.T) {
	if os.Getenv("LAGC_CUDA_CHILD") == "missing" {
		_, err := Open(0)
		if err == nil || !Unavailable(err) || !strings.Contains(err.Error(), os.Getenv(EnvCudaLib)) || !strings.Contains(err.Error(), EnvCudaLib) {
			t.Fatalf("Open: want a clear ErrNoDriver naming the path and %s, got %v", EnvCudaLib, err)
		}
		t.Logf("driver: %v", err)
		_, err = NVRTCVersion()
		if err == nil || !Unavailable(err) || !strings.Contains(err.Error(), EnvNVRTCLib) {
			t.Fatalf("NVRTCVersion: want ErrNoNVRTC naming %s, got %v", EnvNVRTCLib, err)
		}
		t.Logf("nvrtc: %v", err)
		return
	}
	junk := filepath.Join(t.TempDir(), "libjunk.so")
	if err := os.WriteFile(junk, []byte("not an ELF file"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, cuda, nvrtc string }{
		{"absent", "/nonexistent/libcuda.so.1", "/nonexistent/libnvrtc.so"},
		{"junk", junk, junk},
	} {
		t.Run(c.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestMissingLibrariesAreClear$", "-test.v")
			cmd.Env = append(os.Environ(), "LAGC_CUDA_CHILD=missing", EnvCudaLib+"="+c.cuda, EnvNVRTCLib+"="+c.nvrtc)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("child failed: %v\n%s", err, out)
			}
		})
	}
}

func TestCublasLtCandidates(t *testing.T) {
	root := fakeTree(t,
		"cuda/lib64/libcublasLt.so",
		"cuda/lib64/libcublasLt.so.13",
		"cuda/lib64/libcublasLt.so.13.1.0.3",
		"cuda/lib64/libcublasLt.so.12",
		"cuda/lib64/libcublas.so.13",
	)
	dirs := []string{filepath.Join(root, "cuda/lib64"), filepath.Join(root, "missing")}
	var got []string
	for _, p := range cublasLtCandidates("", dirs, globAll) {
		got = append(got, strings.TrimPrefix(p, root+"/"))
	}
	want := []string{
		"cuda/lib64/libcublasLt.so.13", "cuda/lib64/libcublasLt.so.12", "cuda/lib64/libcublasLt.so",
		"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("candidates:\n got %q\nwant %q", got, want)
	}
	if got := cublasLtCandidates("/opt/x/libcublasLt.so.13", dirs, globAll); !reflect.DeepEqual(got, []string{"/opt/x/libcublasLt.so.13"}) {
		t.Errorf("override: got %q", got)
	}
}
