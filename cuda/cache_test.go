package cuda

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

const testKey = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"

func TestEntryRoundTrip(t *testing.T) {
	cubin := bytes.Repeat([]byte{0x7f, 'E', 'L', 'F', 1, 2, 3}, 100)
	data := encodeEntry(testKey, "_Z4axpyIfEvxfPKT_PS0_", cubin)
	lowered, got, err := decodeEntry(data, testKey)
	if err != nil || lowered != "_Z4axpyIfEvxfPKT_PS0_" || !bytes.Equal(got, cubin) {
		t.Fatalf("round trip: %q %d bytes %v", lowered, len(got), err)
	}
	if _, _, err := decodeEntry(data, strings.Repeat("f", 64)); !errors.Is(err, errCorruptEntry) {
		t.Errorf("entry under the wrong key accepted: %v", err)
	}
}

// TestEntryDetectsEveryCorruption flips each byte and truncates at each
// length: every damaged entry must be refused.
func TestEntryDetectsEveryCorruption(t *testing.T) {
	data := encodeEntry(testKey, "k", []byte("cubin bytes"))
	for i := range data {
		bad := bytes.Clone(data)
		bad[i] ^= 0x20
		if _, _, err := decodeEntry(bad, testKey); !errors.Is(err, errCorruptEntry) {
			t.Errorf("flipped byte %d accepted", i)
		}
	}
	for n := 0; n < len(data); n++ {
		if _, _, err := decodeEntry(data[:n], testKey); !errors.Is(err, errCorruptEntry) {
			t.Errorf("truncation to %d bytes accepted", n)
		}
	}
}

func TestDiskCacheAtomicAndCorrupt(t *testing.T) {
	dc := &diskCache{dir: filepath.Join(t.TempDir(), "a", "b")}
	if _, _, err := dc.read(testKey); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("empty cache: %v", err)
	}
	if err := dc.write(testKey, "k", []byte("one")); err != nil {
		t.Fatal(err)
	}
	if err := dc.write(testKey, "k", []byte("two")); err != nil { // overwrite in place
		t.Fatal(err)
	}
	_, cubin, err := dc.read(testKey)
	if err != nil || string(cubin) != "two" {
		t.Fatalf("read back %q, %v", cubin, err)
	}
	ents, _ := os.ReadDir(dc.dir)
	if len(ents) != 1 || ents[0].Name() != testKey+".cubin" {
		t.Errorf("cache dir holds %v; want only the entry (no temp files)", ents)
	}
	// Damage the entry: the read reports it corrupt and removes it.
	p := dc.path(testKey)
	data, _ := os.ReadFile(p)
	data[len(data)-1] ^= 1
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := dc.read(testKey); err != errCorruptEntry {
		t.Fatalf("corrupt entry: %v", err)
	}
	if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
		t.Error("corrupt entry was not removed")
	}
}

func TestDiskCacheUnwritable(t *testing.T) {
	f := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(f, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	dc := &diskCache{dir: filepath.Join(f, "sub")} // a path under a regular file
	if err := dc.write(testKey, "k", []byte("x")); err == nil {
		t.Error("write under a file should fail")
	}
}

func TestCacheDirEnv(t *testing.T) {
	t.Setenv(EnvCacheDir, "/tmp/lagc-test-cache")
	if d, err := CacheDir(); err != nil || d != "/tmp/lagc-test-cache" {
		t.Errorf("got %q %v", d, err)
	}
	t.Setenv(EnvCacheDir, "")
	d, err := CacheDir()
	if err == nil && !strings.HasSuffix(d, filepath.Join("lagc", "kernels")) {
		t.Errorf("default dir %q", d)
	}
}

// TestMemoryCacheSingleFlight: concurrent gets of one key build once; a
// failed build is not cached.
func TestMemoryCacheSingleFlight(t *testing.T) {
	var c kernelCache
	var hits atomic.Int64
	c.hits = &hits
	var builds atomic.Int32
	release := make(chan struct{})
	k := &Kernel{NameExpr: "k"}
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := c.get(context.Background(), "key", func() (*Kernel, error) {
				builds.Add(1)
				<-release
				return k, nil
			})
			if err != nil || got != k {
				t.Errorf("got %v %v", got, err)
			}
		}()
	}
	close(release)
	wg.Wait()
	if builds.Load() != 1 || hits.Load() != 7 {
		t.Errorf("builds %d hits %d; want 1 and 7", builds.Load(), hits.Load())
	}
	fail := errors.New("boom")
	if _, err := c.get(context.Background(), "bad", func() (*Kernel, error) { return nil, fail }); err != fail {
		t.Fatal(err)
	}
	got, err := c.get(context.Background(), "bad", func() (*Kernel, error) { return k, nil })
	if err != nil || got != k {
		t.Errorf("retry after failure: %v %v", got, err)
	}
}

func FuzzDecodeEntry(f *testing.F) {
	f.Add(encodeEntry(testKey, "k", []byte("cubin")))
	f.Add([]byte("LAGCKRN1"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		lowered, cubin, err := decodeEntry(data, testKey)
		if err == nil {
			// Whatever decodes must re-encode to the same bytes.
			if !bytes.Equal(encodeEntry(testKey, lowered, cubin), data) {
				t.Fatal("accepted an entry that does not re-encode identically")
			}
		}
	})
}
