package cuda

// CompileCheck compiles spec for arch (e.g. "sm_90a") with NVRTC alone: no
// driver, no device and no cache. It returns NVRTC's log (ptxas resource
// usage when spec.Options asks for it). A machine without a GPU but with
// NVRTC checks every kernel instantiation this way.
func CompileCheck(spec KernelSpec, arch string) (string, error) {
	c, err := CompileCubin(spec, arch)
	return c.Log, err
}

// Compiled is a kernel instantiation NVRTC compiled without a driver.
type Compiled struct {
	Cubin   []byte
	Lowered string // the instantiation's mangled name
	Log     string // NVRTC's log (ptxas resource usage when asked for)
}

// CompileCubin is CompileCheck returning the cubin and the mangled name too
// (for nvdisasm, the SASS of a kernel on a machine without a GPU, and
// CubinParamSizes).
func CompileCubin(spec KernelSpec, arch string) (Compiled, error) {
	if err := spec.validate(); err != nil {
		return Compiled{}, err
	}
	nv, err := loadNVRTC()
	if err != nil {
		return Compiled{}, err
	}
	c, err := nv.compile(spec.fullSource(), spec.file(), spec.NameExpr(), spec.compileOptions(arch))
	if err != nil {
		if ce, ok := err.(*CompileError); ok {
			ce.Arch = arch
		}
		return Compiled{}, err
	}
	return Compiled{Cubin: c.cubin, Lowered: c.lowered, Log: c.log}, nil
}
