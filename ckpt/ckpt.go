// Package ckpt reads Laguna checkpoints (Hugging Face safetensors
// directories and GGUF files) through mmap, presents their weights under the
// canonical names and shapes of docs/CONTRACTS.md, checks them against the
// model configuration, and writes GGUF files.
package ckpt

import (
	"errors"
	"fmt"
	"io/fs"
	"lagc/config"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"lagc/internal/fsutil"
	"lagc/internal/mmap"
)

// TensorInfo describes one canonical tensor.
type TensorInfo struct {
	Name  string // canonical (GGUF) name, e.g. "blk.3.attn_q.weight"
	DType DType
	Shape []int // PyTorch order, outermost first
	Size  int64 // bytes in DType
}

// Elements returns the number of elements of the tensor.
func (t TensorInfo) Elements() int64 {
	n, _ := numElements(t.Shape)
	return n
}

// Checkpoint is an opened model: its configuration and its weights. Its
// methods may be called from several goroutines at once, except Close.
type Checkpoint interface {
	// Config returns the model configuration read from the checkpoint's metadata.
	Config() *config.Config
	// Tensors lists every canonical tensor in a stable order (globals, then
	// blocks in order).
	Tensors() []TensorInfo
	// Tensor looks one tensor up by canonical name.
	Tensor(name string) (TensorInfo, bool)
	// ReadF32 returns a fresh float32 copy of a tensor: f16 and bf16 are
	// converted exactly, quantised types dequantised as gguf-py does. It
	// holds the whole tensor in float32: executors keep large quantised
	// weights as Raw blocks instead.
	ReadF32(name string) ([]float32, error)
	// Raw returns the tensor's bytes in its stored DType (for quantised
	// types, its blocks, row after row: package quant reads them). For a
	// tensor stored in one piece this is the mapped file memory itself:
	// read-only, valid until Close. Stacked expert tensors are assembled
	// into a new buffer.
	Raw(name string) ([]byte, error)
	// Format is "safetensors" or "gguf"; Path is what Open was given.
	Format() string
	Path() string
	// Metadata returns the GGUF key/value metadata (nil for safetensors).
	Metadata() map[string]any
	// Source says where a canonical tensor comes from, for messages.
	Source(name string) string
	Close() error
}

// Open opens a checkpoint: a Hugging Face directory (config.json with
// model.safetensors, or shards listed in model.safetensors.index.json), or
// a .gguf file. The result has been checked with Validate (configuration,
// element types); the tensors a model reads are checked against its graph
// (engine.BindCheckpoint).
func Open(path string) (Checkpoint, error) {
	ck, err := OpenUnchecked(path)
	if err != nil {
		return nil, err
	}
	if err := Validate(ck); err != nil {
		ck.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return ck, nil
}

// OpenUnchecked opens a checkpoint without Validate: for tools that inspect
// broken checkpoints. Everything it returns is still bounds-checked.
func OpenUnchecked(path string) (Checkpoint, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("opening checkpoint: %w", err)
	}
	if st.IsDir() {
		return openHF(path)
	}
	if strings.HasSuffix(path, ".safetensors") || filepath.Base(path) == "config.json" ||
		filepath.Base(path) == "model.safetensors.index.json" {
		return openHF(filepath.Dir(path))
	}
	return openGGUF(path)
}

// mappedFile is one file mapped into memory.
type mappedFile struct {
	path  string
	data  []byte
	unmap func() error
	info  os.FileInfo // of the file mapped (nil for one read from an fs.FS)
}

