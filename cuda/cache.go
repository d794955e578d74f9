package cuda

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"lagc/internal/cachedir"
	"lagc/internal/fsutil"
)

// EnvCacheDir overrides the on-disk kernel cache directory.
const EnvCacheDir = cachedir.Env

// CacheDir is where compiled kernels are kept: $LAGC_CACHE_DIR, else
// os.UserCacheDir()/lagc/kernels.
func CacheDir() (string, error) {
	d, err := cachedir.Kernels()
	if err != nil {
		return "", fmt.Errorf("cuda: %w", err)
	}
	return d, nil
}

// CacheStats counts how Compile calls were served.
type CacheStats struct {
	MemoryHits      int64 // served from the in-memory map
	DiskHits        int64 // loaded from an on-disk entry
	Compiles        int64 // compiled by NVRTC
	Corrupt         int64 // on-disk entries that failed verification and were rebuilt
	DiskWriteErrors int64 // entries that could not be written (the kernel still works)
}

type cacheCounters struct {
	memHits, diskHits, compiles, corrupt, diskWriteErrors atomic.Int64
}

func (c *cacheCounters) snapshot() CacheStats {
	return CacheStats{c.memHits.Load(), c.diskHits.Load(), c.compiles.Load(), c.corrupt.Load(), c.diskWriteErrors.Load()}
}

// kernelCache is the in-memory map, with one build in flight per key.
type kernelCache struct {
	mu sync.Mutex
	m  map[string]*kentry
	// hits counts memory hits; set by the owning Device.
	hits *atomic.Int64
}

type kentry struct {
	done chan struct{}
	k    *Kernel
	err  error
}

func (c *kernelCache) get(ctx context.Context, key string, build func() (*Kernel, error)) (*Kernel, error) {
	c.mu.Lock()
	if c.m == nil {
		c.m = map[string]*kentry{}
	}
	if e, ok := c.m[key]; ok {
		c.mu.Unlock()
		select {
		case <-e.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if e.err != nil {
			return nil, e.err
		}
		if c.hits != nil {
			c.hits.Add(1)
		}
		return e.k, nil
	}
	e := &kentry{done: make(chan struct{})}
	c.m[key] = e
	c.mu.Unlock()

	e.k, e.err = build()
	if e.err != nil {
		// Failures are not cached: a cancelled or fixed build may be retried.
		c.mu.Lock()
		delete(c.m, key)
		c.mu.Unlock()
	}
	close(e.done)
	return e.k, e.err
}

// all returns the built kernels (for unloading).
func (c *kernelCache) all() []*Kernel {
	c.mu.Lock()
	defer c.mu.Unlock()
	var ks []*Kernel
	for _, e := range c.m {
		select {
		case <-e.done:
			if e.k != nil {
				ks = append(ks, e.k)
			}
		default:
		}
	}
	return ks
}

func (c *kernelCache) reset() {
	c.mu.Lock()
	c.m = nil
	c.mu.Unlock()
}

// On-disk entry layout, all integers little-endian:
//
//	magic   [8]byte  "LAGCKRN1"
//	sum     [32]byte SHA-256 of everything after it
//	keyLen  uint32, key   (hex cache key: guards against a misnamed file)
//	nameLen uint32, name  (lowered kernel name)
//	binLen  uint64, cubin
//
// Files are written to a temporary name and renamed into place, so readers
// see a whole entry or none; the checksum catches anything else (a torn
// write after a crash, bit rot, a truncated copy).
var entryMagic = [8]byte{'L', 'A', 'G', 'C', 'K', 'R', 'N', '1'}

var errCorruptEntry = errors.New("cuda: corrupt kernel cache entry")

// maxCubin bounds a decoded entry so a corrupt length cannot exhaust memory
// (a kernel's cubin is kilobytes to a few megabytes), and maxEntry the file
// read, checked before reading it.
const (
	maxCubin = 256 << 20
	maxEntry = maxCubin + 1<<20
)

func encodeEntry(key, lowered string, cubin []byte) []byte {
	var body bytes.Buffer
	putStr := func(s string) {
		_ = binary.Write(&body, binary.LittleEndian, uint32(len(s)))
		body.WriteString(s)
	}
	putStr(key)
	putStr(lowered)
	_ = binary.Write(&body, binary.LittleEndian, uint64(len(cubin)))
	body.Write(cubin)
	sum := sha256.Sum256(body.Bytes())
	out := make([]byte, 0, 40+body.Len())
	out = append(out, entryMagic[:]...)
	out = append(out, sum[:]...)
	return append(out, body.Bytes()...)
}

// decodeEntry verifies an entry and returns its lowered name and cubin.
func decodeEntry(data []byte, wantKey string) (string, []byte, error) {
	if len(data) < 40 || !bytes.Equal(data[:8], entryMagic[:]) {
		return "", nil, fmt.Errorf("%w: bad header", errCorruptEntry)
	}
	body := data[40:]
	if sum := sha256.Sum256(body); !bytes.Equal(sum[:], data[8:40]) {
		return "", nil, fmt.Errorf("%w: checksum mismatch", errCorruptEntry)
	}
	getStr := func() (string, bool) {
		if len(body) < 4 {
			return "", false
		}
		n := binary.LittleEndian.Uint32(body)
		body = body[4:]
		if uint64(n) > uint64(len(body)) {
			return "", false
		}
		s := string(body[:n])
		body = body[n:]
		return s, true
	}
	key, ok1 := getStr()
	lowered, ok2 := getStr()
	if !ok1 || !ok2 || len(body) < 8 {
		return "", nil, fmt.Errorf("%w: truncated", errCorruptEntry)
	}
	n := binary.LittleEndian.Uint64(body)
	body = body[8:]
	if n > maxCubin || n != uint64(len(body)) || n == 0 || lowered == "" {
		return "", nil, fmt.Errorf("%w: bad cubin length", errCorruptEntry)
	}
	if key != wantKey {
		return "", nil, fmt.Errorf("%w: entry is for key %.16s…, not %.16s…", errCorruptEntry, key, wantKey)
	}
	return lowered, body, nil
}

// diskCache is the on-disk kernel cache. Its directory must be trusted: a
// cubin planted there that matches its key and checksum is loaded and run.
// What is checked guards against accidents, not an attacker: an entry that
// is not a regular file (a named pipe would block the read) or is larger
// than maxEntry is treated as corrupt, and temporary files left by killed
// writers are removed.
type diskCache struct {
	dir   string
	sweep sync.Once
}

// EntrySuffix ends the names of kernel cache entries.
const EntrySuffix = ".cubin"

func (c *diskCache) path(key string) string { return filepath.Join(c.dir, key+EntrySuffix) }

// sweepTemps removes temporary files of killed writers, once per cache.
func (c *diskCache) sweepTemps() {
	c.sweep.Do(func() { cachedir.SweepTemps(c.dir) })
}

// read returns the entry for key; errCorruptEntry (after removing the file)
// if it is not a regular file, too large or fails verification;
// os.ErrNotExist-wrapping errors if absent.
func (c *diskCache) read(key string) (string, []byte, error) {
	c.sweepTemps()
	st, err := os.Lstat(c.path(key))
	if err != nil {
		return "", nil, err
	}
	if !st.Mode().IsRegular() || st.Size() > maxEntry {
		_ = os.Remove(c.path(key))
		return "", nil, errCorruptEntry
	}
	data, err := fsutil.ReadFile(c.path(key), maxEntry)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil, err
	}
	if err != nil {
		_ = os.Remove(c.path(key))
		return "", nil, errCorruptEntry
	}
	lowered, cubin, err := decodeEntry(data, key)
	if err != nil {
		_ = os.Remove(c.path(key))
		return "", nil, errCorruptEntry
	}
	return lowered, cubin, nil
}

