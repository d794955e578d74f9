package cuda

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
)

// cuBLASLt, the CUDA toolkit's GEMM library, loaded through purego like the
// driver: the baseline the wgmma GEMMs are measured against
// (BenchmarkGEMMHopper's cublaslt rows), and where it loads, the runner of
// the plain bf16 prefill GEMMs lower puts on it (lower.CublasLtGEMM).
// Optional: without the library NewLt says so, HaveCublasLt is false and
// plans keep lagc's own GEMMs.

// EnvCublasLtLib names libcublasLt explicitly.
const EnvCublasLtLib = "LAGC_CUBLASLT_LIB"

// ErrNoCublasLt: no cuBLASLt library could be loaded.
var ErrNoCublasLt = errors.New("no cuBLASLt library (libcublasLt.so) could be loaded")

type cublasLtAPI struct {
	create, destroy, descCreate, descDestroy, descSet             uintptr
	layoutCreate, layoutDestroy, prefCreate, prefDestroy, prefSet uintptr
	heuristic, matmul                                             uintptr
	statusName                                                    func(int32) string
}

var (
	ltOnce sync.Once
	ltLib  *cublasLtAPI
	ltErr  error
	ltName string
)

// cublasLtCandidates lists what to dlopen, best first: per search directory
// libcublasLt.so.N (highest N first), then libcublasLt.so; then the sonames.
func cublasLtCandidates(env string, dirs []string, glob func(string) []string) []string {
	if env != "" {
		return []string{env}
	}
	var c []string
	for _, d := range dirs {
		type cand struct {
			path string
			ver  []int
		}
		var cs []cand
		for _, p := range glob(filepath.Join(d, "libcublasLt.so.*")) {
			if v := parseVersion(strings.TrimPrefix(filepath.Base(p), "libcublasLt.so.")); len(v) == 1 {
				cs = append(cs, cand{p, v})
			}
		}
		sort.Slice(cs, func(i, j int) bool { return versionLess(cs[j].ver, cs[i].ver) })
		for _, x := range cs {
			c = append(c, x.path)
		}
		if p := filepath.Join(d, "libcublasLt.so"); len(glob(p)) > 0 {
			c = append(c, p)
		}
	}
	return append(c, "libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so")
}

// HaveCublasLt reports whether cuBLASLt can be loaded (once; later calls
// are free).
func HaveCublasLt() bool {
	_, err := loadCublasLt()
	return err == nil
}

// CublasLtLibrary is the cuBLASLt library loaded (its path or soname), or
// why none could be.
func CublasLtLibrary() (string, error) {
	if _, err := loadCublasLt(); err != nil {
		return "", err
	}
	return ltName, nil
}

func loadCublasLt() (*cublasLtAPI, error) {
	ltOnce.Do(func() {
		cands := cublasLtCandidates(os.Getenv(EnvCublasLtLib), searchDirs(os.Getenv("LD_LIBRARY_PATH"), globAll), globAll)
		h, name, err := dlopenFirst(cands)
		if err != nil {
			ltErr = fmt.Errorf("%w (%v); set %s to its path", ErrNoCublasLt, err, EnvCublasLtLib)
			return
		}
		a := &cublasLtAPI{}
		s := &symbols{lib: h, libName: name}
		s.need(&a.create, "cublasLtCreate")
		s.need(&a.destroy, "cublasLtDestroy")
		s.need(&a.descCreate, "cublasLtMatmulDescCreate")
		s.need(&a.descDestroy, "cublasLtMatmulDescDestroy")
		s.need(&a.descSet, "cublasLtMatmulDescSetAttribute")
		s.need(&a.layoutCreate, "cublasLtMatrixLayoutCreate")
		s.need(&a.layoutDestroy, "cublasLtMatrixLayoutDestroy")
		s.need(&a.prefCreate, "cublasLtMatmulPreferenceCreate")
		s.need(&a.prefDestroy, "cublasLtMatmulPreferenceDestroy")
		s.need(&a.prefSet, "cublasLtMatmulPreferenceSetAttribute")
		s.need(&a.heuristic, "cublasLtMatmulAlgoGetHeuristic")
		s.need(&a.matmul, "cublasLtMatmul")
		var statusName uintptr
		s.want(&statusName, "cublasLtGetStatusName")
		if err := s.err(); err != nil {
			ltErr = fmt.Errorf("%w: %v", ErrNoCublasLt, err)
			return
		}
		if statusName != 0 { // a string result is copied by purego; errors only
			purego.RegisterFunc(&a.statusName, statusName)
		}
		ltLib, ltName = a, name
	})
	return ltLib, ltErr
}

