package wcache

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/zeebo/xxh3"

	"lagc/ckpt"
	"lagc/internal/cachedir"
	"lagc/internal/fsutil"
)

// Sum is a content hash: XXH3-128 of the bytes, in hex.
type Sum string

func sumOf(b []byte) Sum {
	s := xxh3.Hash128(b).Bytes()
	return Sum(hex.EncodeToString(s[:]))
}

// Hasher gives the content hashes of checkpoint tensors, memoised per file
// by its identity (path, size, modification and change times, inode and
// device, as git's index and ccache's direct mode do): a tensor of an
// unchanged file is not read again, and any change to the file re-hashes
// it. The memo lives in small sidecar files under SourcesDir; Save writes
// what was learnt. Safe for concurrent use.
type Hasher struct {
	dir string // "" keeps the memo in memory only

	mu    sync.Mutex
	files map[string]*memoFile // by absolute path

	hashed, memoised int64 // bytes hashed, bytes whose hash came from the memo
}

// SourcesDir is where a cache in dir keeps its memo files.
func SourcesDir(dir string) string { return filepath.Join(dir, "sources") }

// NewHasher returns a Hasher whose memo is kept in dir ("" for none).
func NewHasher(dir string) *Hasher { return &Hasher{dir: dir, files: map[string]*memoFile{}} }

// memoFile is the memo of one checkpoint file; it is what a sidecar holds.
type memoFile struct {
	mu     sync.Mutex
	Path   string         `json:"path"`
	ID     identity       `json:"identity"`
	Hashes map[string]Sum `json:"hashes"` // "offset+length" -> Sum
	dirty  bool
	mtime  time.Time
}

// maxMemo bounds a sidecar read (a 48-layer checkpoint's is ~100 KB).
const maxMemo = 64 << 20

// Sum returns the content hash of a tensor stored as exts (its bytes are
// their concatenation): the hash of the bytes for one extent, else the
// hash of each extent's length and hash.
func (h *Hasher) Sum(exts []ckpt.Extent) (Sum, error) {
	if len(exts) == 1 {
		return h.extent(exts[0])
	}
	d := xxh3.New128()
	for _, e := range exts {
		s, err := h.extent(e)
		if err != nil {
			return "", err
		}
		var n [8]byte
		binary.LittleEndian.PutUint64(n[:], uint64(len(e.Data)))
		d.Write(n[:])
		d.Write([]byte(s))
	}
	s := d.Sum128().Bytes()
	return Sum(hex.EncodeToString(s[:])), nil
}

func (h *Hasher) extent(e ckpt.Extent) (Sum, error) {
	if e.Info == nil || e.Path == "" {
		h.count(&h.hashed, len(e.Data))
		return sumOf(e.Data), nil
	}
	m, err := h.file(e.Path, e.Info)
	if err != nil {
		return "", err
	}
	k := strconv.FormatInt(e.Offset, 10) + "+" + strconv.Itoa(len(e.Data))
	m.mu.Lock()
	s, ok := m.Hashes[k]
	m.mu.Unlock()
	if ok {
		h.count(&h.memoised, len(e.Data))
		return s, nil
	}
	s = sumOf(e.Data)
	h.count(&h.hashed, len(e.Data))
	m.mu.Lock()
	m.Hashes[k], m.dirty = s, true
	m.mu.Unlock()
	return s, nil
}

func (h *Hasher) count(c *int64, n int) {
	h.mu.Lock()
	*c += int64(n)
	h.mu.Unlock()
}

// Bytes returns the bytes hashed so far and those whose hash came from the
// memo.
func (h *Hasher) Bytes() (hashed, memoised int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.hashed, h.memoised
}

// file returns the memo of the file at path as info describes it: the
// sidecar's when it is of the same identity, else an empty one.
func (h *Hasher) file(path string, info os.FileInfo) (*memoFile, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("weight cache: %w", err)
	}
	id := identityOf(info)
	h.mu.Lock()
	defer h.mu.Unlock()
	if m, ok := h.files[abs]; ok && m.ID == id {
		return m, nil
	}
	m := h.load(abs)
	if m == nil || m.Path != abs || m.ID != id || m.Hashes == nil {
		m = &memoFile{Path: abs, ID: id, Hashes: map[string]Sum{}}
	}
	m.mtime = info.ModTime()
	h.files[abs] = m
	return m, nil
}

func (h *Hasher) sidecar(abs string) string {
	s := sha256.Sum256([]byte(abs))
	return hex.EncodeToString(s[:16]) + ".json"
}

// load reads the sidecar of abs; nil when there is none or it does not
// parse (it is only a memo: the file is hashed again).
func (h *Hasher) load(abs string) *memoFile {
	if h.dir == "" {
		return nil
	}
	b, err := fsutil.ReadFile(filepath.Join(h.dir, h.sidecar(abs)), maxMemo)
	if err != nil {
		return nil
	}
	var m memoFile
	if json.Unmarshal(b, &m) != nil {
		return nil
	}
	return &m
}

// racyWindow: a file modified this close to when its hashes were taken
// may change again within its timestamp's granularity without changing
// its identity, so its memo is not kept (git's "racily clean" entries).
const racyWindow = 2 * time.Second

// Save writes the memo files that learnt new hashes, each atomically.
func (h *Hasher) Save() error {
	if h.dir == "" {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for abs, m := range h.files {
		m.mu.Lock()
		if !m.dirty || time.Since(m.mtime) < racyWindow {
			m.mu.Unlock()
			continue
		}
		b, err := json.Marshal(m)
		m.dirty = false
		m.mu.Unlock()
		if err != nil {
			return fmt.Errorf("weight cache: %w", err)
		}
		if err := cachedir.Write(h.dir, h.sidecar(abs), func(w io.Writer) error {
			_, err := w.Write(b)
			return err
		}); err != nil {
			return fmt.Errorf("weight cache: %w", err)
		}
	}
	return nil
}
