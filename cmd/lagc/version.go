package main

import (
	"flag"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"lagc/cuda"
)

func init() {
	register(&command{
		name:    "version",
		summary: "print lagc's version and commit, the Go version, and whether the CUDA driver, NVRTC and cuBLASLt are found",
		usage:   "version (or lagc --version)",
		setup: func(fs *flag.FlagSet) func([]string) error {
			return func(args []string) error {
				if len(args) != 0 {
					return fmt.Errorf("%w: unexpected arguments %q", errUsage, args)
				}
				writeVersion(runIO.out)
				return nil
			}
		},
	})
}

// writeVersion prints what a bug report needs: the build (module version,
// VCS commit), the Go toolchain, and the CUDA libraries, found without
// opening a device.
func writeVersion(w io.Writer) {
	version, commit := "unknown", "unknown (built without VCS information)"
	if bi, ok := debug.ReadBuildInfo(); ok {
		version = bi.Main.Version
		set := map[string]string{}
		for _, s := range bi.Settings {
			set[s.Key] = s.Value
		}
		if rev := set["vcs.revision"]; rev != "" {
			commit = rev
			if t := set["vcs.time"]; t != "" {
				commit += " (" + t + ")"
			}
			if set["vcs.modified"] == "true" {
				commit += ", with uncommitted changes"
			}
		}
	}
	fmt.Fprintf(w, "lagc %s\n", version)
	fmt.Fprintf(w, "commit: %s\n", commit)
	fmt.Fprintf(w, "go: %s %s/%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
	if v, err := cuda.DriverVersion(); err != nil {
		fmt.Fprintf(w, "CUDA driver: not found: %v\n", err)
	} else {
		fmt.Fprintf(w, "CUDA driver: %s (CUDA %d.%d)\n", cuda.LoadedLibraries().Driver, v/1000, v%1000/10)
	}
	if v, err := cuda.NVRTCVersion(); err != nil {
		fmt.Fprintf(w, "NVRTC: not found: %v\n", err)
	} else {
		fmt.Fprintf(w, "NVRTC: %s (%s)\n", cuda.LoadedLibraries().NVRTC, v)
	}
	if name, err := cuda.CublasLtLibrary(); err != nil {
		fmt.Fprintf(w, "cuBLASLt (optional): not found: %v\n", err)
	} else {
		fmt.Fprintf(w, "cuBLASLt (optional): %s; on Hopper it runs prefill's plain bf16 GEMMs (LAGC_CUBLASLT=0: lagc's own)\n", name)
	}
}
