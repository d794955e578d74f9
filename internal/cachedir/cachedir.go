// Package cachedir is where lagc keeps its on-disk caches (compiled
// kernels, converted weights, the bundled model) and how entries are
// written there: into a temporary file beside the entry, synced, then
// renamed over it, so a reader sees a whole entry or none.
package cachedir

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"lagc/internal/atomicfile"
)

// Env overrides the cache root.
const Env = "LAGC_CACHE_DIR"

// Root is lagc's cache root: $LAGC_CACHE_DIR, else os.UserCacheDir()/lagc.
func Root() (string, error) {
	if d := os.Getenv(Env); d != "" {
		return d, nil
	}
	base, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no user cache directory (set %s): %w", Env, err)
	}
	return filepath.Join(base, "lagc"), nil
}

// Kernels is the compiled-kernel cache: $LAGC_CACHE_DIR itself when set,
// else Root()/kernels.
func Kernels() (string, error) {
	if d := os.Getenv(Env); d != "" {
		return d, nil
	}
	r, err := Root()
	if err != nil {
		return "", err
	}
	return filepath.Join(r, "kernels"), nil
}

// Weights is the converted-weight cache: Root()/weights.
func Weights() (string, error) {
	r, err := Root()
	if err != nil {
		return "", err
	}
	return filepath.Join(r, "weights"), nil
}

// StaleTemp is the age after which a temporary file is taken to belong to
// a writer that was killed (a large weight entry takes seconds to write).
const StaleTemp = time.Hour

// IsTemp reports whether a file name is that of an entry being written.
func IsTemp(name string) bool { return strings.HasSuffix(name, atomicfile.TempSuffix) }

// SweepTemps removes dir's temporary files older than StaleTemp.
func SweepTemps(dir string) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if !IsTemp(e.Name()) || e.IsDir() {
			continue
		}
		if info, err := e.Info(); err == nil && time.Since(info.ModTime()) > StaleTemp {
			_ = os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}

// Write stores an entry at dir/name atomically: write fills a temporary
// file beside it, which is synced and renamed over the name only when
// write succeeds; on any error nothing is left behind.
func Write(dir, name string, write func(w io.Writer) error) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := atomicfile.Create(filepath.Join(dir, name))
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Abort()
		return fmt.Errorf("writing %s: %w", f.Path, err)
	}
	return f.Commit()
}
