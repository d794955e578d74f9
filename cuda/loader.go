package cuda

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/ebitengine/purego"
)

// Environment variables naming the libraries explicitly.
const (
	EnvCudaLib  = "LAGC_CUDA_LIB"
	EnvNVRTCLib = "LAGC_NVRTC_LIB"
)

// Libraries describes where the CUDA libraries were found.
type Libraries struct {
	Driver string // path or soname of libcuda that was loaded
	NVRTC  string // likewise for NVRTC ("" until first needed)
}

// searchDirs lists directories searched for the libraries, in order:
// LD_LIBRARY_PATH first, then the usual CUDA install locations (newest
// versioned toolkit first), then system library directories.
func searchDirs(ldPath string, glob func(string) []string) []string {
	var dirs []string
	seen := map[string]bool{}
	add := func(d string) {
		d = filepath.Clean(d)
		if d != "" && d != "." && !seen[d] {
			seen[d] = true
			dirs = append(dirs, d)
		}
	}
	for _, d := range strings.Split(ldPath, ":") {
		if d != "" {
			add(d)
		}
	}
	add("/usr/local/cuda/lib64")
	add("/usr/local/cuda/lib")
	for _, d := range glob("/usr/local/cuda/targets/*/lib") {
		add(d)
	}
	versioned := glob("/usr/local/cuda-*/lib64")
	sort.Slice(versioned, func(i, j int) bool {
		return versionLess(cudaDirVersion(versioned[j]), cudaDirVersion(versioned[i]))
	})
	for _, d := range versioned {
		add(d)
	}
	for _, d := range []string{"/usr/local/nvidia/lib64", "/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/lib/wsl/lib"} {
		add(d)
	}
	return dirs
}

// cudaDirVersion extracts [13 0] from "/usr/local/cuda-13.0/lib64".
func cudaDirVersion(dir string) []int {
	base := filepath.Base(filepath.Dir(dir))
	return parseVersion(strings.TrimPrefix(base, "cuda-"))
}

func parseVersion(s string) []int {
	var v []int
	for _, p := range strings.Split(s, ".") {
		n, err := strconv.Atoi(p)
		if err != nil {
			return v
		}
		v = append(v, n)
	}
	return v
}

func versionLess(a, b []int) bool {
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return len(a) < len(b)
}

// driverCandidates lists what to dlopen for libcuda, best first. The loader's
// libcuda.so.1 comes first: the driver registers itself there, while a CUDA
// toolkit's lib64/stubs/libcuda.so is a link-time stub that fails every call.
func driverCandidates(env string, dirs []string, exists func(string) bool) []string {
	if env != "" {
		return []string{env}
	}
	c := []string{"libcuda.so.1"}
	for _, d := range dirs {
		if strings.Contains(d, "stubs") {
			continue
		}
		for _, n := range []string{"libcuda.so.1", "libcuda.so"} {
			if p := filepath.Join(d, n); exists(p) {
				c = append(c, p)
			}
		}
	}
	return c
}

