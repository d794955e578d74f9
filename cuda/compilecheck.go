package cuda

// CompileCheck compiles spec for arch (e.g. "sm_90a") with NVRTC alone: no
// driver, no device and no cache. It returns NVRTC's log (ptxas resource
// usage when spec.Options asks for it). A machine without a GPU but with
// NVRTC checks every kernel instantiation this way.
func CompileCheck(spec KernelSpec, arch string) (string, error) {
	_, log, err := CompileCubin(spec, arch)
	return log, err
}

// CompileCubin is CompileCheck returning the cubin too (for nvdisasm: the
// SASS of a kernel on a machine without a GPU).
func CompileCubin(spec KernelSpec, arch string) (cubin []byte, log string, err error) {
	if err := spec.validate(); err != nil {
		return nil, "", err
	}
	nv, err := loadNVRTC()
	if err != nil {
		return nil, "", err
	}
	c, err := nv.compile(spec.fullSource(), spec.file(), spec.NameExpr(), spec.compileOptions(arch))
	if err != nil {
		if ce, ok := err.(*CompileError); ok {
			ce.Arch = arch
		}
		return nil, "", err
	}
	return c.cubin, c.log, nil
}