// write stores an entry atomically (cachedir.Write).
func (c *diskCache) write(key, lowered string, cubin []byte) error {
	c.sweepTemps()
	err := cachedir.Write(c.dir, key+EntrySuffix, func(w io.Writer) error {
		_, err := w.Write(encodeEntry(key, lowered, cubin))
		return err
	})
	if err != nil {
		return fmt.Errorf("cuda: kernel cache: %w", err)
	}
	return nil
}

// WriteCacheEntry stores a kernel's cubin in the kernel cache in dir under
// key, as a compile does (for tools that fill or test a cache).
func WriteCacheEntry(dir, key, kernel string, cubin []byte) error {
	if len(key) < 16 || kernel == "" || len(cubin) == 0 || len(cubin) > maxCubin {
		return fmt.Errorf("cuda: kernel cache entry: a key, a kernel name and 1 to %d bytes of cubin are needed", maxCubin)
	}
	return (&diskCache{dir: dir}).write(key, kernel, cubin)
}

// CacheEntry is one kernel cache entry, as ReadCacheEntry found it.
type CacheEntry struct {
	Key    string // the cache key (hex SHA-256 of the kernel's full signature)
	Kernel string // the lowered kernel name
	Cubin  int    // bytes of machine code
}

// ReadCacheEntry reads and verifies the kernel cache entry at path (for
// lagc cache): its checksum, and that it is stored under its own key.
func ReadCacheEntry(path string) (CacheEntry, error) {
	st, err := os.Lstat(path)
	if err != nil {
		return CacheEntry{}, err
	}
	if !st.Mode().IsRegular() || st.Size() > maxEntry {
		return CacheEntry{}, fmt.Errorf("%w: not a regular file of at most %d bytes", errCorruptEntry, int64(maxEntry))
	}
	data, err := fsutil.ReadFile(path, maxEntry)
	if err != nil {
		return CacheEntry{}, err
	}
	key := strings.TrimSuffix(filepath.Base(path), EntrySuffix)
	lowered, cubin, err := decodeEntry(data, key)
	if err != nil {
		return CacheEntry{}, err
	}
	return CacheEntry{Key: key, Kernel: lowered, Cubin: len(cubin)}, nil
}