// nvrtcCandidates lists what to dlopen for NVRTC, best first: in each search
// directory libnvrtc.so.N (highest N first), then libnvrtc.so, then a fully
// versioned libnvrtc.so.N.M.P; never libnvrtc-builtins or libnvrtc.alt (a
// variant with a different C++ runtime). The loader's sonames come last.
func nvrtcCandidates(env string, dirs []string, glob func(string) []string) []string {
	if env != "" {
		return []string{env}
	}
	var c []string
	majors := map[int]bool{}
	for _, d := range dirs {
		type cand struct {
			path string
			rank int // lower is better
			ver  []int
		}
		var cs []cand
		for _, p := range glob(filepath.Join(d, "libnvrtc.so*")) {
			base := filepath.Base(p)
			switch {
			case base == "libnvrtc.so":
				cs = append(cs, cand{p, 1, nil})
			case strings.HasPrefix(base, "libnvrtc.so."):
				v := parseVersion(strings.TrimPrefix(base, "libnvrtc.so."))
				if len(v) == 0 {
					continue
				}
				majors[v[0]] = true
				rank := 0
				if len(v) > 1 {
					rank = 2
				}
				cs = append(cs, cand{p, rank, v})
			}
		}
		sort.SliceStable(cs, func(i, j int) bool {
			if cs[i].rank != cs[j].rank {
				return cs[i].rank < cs[j].rank
			}
			return versionLess(cs[j].ver, cs[i].ver)
		})
		for _, x := range cs {
			c = append(c, x.path)
		}
	}
	for _, m := range []int{13, 12} {
		majors[m] = true
	}
	var ms []int
	for m := range majors {
		ms = append(ms, m)
	}
	sort.Sort(sort.Reverse(sort.IntSlice(ms)))
	for _, m := range ms {
		c = append(c, "libnvrtc.so."+strconv.Itoa(m))
	}
	return append(c, "libnvrtc.so")
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

func globAll(pattern string) []string {
	m, _ := filepath.Glob(pattern)
	return m
}

// dlopenFirst opens the first candidate that loads and returns its handle.
func dlopenFirst(cands []string) (uintptr, string, error) {
	// dlerror is per thread: keep dlopen and purego's dlerror call on one.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var errs []string
	for _, c := range cands {
		h, err := purego.Dlopen(c, purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err == nil {
			return h, c, nil
		}
		errs = append(errs, err.Error())
	}
	return 0, "", fmt.Errorf("tried %s: %s", strings.Join(cands, ", "), lastOf(errs))
}

func lastOf(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[len(s)-1]
}

// symbols resolves names in a library into the uintptr fields pointed to.
type symbols struct {
	lib     uintptr
	libName string
	missing []string
}

func (s *symbols) need(dst *uintptr, name string) {
	p, err := purego.Dlsym(s.lib, name)
	if err != nil || p == 0 {
		s.missing = append(s.missing, name)
		return
	}
	*dst = p
}

// want resolves an optional symbol, leaving *dst zero if absent.
func (s *symbols) want(dst *uintptr, names ...string) {
	for _, n := range names {
		if p, err := purego.Dlsym(s.lib, n); err == nil && p != 0 {
			*dst = p
			return
		}
	}
}

func (s *symbols) err() error {
	if len(s.missing) == 0 {
		return nil
	}
	return fmt.Errorf("%s lacks %s (driver or toolkit too old?)", s.libName, strings.Join(s.missing, ", "))
}

var (
	driverOnce sync.Once
	driverLib  *driverAPI
	driverErr  error

	nvrtcOnce sync.Once
	nvrtcLib  *nvrtcAPI
	nvrtcErr  error

	// Names of the loaded libraries, readable without the Once.
	driverName, nvrtcName atomic.Value
)

// loadDriver loads libcuda and calls cuInit once per process.
func loadDriver() (*driverAPI, error) {
	driverOnce.Do(func() {
		cands := driverCandidates(os.Getenv(EnvCudaLib), searchDirs(os.Getenv("LD_LIBRARY_PATH"), globAll), fileExists)
		h, name, err := dlopenFirst(cands)
		if err != nil {
			driverErr = fmt.Errorf("%w (%v); set %s to its path", ErrNoDriver, err, EnvCudaLib)
			return
		}
		d, err := bindDriver(h, name)
		if err != nil {
			driverErr = fmt.Errorf("%w: %v", ErrNoDriver, err)
			return
		}
		r := d.cuInit(0)
		repairSignals() // the driver's handlers (stream.go): whatever cuInit installed gets SA_ONSTACK
		if r != resSuccess {
			e := d.err("cuInit", r)
			if r == resNoDevice || r == resInsufficientDriver || r == resNotInitialized || r == resInvalidDevice {
				driverErr = fmt.Errorf("%w: %v", ErrNoDevice, e)
			} else {
				driverErr = e
			}
			return
		}
		driverLib = d
		driverName.Store(name)
	})
	return driverLib, driverErr
}

// loadNVRTC loads NVRTC once per process.
func loadNVRTC() (*nvrtcAPI, error) {
	nvrtcOnce.Do(func() {
		cands := nvrtcCandidates(os.Getenv(EnvNVRTCLib), searchDirs(os.Getenv("LD_LIBRARY_PATH"), globAll), globAll)
		h, name, err := dlopenFirst(cands)
		if err != nil {
			nvrtcErr = fmt.Errorf("%w (%v); install the CUDA toolkit's NVRTC or set %s", ErrNoNVRTC, err, EnvNVRTCLib)
			return
		}
		n, err := bindNVRTC(h, name)
		if err != nil {
			nvrtcErr = fmt.Errorf("%w: %v", ErrNoNVRTC, err)
			return
		}
		nvrtcLib = n
		nvrtcName.Store(name)
	})
	return nvrtcLib, nvrtcErr
}

// LoadedLibraries reports which library files are in use ("" for one not
// loaded yet or not found).
func LoadedLibraries() Libraries {
	var l Libraries
	l.Driver, _ = driverName.Load().(string)
	l.NVRTC, _ = nvrtcName.Load().(string)
	return l
}
