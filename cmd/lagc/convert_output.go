package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"lagc/internal/fsutil"
)

// checkOutput refuses an output path convert must not write: a directory,
// anything but a regular file (a device, a pipe, a socket), a symbolic link
// (replacing the link or writing through it would both surprise), a path in
// a directory that does not exist, or a file the conversion reads.
func checkOutput(out string, inputs []string) error {
	st, err := os.Lstat(out)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		dir := filepath.Dir(out)
		dst, err := os.Stat(dir)
		if err != nil {
			return fmt.Errorf("%w: -o %s: the directory %s: %v", errUsage, out, dir, err)
		}
		if !dst.IsDir() {
			return fmt.Errorf("%w: -o %s: %s is %s, not a directory", errUsage, out, dir, fsutil.Kind(dst.Mode()))
		}
		return nil
	case err != nil:
		return fmt.Errorf("%w: -o %s: %v", errUsage, out, err)
	case st.IsDir():
		return fmt.Errorf("%w: -o %s is a directory; give the file to write, e.g. %s", errUsage, out, filepath.Join(out, "model.gguf"))
	case st.Mode()&fs.ModeSymlink != 0:
		target, _ := os.Readlink(out)
		return fmt.Errorf("%w: -o %s is a symbolic link (to %s); give the path of the file itself", errUsage, out, target)
	case !st.Mode().IsRegular():
		return fmt.Errorf("%w: -o %s is %s, not a regular file", errUsage, out, fsutil.Kind(st.Mode()))
	}
	for _, in := range inputs {
		if ist, err := os.Stat(in); err == nil && os.SameFile(st, ist) {
			return fmt.Errorf("%w: -o %s is %s, which the conversion reads", errUsage, out, in)
		}
	}
	return nil
}
