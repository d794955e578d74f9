package models

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"embed"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"sync"

	"lagc/ckpt"
	"lagc/internal/cachedir"
)

// The bundled model: a small Laguna-architecture MoE trained on Go source
// (training/README.md), so that lagc says something on a machine without a
// checkpoint. models/tiny is an ordinary HF checkpoint directory.
//
//go:embed tiny
var bundledRoot embed.FS

// EnvCacheDir names the environment variable that overrides lagc's cache
// root (default os.UserCacheDir()/lagc); the bundled model is extracted
// under ROOT/bundled/HASH.
const EnvCacheDir = cachedir.Env

type bundledFile struct {
	name string
	data []byte
	sum  [sha256.Size]byte
}

type bundledIndex struct {
	files []bundledFile // sorted by name
	hash  string        // hex SHA-256 over names, sizes and contents
}

var bundledOnce = sync.OnceValues(func() (*bundledIndex, error) {
	sub, err := fs.Sub(bundledRoot, "tiny")
	if err != nil {
		return nil, fmt.Errorf("bundled model: %w", err)
	}
	idx := &bundledIndex{}
	err = fs.WalkDir(sub, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := fs.ReadFile(sub, path)
		if err != nil {
			return err
		}
		idx.files = append(idx.files, bundledFile{name: path, data: data, sum: sha256.Sum256(data)})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("bundled model: %w", err)
	}
	sort.Slice(idx.files, func(i, j int) bool { return idx.files[i].name < idx.files[j].name })
	h := sha256.New()
	for _, f := range idx.files {
		var n [8]byte
		binary.LittleEndian.PutUint64(n[:], uint64(len(f.data)))
		h.Write([]byte(f.name))
		h.Write([]byte{0})
		h.Write(n[:])
		h.Write(f.sum[:])
	}
	idx.hash = hex.EncodeToString(h.Sum(nil))
	return idx, nil
})

// BundledFS returns the bundled model's files (config.json,
// model.safetensors, tokenizer.json, tokenizer_config.json,
// chat_template.jinja, golden.json) at the root of the file system.
func BundledFS() fs.FS {
	sub, err := fs.Sub(bundledRoot, "tiny")
	if err != nil { // "tiny" is a valid constant path: cannot happen
		return bundledRoot
	}
	return sub
}

// BundledHash returns the content hash (hex SHA-256) of the bundled model;
// its first 16 digits name the extraction directory.
func BundledHash() (string, error) {
	idx, err := bundledOnce()
	if err != nil {
		return "", err
	}
	return idx.hash, nil
}

// CacheRoot returns lagc's cache root: $LAGC_CACHE_DIR if set, else
// os.UserCacheDir()/lagc.
func CacheRoot() (string, error) { return cachedir.Root() }

// BundledName is how messages name the bundled model.
const BundledName = "bundled model"

// OpenBundled opens the bundled model: from the cache, extracted there
// first if needed (ExtractBundled), or, when the cache cannot be written,
// from the copy embedded in the binary, read into memory. cacheErr says why
// the cache was not used (nil when it was).
func OpenBundled() (ck ckpt.Checkpoint, cacheErr, err error) {
	dir, cacheErr := ExtractBundled()
	if cacheErr == nil {
		ck, err = ckpt.Open(dir)
		return ck, nil, err
	}
	ck, err = ckpt.OpenFS(BundledFS(), BundledName)
	return ck, cacheErr, err
}

// ExtractBundled writes the bundled model into CacheRoot()/bundled/HASH
// (HASH: the first 16 hex digits of BundledHash) and returns that directory,
// ready for ckpt.Open. Files already there are reused when every one has the
// embedded size and SHA-256; otherwise the directory is rebuilt. Writes go to
// a temporary directory renamed into place, so concurrent callers (threads
// or processes) never see a partial directory.
func ExtractBundled() (string, error) {
	root, err := CacheRoot()
	if err != nil {
		return "", fmt.Errorf("bundled model: %w", err)
	}
	return ExtractBundledTo(root)
}

// ExtractBundledTo is ExtractBundled with an explicit cache root.
func ExtractBundledTo(root string) (string, error) {
	idx, err := bundledOnce()
	if err != nil {
		return "", err
	}
	parent := filepath.Join(root, "bundled")
	dir := filepath.Join(parent, idx.hash[:16])
	if idx.verify(dir) == nil {
		return dir, nil
	}
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return "", fmt.Errorf("bundled model: creating cache directory: %w", err)
	}
	tmp, err := os.MkdirTemp(parent, ".tmp-"+idx.hash[:16]+"-")
	if err != nil {
		return "", fmt.Errorf("bundled model: %w", err)
	}
	defer os.RemoveAll(tmp) // no-op once renamed into place
	if err := idx.write(tmp); err != nil {
		return "", fmt.Errorf("bundled model: extracting to %s: %w", parent, err)
	}
	// Up to a few rounds: another process may replace dir between our steps.
	for attempt := 0; attempt < 3; attempt++ {
		if err := os.Rename(tmp, dir); err == nil {
			return dir, nil
		}
		if idx.verify(dir) == nil {
			return dir, nil // a concurrent extraction won; its files are good
		}
		// dir holds a damaged or partial copy: move it aside, then retry.
		old := fmt.Sprintf("%s.old-%s", dir, randomSuffix())
		if err := os.Rename(dir, old); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("bundled model: replacing damaged %s: %w", dir, err)
		}
		os.RemoveAll(old)
	}
	if err := idx.verify(dir); err != nil {
		return "", fmt.Errorf("bundled model: could not install %s: %w", dir, err)
	}
	return dir, nil
}

// write creates every bundled file in dir, synced to disk.
func (idx *bundledIndex) write(dir string) error {
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	for _, f := range idx.files {
		p := filepath.Join(dir, filepath.FromSlash(f.name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		out, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			return err
		}
		_, err = out.Write(f.data)
		if err == nil {
			err = out.Sync()
		}
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("writing %s: %w", f.name, err)
		}
	}
	return nil
}

// verify reports the first bundled file in dir that is missing or differs
// from the embedded copy.
func (idx *bundledIndex) verify(dir string) error {
	for _, f := range idx.files {
		p := filepath.Join(dir, filepath.FromSlash(f.name))
		in, err := os.Open(p)
		if err != nil {
			return err
		}
		h := sha256.New()
		n, err := io.Copy(h, in)
		in.Close()
		if err != nil {
			return fmt.Errorf("reading %s: %w", p, err)
		}
		if n != int64(len(f.data)) || !bytes.Equal(h.Sum(nil), f.sum[:]) {
			return fmt.Errorf("%s differs from the bundled copy", p)
		}
	}
	return nil
}

func randomSuffix() string {
	var b [6]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	return hex.EncodeToString(b[:])
}
