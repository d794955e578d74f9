package cuda

import (
	"fmt"
	"unsafe"
)

// Kernel is a compiled kernel instantiation loaded into a device.
type Kernel struct {
	dev      *Device
	Key      string // CacheKey of its spec
	NameExpr string // e.g. "axpy<half_t>"
	Lowered  string // the mangled symbol NVRTC gave it
	Log      string // NVRTC warnings from the compile ("" from the disk cache)
	mod, fn  uintptr
	// params are the kernel's parameter sizes in bytes, nil where the driver
	// cannot report them (before CUDA 12.4).
	params []int
}

func (d *Device) loadKernel(spec KernelSpec, key, lowered string, cubin []byte, log string) (*Kernel, error) {
	k := &Kernel{dev: d, Key: key, NameExpr: spec.NameExpr(), Lowered: lowered, Log: log}
	cName := cBytes(lowered)
	err := d.do(func() error {
		if err := d.api.err("cuModuleLoadData", call(d.api.moduleLoadData, uintptr(unsafe.Pointer(&k.mod)), uintptr(unsafe.Pointer(&cubin[0])))); err != nil {
			return fmt.Errorf("loading %s: %w", k.NameExpr, err)
		}
		if err := d.api.err("cuModuleGetFunction", call(d.api.moduleGetFunction, uintptr(unsafe.Pointer(&k.fn)), k.mod, uintptr(unsafe.Pointer(&cName[0])))); err != nil {
			call(d.api.moduleUnload, k.mod)
			return fmt.Errorf("finding %s (%s): %w", k.NameExpr, lowered, err)
		}
		if d.api.funcGetParamInfo != 0 {
			k.params = []int{}
			for i := 0; ; i++ {
				var off, size uint64
				if call(d.api.funcGetParamInfo, k.fn, uintptr(i), uintptr(unsafe.Pointer(&off)), uintptr(unsafe.Pointer(&size))) != resSuccess {
					break
				}
				k.params = append(k.params, int(size))
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return k, nil
}

// NumParams is the kernel's parameter count, or -1 if the driver cannot say.
func (k *Kernel) NumParams() int {
	if k.params == nil {
		return -1
	}
	return len(k.params)
}

// KernelAttrs are a compiled kernel's resource use.
type KernelAttrs struct {
	MaxThreadsPerBlock int
	StaticShared       int // bytes
	LocalBytes         int // per thread (spills, stack)
	Registers          int // per thread
	MaxDynamicShared   int // bytes currently allowed
}

// CUfunction_attribute numbers.
const (
	funcAttrMaxThreads       = 0
	funcAttrSharedSize       = 1
	funcAttrLocalSize        = 3
	funcAttrNumRegs          = 4
	funcAttrMaxDynamicShared = 8
)

// Attrs reads the kernel's resource use from the driver.
func (k *Kernel) Attrs() (KernelAttrs, error) {
	var a KernelAttrs
	err := k.dev.do(func() error {
		for _, x := range []struct {
			attr int
			dst  *int
		}{
			{funcAttrMaxThreads, &a.MaxThreadsPerBlock}, {funcAttrSharedSize, &a.StaticShared},
			{funcAttrLocalSize, &a.LocalBytes}, {funcAttrNumRegs, &a.Registers},
			{funcAttrMaxDynamicShared, &a.MaxDynamicShared},
		} {
			var v int32
			if err := k.dev.api.err("cuFuncGetAttribute", call(k.dev.api.funcGetAttribute, uintptr(unsafe.Pointer(&v)), uintptr(x.attr), k.fn)); err != nil {
				return err
			}
			*x.dst = int(v)
		}
		return nil
	})
	return a, err
}

// SetMaxDynamicShared lets launches of k use up to bytes of dynamic shared
// memory (needed above 48 KiB).
func (k *Kernel) SetMaxDynamicShared(bytes int) error {
	return k.dev.do(func() error {
		return k.dev.api.err("cuFuncSetAttribute", call(k.dev.api.funcSetAttribute, k.fn, funcAttrMaxDynamicShared, uintptr(bytes)))
	})
}
