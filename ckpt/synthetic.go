package ckpt

import (
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"runtime"
	"strings"
	"sync"

	"lagc/config"
	"lagc/quant"
)

// synthetic is a Checkpoint of random weights made on demand.
type synthetic struct {
	cfg     *config.Config
	name    string
	tensors []TensorInfo
	index   map[string]int
	seed    uint64
}

// Synthetic returns a checkpoint of cfg whose tensors (names, types and
// shapes given) hold random values made on demand by quant.Random:
// quantised blocks directly, with scales that keep each matrix's values
// within ±1/sqrt(columns) (norm weights near 1, biases small), as the
// GPU's synthetic weights are. The same seed gives the same bytes. For
// benchmarks of checkpoints without real weights (lagc convert
// --synthetic); WriteGGUF streams it with bounded memory.
func Synthetic(cfg *config.Config, name string, tensors []TensorInfo, seed uint64) (Checkpoint, error) {
	s := &synthetic{cfg: cfg, name: name, index: map[string]int{}, seed: seed}
	for _, t := range tensors {
		if !t.DType.CanRandom() {
			return nil, fmt.Errorf("synthetic %s: no random blocks of type %s", t.Name, t.DType)
		}
		n, err := numElements(t.Shape)
		if err != nil {
			return nil, fmt.Errorf("synthetic %s: %w", t.Name, err)
		}
		if err := checkRows(t.Shape, t.DType); err != nil {
			return nil, fmt.Errorf("synthetic %s: %w", t.Name, err)
		}
		if t.Size, err = t.DType.Bytes(n); err != nil {
			return nil, fmt.Errorf("synthetic %s: %w", t.Name, err)
		}
		if _, dup := s.index[t.Name]; dup {
			return nil, fmt.Errorf("synthetic: %s given twice", t.Name)
		}
		s.index[t.Name] = len(s.tensors)
		s.tensors = append(s.tensors, t)
	}
	return s, nil
}

func (s *synthetic) Config() *config.Config   { return s.cfg }
func (s *synthetic) Format() string           { return "synthetic" }
func (s *synthetic) Path() string             { return s.name }
func (s *synthetic) Metadata() map[string]any { return nil }
func (s *synthetic) Source(string) string     { return "synthetic" }
func (s *synthetic) Close() error             { return nil }

func (s *synthetic) Tensors() []TensorInfo { return append([]TensorInfo(nil), s.tensors...) }

func (s *synthetic) Tensor(name string) (TensorInfo, bool) {
	i, ok := s.index[name]
	if !ok {
		return TensorInfo{}, false
	}
	return s.tensors[i], true
}

func (s *synthetic) lookup(name string) (TensorInfo, error) {
	t, ok := s.Tensor(name)
	if !ok {
		return t, fmt.Errorf("no tensor %q in %s", name, s.name)
	}
	return t, nil
}

// magnitude is what a tensor's values are spread around, by its role.
func magnitude(t TensorInfo) (offset, scale float32) {
	switch {
	case strings.HasSuffix(t.Name, "norm.weight"):
		return 1, 0.1
	case strings.HasSuffix(t.Name, ".bias"):
		return 0, 0.01
	case strings.HasPrefix(t.Name, "token_embd"):
		return 0, 1
	case len(t.Shape) >= 2:
		return 0, float32(1 / math.Sqrt(float64(t.Shape[len(t.Shape)-1])))
	}
	return 0, 1
}

// syntheticChunk is about the bytes made at once per core (rounded down
// to whole blocks of the tensor's type).
const syntheticChunk = 16 << 20

// chunk fills dst with chunk k of t's bytes. Each chunk has its own seed,
// so the bytes do not depend on how chunks are spread over cores.
func (s *synthetic) chunk(t TensorInfo, k int64, dst []byte) error {
	h := fnv.New64a()
	h.Write([]byte(t.Name))
	seed := s.seed*0x9e3779b97f4a7c15 ^ h.Sum64() ^ uint64(k)*0xd1b54a32d192ed03
	off, scale := magnitude(t)
	return quant.Random(t.DType, dst, seed, off, scale)
}

func chunkBytes(t TensorInfo) int64 {
	bb := int64(t.DType.BlockBytes())
	return max(syntheticChunk/bb, 1) * bb
}

// stream writes t's bytes to w, made on all cores a few chunks at a time.
func (s *synthetic) stream(w io.Writer, t TensorInfo) error {
	cb := chunkBytes(t)
	n := (t.Size + cb - 1) / cb
	par := int64(runtime.GOMAXPROCS(0))
	bufs := make([][]byte, par)
	for k0 := int64(0); k0 < n; k0 += par {
		var wg sync.WaitGroup
		errs := make([]error, par)
		for j := int64(0); j < par && k0+j < n; j++ {
			size := min(cb, t.Size-(k0+j)*cb)
			if int64(cap(bufs[j])) < size {
				bufs[j] = make([]byte, cb)
			}
			bufs[j] = bufs[j][:size]
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[j] = s.chunk(t, k0+j, bufs[j])
			}()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return fmt.Errorf("%s: %w", t.Name, err)
		}
		for j := int64(0); j < par && k0+j < n; j++ {
			if _, err := w.Write(bufs[j]); err != nil {
				return err
			}
		}
	}
	return nil
}

// Raw makes the whole tensor (WriteGGUF streams it instead).
func (s *synthetic) Raw(name string) ([]byte, error) {
	t, err := s.lookup(name)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, t.Size)
	cb := chunkBytes(t)
	for k := int64(0); int64(len(out)) < t.Size; k++ {
		part := out[len(out) : len(out)+int(min(cb, t.Size-int64(len(out))))]
		if err := s.chunk(t, k, part); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		out = out[:len(out)+len(part)]
	}
	return out, nil
}

func (s *synthetic) ReadF32(name string) ([]float32, error) {
	t, err := s.lookup(name)
	if err != nil {
		return nil, err
	}
	raw, err := s.Raw(name)
	if err != nil {
		return nil, err
	}
	out := make([]float32, t.Elements())
	if err := decodeInto(out, raw, t.DType); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return out, nil
}
