package cuda_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"lagc/cuda"
	"lagc/cuda/cudatest"
)

// TestMain keeps GPU tests off the user's kernel cache.
func TestMain(m *testing.M) {
	if os.Getenv(cuda.EnvCacheDir) == "" {
		dir, err := os.MkdirTemp("", "lagc-kernels-test-")
		if err == nil {
			os.Setenv(cuda.EnvCacheDir, dir)
			code := m.Run()
			os.RemoveAll(dir)
			os.Exit(code)
		}
	}
	os.Exit(m.Run())
}

func compile(t *testing.T, d *cuda.Device, file, name string, dt ...cuda.DType) *cuda.Kernel {
	t.Helper()
	spec, err := cuda.EmbeddedSpec(file, name, dt...)
	if strings.HasPrefix(file, "test_") {
		spec, err = cudatest.Spec(file, name, dt...) // kernels only the tests use
	}
	if err != nil {
		t.Fatal(err)
	}
	k, err := d.Compile(context.Background(), spec)
	if err != nil {
		t.Fatalf("compile %s: %v", spec.NameExpr(), err)
	}
	return k
}

func stream(t *testing.T, d *cuda.Device) *cuda.Stream {
	t.Helper()
	s, err := d.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func alloc(t *testing.T, d *cuda.Device, n int64) cuda.DevicePtr {
	t.Helper()
	p, err := d.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Free(p) })
	return p
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func blocks(n int) cuda.Dim3 { return cuda.Dim(uint32((n + 255) / 256)) }

func TestGPUDeviceProps(t *testing.T) {
	d := cudatest.Device(t)
	p := d.Props()
	if p.Name == "" || p.SMs <= 0 || p.TotalMem == 0 || p.L2Bytes <= 0 || p.Major <= 0 || p.MaxThreadsPerBlock < 1024 || p.WarpSize != 32 {
		t.Fatalf("implausible properties %+v", p)
	}
	if want := "sm_" + string(rune('0'+p.Major)); !strings.HasPrefix(d.Arch(), want) && p.Major < 10 {
		t.Errorf("arch %s for compute capability %d.%d", d.Arch(), p.Major, p.Minor)
	}
	free, total, err := d.MemInfo()
	if err != nil || free == 0 || free > total {
		t.Fatalf("MemInfo %d/%d %v", free, total, err)
	}
	nv, _ := cuda.NVRTCVersion()
	t.Logf("%s: cc %d.%d (%s), %d SMs, %.1f GiB, L2 %d MiB, smem/block %d KiB, driver %d, NVRTC %s, libs %+v",
		p.Name, p.Major, p.Minor, d.Arch(), p.SMs, float64(p.TotalMem)/(1<<30), p.L2Bytes>>20, p.MaxSharedPerBlock>>10, p.DriverVersion, nv, cuda.LoadedLibraries())
}