// cuBLASLt's enumerations (cublasLt.h, library_types.h).
const (
	ltComputeF32  = 68 // CUBLAS_COMPUTE_32F
	ltR32F        = 0  // CUDA_R_32F
	ltR16BF       = 14 // CUDA_R_16BF
	ltDescTransA  = 3  // CUBLASLT_MATMUL_DESC_TRANSA
	ltDescTransB  = 4  // CUBLASLT_MATMUL_DESC_TRANSB
	ltOpN, ltOpT  = 0, 1
	ltPrefMaxWS   = 1 // CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES
	ltWorkspace   = LtWorkspaceBytes
	ltHeuristicSz = 96 // sizeof(cublasLtMatmulHeuristicResult_t): algo[64], workspaceSize, state, wavesCount, reserved[4]
)

func (a *cublasLtAPI) err(fn string, st int32) error {
	if st == 0 {
		return nil
	}
	name := ""
	if a.statusName != nil {
		name = " " + a.statusName(st)
	}
	return fmt.Errorf("cuda: %s failed: cuBLAS status %d%s", fn, st, name)
}

// LtWorkspaceBytes is the device memory an Lt holds for cuBLASLt's
// workspace.
const LtWorkspaceBytes = 32 << 20

// Lt is a cuBLASLt handle with its workspace on one device.
type Lt struct {
	dev   *Device
	api   *cublasLtAPI
	h     uintptr
	ws    DevicePtr
	mu    sync.Mutex
	plans map[ltKey]*ltPlan
}

type ltKey struct {
	T, N, K int
	y       DType
}

// ltPlan is one GEMM shape's descriptors and the algorithm the heuristic
// chose for it.
type ltPlan struct {
	desc, a, b, c uintptr
	heur          [ltHeuristicSz]byte
}

// NewLt loads cuBLASLt and creates a handle and a 32 MiB workspace on d.
func (d *Device) NewLt() (*Lt, error) {
	api, err := loadCublasLt()
	if err != nil {
		return nil, err
	}
	l := &Lt{dev: d, api: api, plans: map[ltKey]*ltPlan{}}
	if err := d.do(func() error {
		r := ncall(api.create, uintptr(unsafe.Pointer(&l.h)))
		repairSignals() // as after NVRTC's first compile (nvrtc.go): cheap, and no handler is left without SA_ONSTACK
		return api.err("cublasLtCreate", r)
	}); err != nil {
		return nil, err
	}
	if l.ws, err = d.Alloc(ltWorkspace); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// Close destroys the handle, the plans and the workspace.
func (l *Lt) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var first error
	keep := func(err error) {
		if first == nil {
			first = err
		}
	}
	keep(l.dev.do(func() error {
		for _, p := range l.plans {
			l.api.free(p)
		}
		l.plans = map[ltKey]*ltPlan{}
		if l.h != 0 {
			r := ncall(l.api.destroy, l.h)
			l.h = 0
			return l.api.err("cublasLtDestroy", r)
		}
		return nil
	}))
	if l.ws != 0 {
		keep(l.dev.Free(l.ws))
		l.ws = 0
	}
	return first
}

