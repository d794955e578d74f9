// Package wcache is the on-disk cache of converted weights: a weight in the
// layout the device reads (repacked quantised blocks, converted or derived
// floats), stored under a key that hashes everything that shapes its bytes
// (the source tensors' contents, the conversion and layout versions, dtype,
// layout, shape, transform), so a later load copies it to the device
// instead of converting again.
//
// Entries are written atomically (a temporary file beside the entry,
// synced, renamed), carry XXH3-128 checksums of header and payload that are
// verified on every read, and are read back through mmap. A damaged entry
// is removed and reported as ErrCorrupt; the caller rebuilds it. Content
// hashes of the checkpoint files are memoised by file identity (Hasher), so
// a warm load does not read its sources at all.
//
// Like the kernel cache, the directory must be writable only by its owner:
// an entry planted there with valid checksums is loaded as the weight.
package wcache

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"lagc/internal/cachedir"
	"lagc/internal/fsutil"
	"lagc/internal/mmap"
)

// EntrySuffix ends the names of entries: KEY.weight.
const EntrySuffix = ".weight"

// Key names an entry: the hex SHA-256 of what shapes its bytes.
type Key string

// KeyOf hashes v's JSON encoding (struct fields in declaration order, map
// keys sorted: deterministic) into a Key.
func KeyOf(v any) (Key, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("weight cache key: %w", err)
	}
	s := sha256.Sum256(b)
	return Key(hex.EncodeToString(s[:])), nil
}

func (k Key) valid() bool {
	if len(k) != 64 {
		return false
	}
	_, err := hex.DecodeString(string(k))
	return err == nil
}

// Cache is a weight cache directory. Its methods may be called from
// several goroutines at once; several processes may share a directory.
type Cache struct {
	dir   string
	sweep sync.Once
}

// Open returns the cache in dir (created on the first write).
func Open(dir string) *Cache { return &Cache{dir: dir} }

// Default is the cache at cachedir.Weights() ($LAGC_CACHE_DIR/weights).
func Default() (*Cache, error) {
	d, err := cachedir.Weights()
	if err != nil {
		return nil, fmt.Errorf("weight cache: %w", err)
	}
	return Open(d), nil
}

// Dir is the cache's directory.
func (c *Cache) Dir() string { return c.dir }

func (c *Cache) path(k Key) string { return filepath.Join(c.dir, string(k)+EntrySuffix) }

// Entry is a verified entry mapped into memory.
type Entry struct {
	Meta  Meta
	Data  []byte // the payload: read-only, valid until Close
	unmap func() error
}

// Close unmaps the entry.
func (e *Entry) Close() error {
	if e.unmap == nil {
		return nil
	}
	err := e.unmap()
	e.unmap, e.Data = nil, nil
	return err
}

// Get maps the entry of k and verifies it. A missing entry gives an error
// wrapping fs.ErrNotExist; one that fails verification (not a regular
// file, a bad header or checksum, stored under another key) is removed
// and gives an error wrapping ErrCorrupt. A hit marks the entry used now
// (its modification time: Trim evicts the least recently used).
func (c *Cache) Get(k Key) (*Entry, error) {
	if !k.valid() {
		return nil, fmt.Errorf("weight cache: malformed key %q", k)
	}
	c.sweep.Do(func() { cachedir.SweepTemps(c.dir) })
	p := c.path(k)
	e, err := mapEntry(p, k)
	if errors.Is(err, ErrCorrupt) {
		_ = os.Remove(p)
	}
	if err != nil {
		return nil, err
	}
	now := time.Now()
	_ = os.Chtimes(p, now, now)
	return e, nil
}