// TestGPUAxpyF32F16 guards against a cache regression: one template
// instantiated for f32 and f16 must give two cache entries and the right
// results for both (a cache keyed by name alone ran the f32 kernel on f16).
func TestGPUAxpyF32F16(t *testing.T) {
	t.Setenv(cuda.EnvCacheDir, t.TempDir())
	d, err := cuda.Open(0) // a fresh device: empty memory cache, this disk cache
	if err != nil {
		cudatest.Device(t) // skips or fails with the reason
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() }) // after the stream and buffers (cleanups run last-first)
	s := stream(t, d)
	const n = 100_003
	rng := rand.New(rand.NewPCG(1, 2))
	x, y := make([]float32, n), make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
		y[i] = float32(rng.NormFloat64())
	}
	const a = float32(0.75)

	k32 := compile(t, d, "bench.cu", "axpy", cuda.F32)
	k16 := compile(t, d, "bench.cu", "axpy", cuda.F16)
	if k32.Key == k16.Key || k32.Lowered == k16.Lowered {
		t.Fatalf("f32 and f16 share a key or symbol: %s %s / %s %s", k32.Key, k32.Lowered, k16.Key, k16.Lowered)
	}
	if st := d.CacheStats(); st.Compiles != 2 {
		t.Errorf("stats %+v, want 2 compiles", st)
	}
	ents, _ := filepath.Glob(filepath.Join(d.CacheDir(), "*.cubin"))
	if len(ents) != 2 {
		t.Errorf("disk cache holds %d entries, want 2: %v", len(ents), ents)
	}

	// f32
	dx, dy := alloc(t, d, 4*n), alloc(t, d, 4*n)
	must(t, cuda.Upload(s, dx, x))
	must(t, cuda.Upload(s, dy, y))
	must(t, s.Launch(k32, blocks(n), cuda.Dim(256), 0, int64(n), a, dx, dy))
	got := make([]float32, n)
	must(t, cuda.Download(s, got, dy))
	for i := range got {
		want := float32(float64(a)*float64(x[i]) + float64(y[i]))
		if math.Abs(float64(got[i]-want)) > 1e-6*math.Max(1, math.Abs(float64(want))) {
			t.Fatalf("f32 [%d]: got %g want %g", i, got[i], want)
		}
	}

	// f16: inputs rounded to f16, result rounded once from float.
	hx, hy := make([]uint16, n), make([]uint16, n)
	for i := range x {
		hx[i], hy[i] = cuda.F32ToF16(x[i]), cuda.F32ToF16(y[i])
	}
	hxd, hyd := alloc(t, d, 2*n), alloc(t, d, 2*n)
	must(t, cuda.Upload(s, hxd, hx))
	must(t, cuda.Upload(s, hyd, hy))
	must(t, s.Launch(k16, blocks(n), cuda.Dim(256), 0, int64(n), a, hxd, hyd))
	hgot := make([]uint16, n)
	must(t, cuda.Download(s, hgot, hyd))
	bad := 0
	for i := range hgot {
		exact := float64(a)*float64(cuda.F16ToF32(hx[i])) + float64(cuda.F16ToF32(hy[i]))
		want := cuda.F32ToF16(float32(exact))
		if hgot[i] != want {
			// Only a double-rounding tie may differ, by one unit.
			if diff := int(hgot[i]) - int(want); diff < -1 || diff > 1 {
				t.Fatalf("f16 [%d]: got %#04x (%g) want %#04x (%g)", i, hgot[i], cuda.F16ToF32(hgot[i]), want, cuda.F16ToF32(want))
			}
			bad++
		}
	}
	if bad > n/10000 {
		t.Errorf("%d of %d f16 results one unit off", bad, n)
	}

	// The same specs again: served from memory, nothing recompiled.
	if k := compile(t, d, "bench.cu", "axpy", cuda.F16); k != k16 {
		t.Error("second compile of axpy<half_t> returned another kernel")
	}
	if st := d.CacheStats(); st.Compiles != 2 || st.MemoryHits != 1 {
		t.Errorf("stats %+v, want 2 compiles and 1 memory hit", st)
	}
}