// GEMM queues y [T, N] = x [T, K] w^T on s (y += ... with accumulate), with
// w [N, K]: bf16 x and w (row-major), f32 accumulation, y bf16 or f32
// (row-major). In cuBLAS's column-major terms that is
// y^T [N, T] = op_T(w^T [K, N]) x^T [K, T] (+ y^T).
func (l *Lt) GEMM(s *Stream, T, N, K int, x, w, y DevicePtr, yt DType, accumulate bool) error {
	if T <= 0 || N <= 0 || K <= 0 {
		return fmt.Errorf("cuda: cuBLASLt GEMM of %d x %d x %d", T, N, K)
	}
	ytype := uintptr(ltR16BF)
	switch yt {
	case BF16:
	case F32:
		ytype = ltR32F
	default:
		return fmt.Errorf("cuda: cuBLASLt GEMM into %s (bf16 or f32)", yt)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.h == 0 {
		return fmt.Errorf("cuda: cuBLASLt handle is closed")
	}
	return l.dev.do(func() error {
		key := ltKey{T, N, K, yt}
		p := l.plans[key]
		if p == nil {
			var err error
			if p, err = l.plan(T, N, K, ytype); err != nil {
				return err
			}
			l.plans[key] = p
		}
		alpha, beta := float32(1), float32(0)
		if accumulate {
			beta = 1
		}
		r := ncall(l.api.matmul, l.h, p.desc, uintptr(unsafe.Pointer(&alpha)), uintptr(w), p.a, uintptr(x), p.b,
			uintptr(unsafe.Pointer(&beta)), uintptr(y), p.c, uintptr(y), p.c, uintptr(unsafe.Pointer(&p.heur[0])),
			uintptr(l.ws), uintptr(ltWorkspace), s.h)
		return l.api.err("cublasLtMatmul", r)
	})
}

// free destroys a plan's descriptors (those made).
func (a *cublasLtAPI) free(p *ltPlan) {
	if p.desc != 0 {
		ncall(a.descDestroy, p.desc)
	}
	for _, m := range []uintptr{p.a, p.b, p.c} {
		if m != 0 {
			ncall(a.layoutDestroy, m)
		}
	}
}

// plan makes the descriptors of one shape and asks the heuristic for its
// best algorithm (called with the context bound).
func (l *Lt) plan(T, N, K int, ytype uintptr) (*ltPlan, error) {
	a := l.api
	p := &ltPlan{}
	ok := false
	defer func() {
		if !ok {
			a.free(p)
		}
	}()
	if r := ncall(a.descCreate, uintptr(unsafe.Pointer(&p.desc)), ltComputeF32, ltR32F); r != 0 {
		return nil, a.err("cublasLtMatmulDescCreate", r)
	}
	opT, opN := int32(ltOpT), int32(ltOpN)
	for _, at := range []struct {
		attr uintptr
		v    *int32
	}{{ltDescTransA, &opT}, {ltDescTransB, &opN}} {
		if r := ncall(a.descSet, p.desc, at.attr, uintptr(unsafe.Pointer(at.v)), 4); r != 0 {
			return nil, a.err("cublasLtMatmulDescSetAttribute", r)
		}
	}
	for _, m := range []struct {
		dst            *uintptr
		typ            uintptr
		rows, cols, ld int
	}{{&p.a, ltR16BF, K, N, K}, {&p.b, ltR16BF, K, T, K}, {&p.c, ytype, N, T, N}} {
		if r := ncall(a.layoutCreate, uintptr(unsafe.Pointer(m.dst)), m.typ, uintptr(m.rows), uintptr(m.cols), uintptr(m.ld)); r != 0 {
			return nil, a.err("cublasLtMatrixLayoutCreate", r)
		}
	}
	var pref uintptr
	if r := ncall(a.prefCreate, uintptr(unsafe.Pointer(&pref))); r != 0 {
		return nil, a.err("cublasLtMatmulPreferenceCreate", r)
	}
	defer ncall(a.prefDestroy, pref)
	wsb := uint64(ltWorkspace)
	if r := ncall(a.prefSet, pref, ltPrefMaxWS, uintptr(unsafe.Pointer(&wsb)), 8); r != 0 {
		return nil, a.err("cublasLtMatmulPreferenceSetAttribute", r)
	}
	var n int32
	if r := ncall(a.heuristic, l.h, p.desc, p.a, p.b, p.c, p.c, pref, 1, uintptr(unsafe.Pointer(&p.heur[0])),
		uintptr(unsafe.Pointer(&n))); r != 0 {
		return nil, a.err("cublasLtMatmulAlgoGetHeuristic", r)
	}
	if n < 1 {
		return nil, fmt.Errorf("cuda: cuBLASLt has no algorithm for a %d x %d x %d bf16 GEMM", T, N, K)
	}
	if ws := *(*uint64)(unsafe.Pointer(&p.heur[64])); ws > ltWorkspace {
		return nil, fmt.Errorf("cuda: cuBLASLt's algorithm wants %d bytes of workspace (%d held)", ws, ltWorkspace)
	}
	ok = true
	return p, nil
}

// GEMMLt queues l.GEMM on s (so that a Stream is an exec/gpu Queue).
func (s *Stream) GEMMLt(l *Lt, T, N, K int, x, w, y DevicePtr, yt DType, accumulate bool) error {
	return l.GEMM(s, T, N, K, x, w, y, yt, accumulate)
}