func mapPath(path string) (*mappedFile, error) {
	f, err := fsutil.OpenRegular(path) // a named pipe would block the open
	if err != nil {
		return nil, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	data, unmap, err := mmap.Map(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &mappedFile{path: path, data: data, unmap: unmap, info: info}, nil
}

// piece is a byte range of a mapped file; a canonical tensor is the
// concatenation of its pieces (one, except for stacked or split experts).
type piece struct {
	file   *mappedFile
	off, n int64
}

func (p piece) bytes() []byte { return p.file.data[p.off : p.off+p.n : p.off+p.n] }

type entry struct {
	info   TensorInfo
	pieces []piece
	source string
}

// checkpoint is the one implementation of Checkpoint for both formats.
type checkpoint struct {
	path, format string
	cfg          *config.Config
	entries      map[string]*entry
	order        []string
	files        []*mappedFile
	meta         map[string]any
	dir          fs.FS // the files of a checkpoint opened with OpenFS
	closed       bool
}

func (c *checkpoint) Config() *config.Config   { return c.cfg }
func (c *checkpoint) Format() string           { return c.format }
func (c *checkpoint) Path() string             { return c.path }
func (c *checkpoint) Metadata() map[string]any { return c.meta }

func (c *checkpoint) Tensors() []TensorInfo {
	out := make([]TensorInfo, 0, len(c.order))
	for _, n := range c.order {
		out = append(out, c.entries[n].info)
	}
	return out
}

func (c *checkpoint) Tensor(name string) (TensorInfo, bool) {
	e, ok := c.entries[name]
	if !ok {
		return TensorInfo{}, false
	}
	return e.info, true
}

func (c *checkpoint) Source(name string) string {
	if e, ok := c.entries[name]; ok {
		return e.source
	}
	return ""
}

func (c *checkpoint) lookup(name string) (*entry, error) {
	if c.closed {
		return nil, errors.New("checkpoint is closed")
	}
	e, ok := c.entries[name]
	if !ok {
		return nil, fmt.Errorf("no tensor %q in %s", name, c.path)
	}
	return e, nil
}

func (c *checkpoint) Raw(name string) ([]byte, error) {
	e, err := c.lookup(name)
	if err != nil {
		return nil, err
	}
	if len(e.pieces) == 1 {
		return e.pieces[0].bytes(), nil
	}
	out := make([]byte, 0, e.info.Size)
	for _, p := range e.pieces {
		out = append(out, p.bytes()...)
	}
	return out, nil
}

// Extent is a byte range of a checkpoint file holding part of a tensor's
// stored bytes.
type Extent struct {
	Path   string
	Info   os.FileInfo // the file as it was opened (fstat); nil when not read from disk
	Offset int64
	Data   []byte // the mapped bytes: read-only, valid until Close
}

// Extents returns where the stored bytes of tensor name lie, in order: Raw
// is their concatenation. ckpt.Checkpoint values returned by Open have it;
// callers keying caches by file identity use it to avoid copies.
func (c *checkpoint) Extents(name string) ([]Extent, error) {
	e, err := c.lookup(name)
	if err != nil {
		return nil, err
	}
	out := make([]Extent, len(e.pieces))
	for i, p := range e.pieces {
		out[i] = Extent{Path: p.file.path, Info: p.file.info, Offset: p.off, Data: p.bytes()}
	}
	return out, nil
}

func (c *checkpoint) ReadF32(name string) ([]float32, error) {
	e, err := c.lookup(name)
	if err != nil {
		return nil, err
	}
	d := e.info.DType
	if !d.Supported() {
		return nil, fmt.Errorf("%s (%s): %w", name, e.source, decodeInto(nil, nil, d))
	}
	out := make([]float32, e.info.Elements())
	be, bb := int64(d.BlockElems()), int64(d.BlockBytes())
	at := int64(0)
	for _, p := range e.pieces {
		n := p.n / bb * be
		if err := decodeInto(out[at:at+n], p.bytes(), d); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		at += n
	}
	return out, nil
}

func (c *checkpoint) Close() error {
	if c.closed {
		return nil
	}
	c.closed = true
	var errs []error
	for _, f := range c.files {
		if err := f.unmap(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", f.path, err))
		}
	}
	return errors.Join(errs...)
}

// add registers a canonical tensor, rejecting a second source for one name.
func (c *checkpoint) add(e *entry) error {
	if old, dup := c.entries[e.info.Name]; dup {
		return fmt.Errorf("%s is given twice: by %s and by %s", e.info.Name, old.source, e.source)
	}
	c.entries[e.info.Name] = e
	return nil
}

// sortOrder fixes the order of Tensors: globals, then blocks in order, each
// block in the order of blockTensorOrder.
func (c *checkpoint) sortOrder() {
	c.order = c.order[:0]
	for n := range c.entries {
		c.order = append(c.order, n)
	}
	sort.Slice(c.order, func(i, j int) bool {
		bi, ri := tensorRank(c.order[i])
		bj, rj := tensorRank(c.order[j])
		if bi != bj {
			return bi < bj
		}
		if ri != rj {
			return ri < rj
		}
		return c.order[i] < c.order[j]
	})
}

var globalOrder = []string{"token_embd.weight", "output_norm.weight", "output.weight"}

var blockTensorOrder = []string{
	"attn_norm.weight", "attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_q_norm.weight",
	"attn_k_norm.weight", "attn_gate.weight", "attn_output.weight", "ffn_norm.weight",
	"ffn_gate.weight", "ffn_up.weight", "ffn_down.weight", "ffn_gate_inp.weight", "exp_probs_b.bias",
	"ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight",
	"ffn_gate_shexp.weight", "ffn_up_shexp.weight", "ffn_down_shexp.weight",
}

// tensorRank returns (block, rank within block); globals have block -1.
func tensorRank(name string) (int, int) {
	if b, rest, ok := splitBlock(name); ok {
		for i, s := range blockTensorOrder {
			if s == rest {
				return b, i
			}
		}
		return b, len(blockTensorOrder)
	}
	for i, s := range globalOrder {
		if s == name {
			return -1, i
		}
	}
	return -1, len(globalOrder)
}

// splitBlock splits "blk.N.rest" into N and rest.
func splitBlock(name string) (int, string, bool) {
	rest, ok := strings.CutPrefix(name, "blk.")
	if !ok {
		return 0, "", false
	}
	num, rest, ok := strings.Cut(rest, ".")
	if !ok {
		return 0, "", false
	}
	b, err := strconv.Atoi(num)
	if err != nil || b < 0 || strconv.Itoa(b) != num {
		return 0, "", false
	}
	return b, rest, true
}