// TestGPUCasts checks the prelude's conversions against Go's, bit for bit:
// all 65536 f16 values widened, and f32 values narrowed to f16 and bf16.
func TestGPUCasts(t *testing.T) {
	d := cudatest.Device(t)
	s := stream(t, d)
	const n = 1 << 16
	all := make([]uint16, n)
	for i := range all {
		all[i] = uint16(i)
	}
	src, dst := alloc(t, d, 2*n), alloc(t, d, 4*n)
	must(t, cuda.Upload(s, src, all))
	must(t, s.Launch(compile(t, d, "test_elementwise.cu", "cast", cuda.F16, cuda.F32), blocks(n), cuda.Dim(256), 0, int64(n), src, dst))
	wide := make([]float32, n)
	must(t, cuda.Download(s, wide, dst))
	for i, f := range wide {
		want := cuda.F16ToF32(uint16(i))
		if math.Float32bits(f) != math.Float32bits(want) && !(f != f && want != want) {
			t.Fatalf("f16 %#04x widened to %g, want %g", i, f, want)
		}
	}

	rng := rand.New(rand.NewPCG(3, 4))
	vals := []float32{0, 1, -1, 65504, 65520, 1e-8, 3e-8, 6.1e-5, 1.00048828125, 1e30, float32(math.Inf(-1)), 3.1415927}
	for len(vals) < n {
		u := rng.Uint32()
		if len(vals)%2 == 0 {
			u &^= 0x40000000 // half of them below 2 in magnitude, many f16 subnormals
		}
		if u&0x7f800000 != 0x7f800000 { // finite
			vals = append(vals, math.Float32frombits(u))
		}
	}
	must(t, cuda.Upload(s, dst, vals))
	for _, c := range []struct {
		dt   cuda.DType
		conv func(float32) uint16
	}{{cuda.F16, cuda.F32ToF16}, {cuda.BF16, cuda.F32ToBF16}} {
		must(t, s.Launch(compile(t, d, "test_elementwise.cu", "cast", cuda.F32, c.dt), blocks(n), cuda.Dim(256), 0, int64(n), dst, src))
		got := make([]uint16, n)
		must(t, cuda.Download(s, got, src))
		for i, v := range vals {
			if v != v {
				continue
			}
			if want := c.conv(v); got[i] != want {
				t.Fatalf("%s: %g (%#08x) -> %#04x, Go says %#04x", c.dt, v, math.Float32bits(v), got[i], want)
			}
		}
	}
}

func TestGPURowSumDynamicShared(t *testing.T) {
	d := cudatest.Device(t)
	s := stream(t, d)
	const rows, cols = 37, 1000
	x := make([]float32, rows*cols)
	for i := range x {
		x[i] = float32(i%97) * 0.25
	}
	for _, dt := range []cuda.DType{cuda.F32, cuda.BF16} {
		dx := alloc(t, d, int64(4*len(x)))
		out := alloc(t, d, 4*rows)
		if dt == cuda.F32 {
			must(t, cuda.Upload(s, dx, x))
		} else {
			b := make([]uint16, len(x))
			for i, v := range x {
				b[i] = cuda.F32ToBF16(v) // multiples of 0.25 below 24: exact in bf16
			}
			must(t, cuda.Upload(s, dx, b))
		}
		k := compile(t, d, "test_reduce.cu", "row_sum", dt)
		must(t, s.Launch(k, cuda.Dim(rows), cuda.Dim(128), 128*4, int32(rows), int32(cols), dx, out))
		got := make([]float32, rows)
		must(t, cuda.Download(s, got, out))
		for r := range got {
			var want float64
			for c := 0; c < cols; c++ {
				want += float64(x[r*cols+c])
			}
			if math.Abs(float64(got[r])-want) > 1e-5*want {
				t.Fatalf("%s row %d: got %g want %g", dt, r, got[r], want)
			}
		}
	}
}

