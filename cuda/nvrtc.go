package cuda

import (
	"fmt"
	"runtime"
	"unsafe"

	"github.com/ebitengine/purego"
)

// nvrtcAPI holds the NVRTC entry points.
type nvrtcAPI struct {
	name         string
	major, minor int

	version, createProgram, destroyProgram, compileProgram uintptr
	getLogSize, getLog, getCUBINSize, getCUBIN             uintptr
	addNameExpression, getLoweredName                      uintptr
	getErrorString                                         func(int32) string
}

func bindNVRTC(lib uintptr, name string) (*nvrtcAPI, error) {
	n := &nvrtcAPI{name: name}
	s := &symbols{lib: lib, libName: name}
	var errStr uintptr
	s.need(&n.version, "nvrtcVersion")
	s.need(&n.createProgram, "nvrtcCreateProgram")
	s.need(&n.destroyProgram, "nvrtcDestroyProgram")
	s.need(&n.compileProgram, "nvrtcCompileProgram")
	s.need(&n.getLogSize, "nvrtcGetProgramLogSize")
	s.need(&n.getLog, "nvrtcGetProgramLog")
	s.need(&n.getCUBINSize, "nvrtcGetCUBINSize")
	s.need(&n.getCUBIN, "nvrtcGetCUBIN")
	s.need(&n.addNameExpression, "nvrtcAddNameExpression")
	s.need(&n.getLoweredName, "nvrtcGetLoweredName")
	s.need(&errStr, "nvrtcGetErrorString")
	if err := s.err(); err != nil {
		return nil, err
	}
	// A string result is copied by purego; this call is off the hot path.
	purego.RegisterFunc(&n.getErrorString, errStr)
	var maj, min int32
	if r := ncall(n.version, uintptr(unsafe.Pointer(&maj)), uintptr(unsafe.Pointer(&min))); r != 0 {
		return nil, n.err("nvrtcVersion", r)
	}
	n.major, n.minor = int(maj), int(min)
	return n, nil
}

// ncall is call for NVRTC (nvrtcResult); see call for uintptrescapes.
//
//go:uintptrescapes
func ncall(fn uintptr, args ...uintptr) int32 {
	r, _, _ := purego.SyscallN(fn, args...)
	return int32(r)
}

func (n *nvrtcAPI) err(fn string, r int32) error {
	if r == 0 {
		return nil
	}
	return &NVRTCError{Func: fn, Code: r, Name: n.getErrorString(r)}
}

// Version is NVRTC's "major.minor".
func (n *nvrtcAPI) Version() string { return fmt.Sprintf("%d.%d", n.major, n.minor) }

// nvrtcCompileProgram's result for a program with errors.
const nvrtcErrorCompilation = 6

// compiled is NVRTC's output for one name expression.
type compiled struct {
	cubin   []byte
	lowered string // mangled name of the instantiation
	log     string // warnings, if any
}

// compile runs NVRTC on src (file name used in diagnostics) for the given
// options and returns the cubin and the lowered name of nameExpr.
func (n *nvrtcAPI) compile(src, file, nameExpr string, options []string) (*compiled, error) {
	var pinner runtime.Pinner
	defer pinner.Unpin()
	// "&name<args>" is the canonical form: the address of the __global__.
	cSrc, cFile, cExpr := cBytes(src), cBytes(file), cBytes("&"+nameExpr)

	var prog uintptr
	if r := ncall(n.createProgram, uintptr(unsafe.Pointer(&prog)), uintptr(unsafe.Pointer(&cSrc[0])),
		uintptr(unsafe.Pointer(&cFile[0])), 0, 0, 0); r != 0 {
		return nil, n.err("nvrtcCreateProgram", r)
	}
	defer ncall(n.destroyProgram, uintptr(unsafe.Pointer(&prog)))
	if r := ncall(n.addNameExpression, prog, uintptr(unsafe.Pointer(&cExpr[0]))); r != 0 {
		return nil, n.err("nvrtcAddNameExpression", r)
	}

	// The option array holds Go pointers to Go memory: pin them for C.
	opts := make([]*byte, len(options)+1)
	for i, o := range options {
		b := cBytes(o)
		pinner.Pin(&b[0])
		opts[i] = &b[0]
	}
	r := ncall(n.compileProgram, prog, uintptr(len(options)), uintptr(unsafe.Pointer(&opts[0])))
	// NVRTC's first compile installs handlers of SIGINT, SIGTERM and
	// SIGXFSZ without SA_ONSTACK (CUDA 13; the driver does the same at the
	// first programmatic launch, stream.go), and Go's runtime then dies of
	// the next interrupt: add the flag. Later compiles leave them as they
	// are, so this costs some 64 system calls a compile.
	repairSignals()
	log, lerr := n.programLog(prog)
	if r == nvrtcErrorCompilation {
		if lerr != nil {
			return nil, lerr
		}
		return nil, &CompileError{Kernel: nameExpr, Log: log, Excerpt: logExcerpt(log, file, src)}
	}
	if r != 0 {
		return nil, fmt.Errorf("%w\n%s", n.err("nvrtcCompileProgram", r), log)
	}

	var size uint64
	if r := ncall(n.getCUBINSize, prog, uintptr(unsafe.Pointer(&size))); r != 0 {
		return nil, n.err("nvrtcGetCUBINSize", r)
	}
	if size == 0 {
		return nil, fmt.Errorf("cuda: NVRTC produced no cubin for %s (is a real sm_XX architecture given?)", nameExpr)
	}
	cubin := make([]byte, size)
	if r := ncall(n.getCUBIN, prog, uintptr(unsafe.Pointer(&cubin[0]))); r != 0 {
		return nil, n.err("nvrtcGetCUBIN", r)
	}
	var lowered *byte
	if r := ncall(n.getLoweredName, prog, uintptr(unsafe.Pointer(&cExpr[0])), uintptr(unsafe.Pointer(&lowered))); r != 0 {
		return nil, n.err("nvrtcGetLoweredName", r)
	}
	// The lowered name lives in the program: copy it before destroying that.
	return &compiled{cubin: cubin, lowered: cString(lowered), log: log}, nil
}

func (n *nvrtcAPI) programLog(prog uintptr) (string, error) {
	var size uint64
	if r := ncall(n.getLogSize, prog, uintptr(unsafe.Pointer(&size))); r != 0 {
		return "", n.err("nvrtcGetProgramLogSize", r)
	}
	if size <= 1 {
		return "", nil
	}
	buf := make([]byte, size)
	if r := ncall(n.getLog, prog, uintptr(unsafe.Pointer(&buf[0]))); r != 0 {
		return "", n.err("nvrtcGetProgramLog", r)
	}
	for len(buf) > 0 && buf[len(buf)-1] == 0 {
		buf = buf[:len(buf)-1]
	}
	return string(buf), nil
}
