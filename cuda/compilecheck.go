package cuda

// CompileCheck compiles spec for arch (e.g. "sm_90a") with NVRTC alone: no
// driver, no device and no cache. It returns NVRTC's log (ptxas resource
// usage when spec.Options asks for it). A machine without a GPU but with
// NVRTC checks every kernel instantiation this way.
func CompileCheck(spec KernelSpec, arch string) (string, error) {
	if err := spec.validate(); err != nil {
		return "", err
	}
	nv, err := loadNVRTC()
	if err != nil {
		return "", err
	}
	c, err := nv.compile(spec.fullSource(), spec.file(), spec.NameExpr(), spec.compileOptions(arch))
	if err != nil {
		if ce, ok := err.(*CompileError); ok {
			ce.Arch = arch
		}
		return "", err
	}
	return c.log, nil
}