// TestGPUDiskCacheCorruptRebuild: a fresh device finds the entry on disk; a
// damaged entry is detected, rebuilt, and the kernel still works.
func TestGPUDiskCacheCorruptRebuild(t *testing.T) {
	cudatest.Device(t)
	dir := t.TempDir()
	t.Setenv(cuda.EnvCacheDir, dir)
	open := func() *cuda.Device {
		d, err := cuda.Open(0)
		must(t, err)
		t.Cleanup(func() { d.Close() })
		return d
	}
	d1 := open()
	k := compile(t, d1, "test_elementwise.cu", "iota", cuda.F32)
	if st := d1.CacheStats(); st.Compiles != 1 || st.DiskHits != 0 {
		t.Fatalf("first: %+v", st)
	}
	d2 := open()
	compile(t, d2, "test_elementwise.cu", "iota", cuda.F32)
	if st := d2.CacheStats(); st.Compiles != 0 || st.DiskHits != 1 {
		t.Fatalf("second device: %+v, want a disk hit", st)
	}
	path := filepath.Join(dir, k.Key+".cubin")
	data, err := os.ReadFile(path)
	must(t, err)
	data[len(data)/2] ^= 0xff
	must(t, os.WriteFile(path, data, 0o644))

	d3 := open()
	k3 := compile(t, d3, "test_elementwise.cu", "iota", cuda.F32)
	if st := d3.CacheStats(); st.Corrupt != 1 || st.Compiles != 1 || st.DiskHits != 0 {
		t.Fatalf("after corruption: %+v, want 1 corrupt entry rebuilt", st)
	}
	s := stream(t, d3)
	out := alloc(t, d3, 4*1000)
	must(t, s.Launch(k3, blocks(1000), cuda.Dim(256), 0, int64(1000), float32(3), float32(0.5), out))
	got := make([]float32, 1000)
	must(t, cuda.Download(s, got, out))
	for i, v := range got {
		if v != 3+0.5*float32(i) {
			t.Fatalf("iota[%d] = %g", i, v)
		}
	}
	d4 := open()
	compile(t, d4, "test_elementwise.cu", "iota", cuda.F32)
	if st := d4.CacheStats(); st.DiskHits != 1 {
		t.Errorf("rebuilt entry not reused: %+v", st)
	}
}

func TestGPUCompileErrorHasLog(t *testing.T) {
	d := cudatest.Device(t)
	src := "// line 1\n__global__ void broken(float* p) {\n  p[0] = undefined_name;\n}\n"
	_, err := d.Compile(context.Background(), cuda.KernelSpec{Name: "broken", Source: src, File: "broken.cu"})
	var ce *cuda.CompileError
	if !errors.As(err, &ce) {
		t.Fatalf("want *CompileError, got %v", err)
	}
	if !strings.Contains(ce.Log, "broken.cu(3)") || !strings.Contains(ce.Log, "undefined_name") {
		t.Errorf("log lacks the location or identifier:\n%s", ce.Log)
	}
	if !strings.Contains(ce.Excerpt, ">    3 |   p[0] = undefined_name;") {
		t.Errorf("excerpt:\n%s", ce.Excerpt)
	}
	if !strings.Contains(err.Error(), d.Arch()) {
		t.Errorf("error does not name the arch: %v", err)
	}
	t.Logf("%v", err)
}

// TestGPUBadLaunches: each mistake is an error, and the stream still works.
func TestGPUBadLaunches(t *testing.T) {
	d := cudatest.Device(t)
	s := stream(t, d)
	k := compile(t, d, "test_elementwise.cu", "iota", cuda.F32)
	out := alloc(t, d, 4*256)
	if k.NumParams() != 4 {
		t.Errorf("iota has %d parameters, want 4", k.NumParams())
	}
	for _, c := range []struct {
		name         string
		grid, block  cuda.Dim3
		shmem        int
		args         []any
		wantContains string
	}{
		{"block too large", cuda.Dim(1), cuda.Dim(4096), 0, []any{int64(256), float32(0), float32(1), out}, "CUDA_ERROR_INVALID_VALUE"},
		{"too much shared memory", cuda.Dim(1), cuda.Dim(256), 1 << 20, []any{int64(256), float32(0), float32(1), out}, "cuLaunchKernel"},
		{"missing argument", cuda.Dim(1), cuda.Dim(256), 0, []any{int64(256), float32(0), out}, "takes 4 parameters"},
		{"wrong width", cuda.Dim(1), cuda.Dim(256), 0, []any{int32(256), float32(0), float32(1), out}, "parameter has 8"},
		{"go int", cuda.Dim(1), cuda.Dim(256), 0, []any{256, float32(0), float32(1), out}, "int32 or int64"},
		{"zero grid", cuda.Dim(0), cuda.Dim(256), 0, []any{int64(256), float32(0), float32(1), out}, "CUDA_ERROR_INVALID_VALUE"},
	} {
		err := s.Launch(k, c.grid, c.block, c.shmem, c.args...)
		if err == nil || !strings.Contains(err.Error(), c.wantContains) {
			t.Errorf("%s: got %v, want an error containing %q", c.name, err, c.wantContains)
		}
	}
	must(t, s.Launch(k, cuda.Dim(1), cuda.Dim(256), 0, int64(256), float32(1), float32(2), out))
	got := make([]float32, 256)
	must(t, cuda.Download(s, got, out))
	if got[255] != 1+2*255 {
		t.Errorf("stream broken after bad launches: %g", got[255])
	}
}

