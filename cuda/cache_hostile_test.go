//go:build unix

package cuda

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"lagc/internal/atomicfile"
	"lagc/internal/cachedir"
	"lagc/internal/fixture"
)

// TestDiskCacheNotRegular: a named pipe at an entry's path blocked the read
// forever; it is treated as a corrupt entry and removed.
func TestDiskCacheNotRegular(t *testing.T) {
	dc := &diskCache{dir: t.TempDir()}
	fixture.FIFO(t, dc.path(testKey))
	done := make(chan error, 1)
	go func() {
		_, _, err := dc.read(testKey)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, errCorruptEntry) {
			t.Errorf("read: %v, want errCorruptEntry", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("read of a named pipe blocked")
	}
	if _, err := os.Lstat(dc.path(testKey)); !errors.Is(err, os.ErrNotExist) {
		t.Error("the named pipe was not removed")
	}
}

// TestDiskCacheOversized: an entry larger than any cubin is refused by its
// size, before it is read (it was read whole, then checked).
func TestDiskCacheOversized(t *testing.T) {
	dc := &diskCache{dir: t.TempDir()}
	f, err := os.Create(dc.path(testKey))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(1<<30 + 1<<20); err != nil { // sparse: no disk used
		t.Fatal(err)
	}
	f.Close()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, _, err = dc.read(testKey)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, errCorruptEntry) {
		t.Errorf("read: %v, want errCorruptEntry", err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 16<<20 {
		t.Errorf("reading an oversized entry allocated %d MiB", got>>20)
	}
}

// TestDiskCacheSweepsTemps: temporary files of killed writers are removed
// once stale; a fresh one (a writer at work) is kept.
func TestDiskCacheSweepsTemps(t *testing.T) {
	dc := &diskCache{dir: t.TempDir()}
	stale := filepath.Join(dc.dir, testKey+EntrySuffix+".0011223344556677"+atomicfile.TempSuffix)
	fresh := filepath.Join(dc.dir, testKey+EntrySuffix+".8899aabbccddeeff"+atomicfile.TempSuffix)
	for _, p := range []string{stale, fresh} {
		if err := os.WriteFile(p, []byte("partial"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-2 * cachedir.StaleTemp)
	if err := os.Chtimes(stale, old, old); err != nil {
		t.Fatal(err)
	}
	if _, _, err := dc.read(testKey); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("read: %v", err)
	}
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Error("the stale temporary file was kept")
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Errorf("the fresh temporary file was removed: %v", err)
	}
}