// mapEntry maps and verifies the entry at p (stored under key k, when k
// is not "").
func mapEntry(p string, k Key) (*Entry, error) {
	st, err := os.Lstat(p)
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: %s is not a regular file", ErrCorrupt, p)
	}
	f, err := fsutil.OpenRegular(p)
	if err != nil {
		return nil, err
	}
	data, unmap, err := mmap.Map(f)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("weight cache: %s: %w", p, err)
	}
	h, err := decodeHeader(data[:min(len(data), fixedHead+maxMeta)], int64(len(data)))
	if err == nil && k != "" && h.meta.Key != string(k) {
		err = fmt.Errorf("%w: the entry is for key %.16s…, not %.16s…", ErrCorrupt, h.meta.Key, k)
	}
	if err == nil {
		err = verifyPayload(h, data[h.payloadOff:])
	}
	if err != nil {
		_ = unmap()
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	return &Entry{Meta: h.meta, Data: data[h.payloadOff:], unmap: unmap}, nil
}

// Put stores payload as the entry of k, atomically: a concurrent reader or
// a crash sees the previous entry or the whole new one, never a part.
func (c *Cache) Put(k Key, meta Meta, payload []byte) error {
	if !k.valid() {
		return fmt.Errorf("weight cache: malformed key %q", k)
	}
	meta.Key = string(k)
	if meta.Created.IsZero() {
		meta.Created = time.Now().UTC()
	}
	err := cachedir.Write(c.dir, string(k)+EntrySuffix, func(w io.Writer) error {
		return writeEntry(w, meta, payload)
	})
	if err != nil {
		return fmt.Errorf("weight cache: %w", err)
	}
	return nil
}

// Info is an entry as List finds it.
type Info struct {
	Path string
	Size int64
	Used time.Time // last written or read
	Meta Meta      // from the header (zero when Err is set)
	Err  error     // the header is damaged (the payload is not checked: Verify)
}

// List returns the entries, least recently used first, with their
// headers (payloads are not read).
func (c *Cache) List() ([]Info, error) {
	ents, err := os.ReadDir(c.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("weight cache: %w", err)
	}
	var out []Info
	for _, de := range ents {
		if !strings.HasSuffix(de.Name(), EntrySuffix) || de.IsDir() {
			continue
		}
		st, err := de.Info()
		if err != nil {
			continue // removed meanwhile
		}
		in := Info{Path: filepath.Join(c.dir, de.Name()), Size: st.Size(), Used: st.ModTime()}
		in.Meta, in.Err = readHeader(in.Path, st)
		out = append(out, in)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Used.Before(out[j].Used) })
	return out, nil
}

func readHeader(p string, st fs.FileInfo) (Meta, error) {
	if !st.Mode().IsRegular() {
		return Meta{}, fmt.Errorf("%w: not a regular file", ErrCorrupt)
	}
	f, err := fsutil.OpenRegular(p)
	if err != nil {
		return Meta{}, err
	}
	defer f.Close()
	head := make([]byte, min(st.Size(), fixedHead+maxMeta))
	if _, err := io.ReadFull(f, head); err != nil {
		return Meta{}, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	h, err := decodeHeader(head, st.Size())
	if err == nil && h.meta.Key+EntrySuffix != filepath.Base(p) {
		err = fmt.Errorf("%w: stored under another key", ErrCorrupt)
	}
	return h.meta, err
}

// Verify reads the entry at path whole and checks it (header, key, payload
// checksum); it does not remove a damaged one.
func Verify(path string) error {
	k := Key(strings.TrimSuffix(filepath.Base(path), EntrySuffix))
	if !k.valid() {
		return fmt.Errorf("%w: %s is not named by a key", ErrCorrupt, path)
	}
	e, err := mapEntry(path, k)
	if err != nil {
		return err
	}
	return e.Close()
}

// Trim removes the least recently used entries until the entries take at
// most limit bytes, sparing those used at or after keep (the current load's).
// It returns the bytes removed, and the bytes still above limit when only
// spared entries are left.
func (c *Cache) Trim(limit int64, keep time.Time) (removed, over int64, err error) {
	list, err := c.List()
	if err != nil {
		return 0, 0, err
	}
	var total int64
	for _, in := range list {
		total += in.Size
	}
	for _, in := range list {
		if total <= limit {
			break
		}
		if !in.Used.Before(keep) {
			continue
		}
		if err := os.Remove(in.Path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return removed, 0, fmt.Errorf("weight cache: %w", err)
		}
		total -= in.Size
		removed += in.Size
	}
	return removed, max(total-limit, 0), nil
}