// TestGPUDynamicSharedOptIn: above 48 KiB of dynamic shared memory a launch
// fails until the kernel opts in; then it runs and computes the same sums.
func TestGPUDynamicSharedOptIn(t *testing.T) {
	d := cudatest.Device(t)
	s := stream(t, d)
	k := compile(t, d, "test_reduce.cu", "row_sum", cuda.F32)
	a, err := k.Attrs()
	must(t, err)
	if a.Registers <= 0 || a.MaxThreadsPerBlock < 256 || a.MaxDynamicShared > 48<<10 {
		t.Fatalf("implausible attributes %+v", a)
	}
	t.Logf("row_sum<float>: %+v", a)
	const rows, cols, big = 4, 512, 100 << 10
	x := make([]float32, rows*cols)
	for i := range x {
		x[i] = 1
	}
	dx, out := alloc(t, d, 4*rows*cols), alloc(t, d, 4*rows)
	must(t, cuda.Upload(s, dx, x))
	if err := s.Launch(k, cuda.Dim(rows), cuda.Dim(128), big, int32(rows), int32(cols), dx, out); err == nil {
		t.Fatal("100 KiB of dynamic shared memory accepted without opting in")
	}
	must(t, k.SetMaxDynamicShared(big))
	must(t, s.Launch(k, cuda.Dim(rows), cuda.Dim(128), big, int32(rows), int32(cols), dx, out))
	got := make([]float32, rows)
	must(t, cuda.Download(s, got, out))
	for r, v := range got {
		if v != cols {
			t.Fatalf("row %d: %g want %d", r, v, cols)
		}
	}
}

