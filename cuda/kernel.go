package cuda

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
)

//go:embed kernels/*.cu kernels/*.cuh
var kernelFS embed.FS

// Source returns an embedded kernel source file, e.g. Source("matmul.cu").
func Source(file string) (string, error) {
	b, err := kernelFS.ReadFile("kernels/" + file)
	if err != nil {
		return "", fmt.Errorf("cuda: no embedded kernel source %q: %w", file, err)
	}
	return string(b), nil
}

// SourceFiles lists the embedded kernel sources.
func SourceFiles() []string {
	ents, _ := fs.ReadDir(kernelFS, "kernels")
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// KernelSpec names one instantiation of a kernel template.
type KernelSpec struct {
	Name   string // the __global__ function (template) in Source
	Source string // CUDA C++; kernels/prelude.cuh is put in front of it
	File   string // file name for diagnostics; default Name+".cu"
	// DTypes are the template's type arguments, in order ("every dtype it is
	// instantiated for"); Ints are non-type arguments that follow them (tile
	// sizes, head dims). Both empty: a plain, non-template kernel.
	DTypes  []DType
	Ints    []int64
	Options []string // extra NVRTC options, e.g. "-DTILE=64"
}

// EmbeddedSpec builds a spec for kernel name in the embedded file.
func EmbeddedSpec(file, name string, dtypes ...DType) (KernelSpec, error) {
	src, err := Source(file)
	if err != nil {
		return KernelSpec{}, err
	}
	return KernelSpec{Name: name, Source: src, File: file, DTypes: dtypes}, nil
}

func (s KernelSpec) file() string {
	if s.File != "" {
		return s.File
	}
	return s.Name + ".cu"
}

// NameExpr is the C++ name expression NVRTC instantiates, e.g.
// "axpy<half_t>" or "gemv<bf16_t, float, 128>".
func (s KernelSpec) NameExpr() string {
	if len(s.DTypes) == 0 && len(s.Ints) == 0 {
		return s.Name
	}
	var args []string
	for _, d := range s.DTypes {
		args = append(args, d.CType())
	}
	for _, n := range s.Ints {
		args = append(args, strconv.FormatInt(n, 10))
	}
	return s.Name + "<" + strings.Join(args, ", ") + ">"
}

func (s KernelSpec) validate() error {
	if !isIdent(s.Name) {
		return fmt.Errorf("cuda: kernel name %q is not a C++ identifier", s.Name)
	}
	if strings.TrimSpace(s.Source) == "" {
		return fmt.Errorf("cuda: kernel %s has no source", s.Name)
	}
	for i, d := range s.DTypes {
		if !d.valid() {
			return fmt.Errorf("cuda: kernel %s: dtype %d is invalid (%d)", s.Name, i, d)
		}
	}
	if strings.ContainsAny(s.file(), "\"\n\\") {
		return fmt.Errorf("cuda: kernel file name %q has quotes, backslashes or newlines", s.file())
	}
	return nil
}

func isIdent(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range s {
		if c != '_' && !(c >= 'a' && c <= 'z') && !(c >= 'A' && c <= 'Z') && !(i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// fullSource is the exact text given to NVRTC: the prelude, then a #line
// directive so diagnostics carry the kernel file's own line numbers.
func (s KernelSpec) fullSource() string {
	prelude, _ := Source("prelude.cuh")
	return prelude + "\n#line 1 \"" + s.file() + "\"\n" + s.Source
}

// compileOptions are the NVRTC options for arch followed by the spec's own.
func (s KernelSpec) compileOptions(arch string) []string {
	opts := []string{"--gpu-architecture=" + arch, "--std=c++17", "-lineinfo"}
	return append(opts, s.Options...)
}

// keyText is the canonical description of everything that shapes the cubin.
// A cache keyed by less (by name alone) once ran an f32 kernel on f16 data.
func keyText(s KernelSpec, arch, nvrtcVersion string) string {
	dts := make([]string, len(s.DTypes))
	for i, d := range s.DTypes {
		dts[i] = d.String()
	}
	opts, _ := json.Marshal(s.compileOptions(arch)) // unambiguous list encoding
	src := sha256.Sum256([]byte(s.fullSource()))
	return strings.Join([]string{
		"lagc kernel cache v1",
		"name: " + s.Name,
		"dtypes: " + strings.Join(dts, ","),
		"instantiation: " + s.NameExpr(),
		"arch: " + arch,
		"options: " + string(opts),
		"source-sha256: " + hex.EncodeToString(src[:]),
		"nvrtc: " + nvrtcVersion,
	}, "\n") + "\n"
}

// CacheKey is the hex SHA-256 of the kernel's full signature: name, dtypes
// and other template arguments, target architecture, compile options, a hash
// of the source (with the prelude) and the NVRTC version. It names the
// on-disk cache entry.
func CacheKey(s KernelSpec, arch, nvrtcVersion string) string {
	h := sha256.Sum256([]byte(keyText(s, arch, nvrtcVersion)))
	return hex.EncodeToString(h[:])
}

// Compile returns the kernel instantiation spec describes, compiled for d's
// architecture, from the in-memory cache, the on-disk cache or NVRTC. Two
// calls with the same signature share one *Kernel; concurrent calls compile
// once. A compile error is a *CompileError carrying NVRTC's log.
func (d *Device) Compile(ctx context.Context, spec KernelSpec) (*Kernel, error) {
	if err := spec.validate(); err != nil {
		return nil, err
	}
	nv, err := loadNVRTC()
	if err != nil {
		return nil, err
	}
	key := CacheKey(spec, d.arch, nv.Version())
	return d.kernels.get(ctx, key, func() (*Kernel, error) {
		return d.build(ctx, nv, spec, key)
	})
}

// NVRTCVersion loads NVRTC if needed and returns its "major.minor".
func NVRTCVersion() (string, error) {
	nv, err := loadNVRTC()
	if err != nil {
		return "", err
	}
	return nv.Version(), nil
}

// build finds the cubin on disk or compiles it, then loads it.
func (d *Device) build(ctx context.Context, nv *nvrtcAPI, spec KernelSpec, key string) (*Kernel, error) {
	dc := d.diskCache()
	if dc != nil {
		lowered, cubin, err := dc.read(key)
		switch {
		case err == nil:
			k, lerr := d.loadKernel(spec, key, lowered, cubin, "")
			if lerr == nil {
				d.stats.diskHits.Add(1)
				return k, nil
			}
			d.stats.corrupt.Add(1) // unloadable despite its checksum: rebuild
		case err == errCorruptEntry:
			d.stats.corrupt.Add(1)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c, err := nv.compile(spec.fullSource(), spec.file(), spec.NameExpr(), spec.compileOptions(d.arch))
	if err != nil {
		if ce, ok := err.(*CompileError); ok {
			ce.Arch = d.arch
		}
		return nil, err
	}
	d.stats.compiles.Add(1)
	if dc != nil {
		if err := dc.write(key, c.lowered, c.cubin); err != nil {
			d.stats.diskWriteErrors.Add(1)
		}
	}
	return d.loadKernel(spec, key, c.lowered, c.cubin, c.log)
}