// TestGPUConcurrentStreams: goroutines compiling the same kernel and
// launching on their own streams at once (goroutines move between OS
// threads; each call binds the context where it runs).
func TestGPUConcurrentStreams(t *testing.T) {
	d := cudatest.Device(t)
	spec, err := cudatest.Spec("test_elementwise.cu", "iota", cuda.I32)
	must(t, err)
	const workers, n, rounds = 8, 1 << 16, 50
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		go func(w int) {
			errs <- func() error {
				k, err := d.Compile(context.Background(), spec)
				if err != nil {
					return err
				}
				s, err := d.NewStream()
				if err != nil {
					return err
				}
				defer s.Close()
				p, err := d.Alloc(4 * n)
				if err != nil {
					return err
				}
				defer d.Free(p)
				got := make([]int32, n)
				for r := 0; r < rounds; r++ {
					start := float32(w*1000 + r)
					if err := s.Launch(k, blocks(n), cuda.Dim(256), 0, int64(n), start, float32(1), p); err != nil {
						return err
					}
					if err := cuda.Download(s, got, p); err != nil {
						return err
					}
					if got[0] != int32(start) || got[n-1] != int32(start)+n-1 {
						return fmt.Errorf("worker %d round %d: got %d..%d", w, r, got[0], got[n-1])
					}
				}
				return nil
			}()
		}(w)
	}
	for w := 0; w < workers; w++ {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

// TestGPUNoVisibleDevice hides the GPU from a child process: Open must say
// there is no GPU (ErrNoDevice), one clear error, not a crash.
func TestGPUNoVisibleDevice(t *testing.T) {
	if os.Getenv("LAGC_CUDA_CHILD") == "hidden" {
		_, err := cuda.Open(0)
		if !errors.Is(err, cuda.ErrNoDevice) {
			t.Fatalf("want ErrNoDevice, got %v", err)
		}
		t.Logf("child got: %v", err)
		return
	}
	cudatest.Device(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestGPUNoVisibleDevice$", "-test.v")
	cmd.Env = append(os.Environ(), "LAGC_CUDA_CHILD=hidden", "CUDA_VISIBLE_DEVICES=-1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "child got:") {
		t.Fatalf("child: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}

// TestGPUIllegalAddress runs a kernel that writes out of bounds in a child
// process (the fault poisons its context): the child must get an error
// naming CUDA_ERROR_ILLEGAL_ADDRESS and exit normally, not crash.
func TestGPUIllegalAddress(t *testing.T) {
	if os.Getenv("LAGC_CUDA_CHILD") == "wild" {
		d := cudatest.Device(t)
		s := stream(t, d)
		k := compile(t, d, "test_step.cu", "wild_write")
		p := alloc(t, d, 256)
		err := s.Launch(k, cuda.Dim(1), cuda.Dim(1), 0, p)
		if err == nil {
			err = s.Synchronize()
		}
		if err == nil || !strings.Contains(err.Error(), "ILLEGAL_ADDRESS") {
			t.Fatalf("want CUDA_ERROR_ILLEGAL_ADDRESS, got %v", err)
		}
		t.Logf("child got: %v", err)
		return
	}
	cudatest.Device(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestGPUIllegalAddress$", "-test.v")
	cmd.Env = append(os.Environ(), "LAGC_CUDA_CHILD=wild")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "child got:") {
		t.Fatalf("child: %v\n%s", err, out)
	}
}

func TestGPUOutOfMemory(t *testing.T) {
	d := cudatest.Device(t)
	const tib = int64(1) << 40
	_, err := d.Alloc(tib)
	var oom *cuda.OOMError
	if !errors.As(err, &oom) {
		t.Fatalf("1 TiB allocation: want *OOMError, got %v", err)
	}
	if oom.Need != uint64(tib) || oom.Free == 0 || oom.Free > oom.Total {
		t.Errorf("OOM figures: %+v", oom)
	}
	if s := err.Error(); !strings.Contains(s, "1099511627776 bytes (1.0 TiB) needed") || !strings.Contains(s, "free") {
		t.Errorf("message: %s", s)
	}
	t.Log(err)
	// The device is still usable.
	p, err := d.Alloc(1 << 20)
	must(t, err)
	must(t, d.Free(p))
}

// TestGPUGraphReplay1000 captures a three-kernel step whose position lives in
// device memory, then replays it 1000 times, checking every step.
func TestGPUGraphReplay1000(t *testing.T) {
	d := cudatest.Device(t)
	s := stream(t, d)
	const n, steps = 4096, 1000
	x := make([]float32, n)
	var sumX float64
	for i := range x {
		x[i] = float32(i%13) - 6
		sumX += float64(x[i])
	}
	dx, dy := alloc(t, d, 4*n), alloc(t, d, 4*n)
	pos, logs := alloc(t, d, 4), alloc(t, d, 4*steps)
	must(t, cuda.Upload(s, dx, x))
	must(t, s.Memset32(pos, 0, 1))
	must(t, s.Memset32(logs, 0xffffffff, steps))
	kAdd := compile(t, d, "test_step.cu", "step_add_pos")
	kLog := compile(t, d, "test_step.cu", "step_log_sum")
	kAdv := compile(t, d, "test_step.cu", "step_advance")

	g, err := s.Capture(func() error {
		if err := s.Launch(kAdd, cuda.Dim(16), cuda.Dim(256), 0, int32(n), pos, dx, dy); err != nil {
			return err
		}
		if err := s.Launch(kLog, cuda.Dim(1), cuda.Dim(256), 0, int32(n), pos, dy, logs); err != nil {
			return err
		}
		return s.Launch(kAdv, cuda.Dim(1), cuda.Dim(32), 0, pos)
	})
	must(t, err)
	defer g.Close()
	exec, err := g.Instantiate()
	must(t, err)
	defer exec.Close()

	p := make([]int32, 1)
	l := make([]float32, 1)
	for step := 0; step < steps; step++ {
		must(t, exec.Launch(s))
		must(t, cuda.Download(s, p, pos))
		must(t, cuda.Download(s, l, logs.Add(int64(4*step))))
		want := 2*sumX + float64(n)*float64(step)
		if p[0] != int32(step+1) || float64(l[0]) != want {
			t.Fatalf("step %d: pos %d (want %d), log %g (want %g)", step, p[0], step+1, l[0], want)
		}
	}
	all := make([]float32, steps)
	must(t, cuda.Download(s, all, logs))
	for step, v := range all {
		if want := 2*sumX + float64(n)*float64(step); float64(v) != want {
			t.Fatalf("log[%d] = %g want %g", step, v, want)
		}
	}
}

// TestGPUGraphUpdate: a re-captured plan with new arguments updates the
// executable graph in place; one with a new topology re-instantiates it.
func TestGPUGraphUpdate(t *testing.T) {
	d := cudatest.Device(t)
	s := stream(t, d)
	const n = 1000
	k := compile(t, d, "test_elementwise.cu", "iota", cuda.F32)
	kAxpy := compile(t, d, "bench.cu", "axpy", cuda.F32)
	out, tmp := alloc(t, d, 4*n), alloc(t, d, 4*n)
	capture := func(start float32, twoKernels bool) *cuda.Graph {
		g, err := s.Capture(func() error {
			if err := s.Launch(k, blocks(n), cuda.Dim(256), 0, int64(n), start, float32(1), out); err != nil {
				return err
			}
			if !twoKernels {
				return nil
			}
			if err := s.Launch(k, blocks(n), cuda.Dim(256), 0, int64(n), float32(0), float32(0), tmp); err != nil {
				return err
			}
			return s.Launch(kAxpy, blocks(n), cuda.Dim(256), 0, int64(n), float32(10), out, tmp)
		})
		must(t, err)
		t.Cleanup(func() { g.Close() })
		return g
	}
	check := func(what string, p cuda.DevicePtr, want func(i int) float32) {
		t.Helper()
		got := make([]float32, n)
		must(t, cuda.Download(s, got, p))
		for i := range got {
			if got[i] != want(i) {
				t.Fatalf("%s: [%d] = %g want %g", what, i, got[i], want(i))
			}
		}
	}
	exec, err := capture(5, false).Instantiate()
	must(t, err)
	defer exec.Close()
	must(t, exec.Launch(s))
	check("first", out, func(i int) float32 { return 5 + float32(i) })

	re, err := exec.Update(capture(7, false))
	must(t, err)
	if re {
		t.Error("same topology re-instantiated instead of updating")
	}
	must(t, exec.Launch(s))
	check("updated", out, func(i int) float32 { return 7 + float32(i) })

	re, err = exec.Update(capture(1, true))
	must(t, err)
	if !re {
		t.Error("new topology was not re-instantiated")
	}
	must(t, exec.Launch(s))
	check("two kernels", tmp, func(i int) float32 { return 10 * (1 + float32(i)) })
}

// TestGPUCaptureRejectsSync: a synchronous copy inside a capture is an
// error, the capture is abandoned, and the stream works afterwards.
func TestGPUCaptureRejectsSync(t *testing.T) {
	d := cudatest.Device(t)
	s := stream(t, d)
	p := alloc(t, d, 64)
	buf := make([]byte, 64)
	_, err := s.Capture(func() error { return s.CopyDtoH(buf, p) })
	if err == nil {
		t.Fatal("synchronous copy during capture succeeded")
	}
	t.Log(err)
	must(t, s.Memset8(p, 7, 64))
	must(t, s.CopyDtoH(buf, p))
	if buf[63] != 7 {
		t.Errorf("stream unusable after a failed capture: %v", buf[63])
	}
}

func TestGPUPinnedArenaEvents(t *testing.T) {
	d := cudatest.Device(t)
	s := stream(t, d)
	const n = 8 << 20
	h, err := d.AllocHost(n)
	must(t, err)
	defer h.Free()
	b := h.Bytes()
	for i := range b {
		b[i] = byte(i * 7)
	}
	a, err := d.NewArena(64 << 20)
	must(t, err)
	defer a.Close()
	p1, err := a.Alloc(n)
	must(t, err)
	p2, err := a.Alloc(n)
	must(t, err)
	if _, err := a.Alloc(64 << 20); err == nil {
		t.Error("arena over-allocation succeeded")
	}
	e0, err := d.NewEvent()
	must(t, err)
	defer e0.Close()
	e1, err := d.NewEvent()
	must(t, err)
	defer e1.Close()
	must(t, s.Record(e0))
	must(t, s.CopyHtoDAsync(p1, h, 0, n))
	must(t, s.CopyDtoD(p2, p1, n))
	must(t, s.Memset8(p1, 0, n))
	must(t, s.CopyDtoHAsync(h, 0, p2, n))
	must(t, s.Record(e1))
	must(t, e1.Synchronize())
	el, err := cuda.Elapsed(e0, e1)
	must(t, err)
	if el <= 0 {
		t.Errorf("elapsed %v", el)
	}
	for i := range b {
		if b[i] != byte(i*7) {
			t.Fatalf("byte %d: %d", i, b[i])
		}
	}
	if err := s.CopyHtoDAsync(p1, h, n-8, 16); err == nil {
		t.Error("copy past the pinned buffer's end accepted")
	}
	t.Logf("2 x 8 MiB pinned copies + D2D + memset: %v", el)
}

// TestGPUUnclosedStreamIsCollected: a stream that is launched on and never
// closed must not take the process down when the garbage collector frees it
// (it once kept a runtime.Pinner alive, which panics when leaked).
func TestGPUUnclosedStreamIsCollected(t *testing.T) {
	d := cudatest.Device(t)
	k := compile(t, d, "bench.cu", "noop")
	for i := 0; i < 4; i++ {
		s, err := d.NewStream()
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Launch(k, cuda.Dim(1, 1, 1), cuda.Dim(32, 1, 1), 0); err != nil {
			t.Fatal(err)
		}
		if err := s.Synchronize(); err != nil {
			t.Fatal(err)
		}
	}
	runtime.GC()
	runtime.GC()
}

// TestGPUSyncEventOrdersStreams: a sync event (no timing) recorded on one
// stream makes another wait for its work: a copy queued on the second after
// the wait sees the first's memset; Elapsed refuses such events.
func TestGPUSyncEventOrdersStreams(t *testing.T) {
	d := cudatest.Device(t)
	s1, s2 := stream(t, d), stream(t, d)
	a, err := d.NewArena(2 << 20)
	must(t, err)
	defer a.Close()
	p, err := a.Alloc(1 << 20)
	must(t, err)
	q, err := a.Alloc(1 << 20)
	must(t, err)
	e, err := d.NewSyncEvent()
	must(t, err)
	defer e.Close()
	must(t, s1.Memset8(p, 9, 1<<20))
	must(t, s1.Record(e))
	must(t, s2.WaitEvent(e))
	must(t, s2.CopyDtoD(q, p, 1<<20))
	buf := make([]byte, 1<<20)
	must(t, s2.CopyDtoH(buf, q))
	for i, v := range buf {
		if v != 9 {
			t.Fatalf("byte %d is %d after the wait, want 9", i, v)
		}
	}
	if _, err := cuda.Elapsed(e, e); err == nil {
		t.Error("Elapsed on an event without timing: no error")
	}
}
