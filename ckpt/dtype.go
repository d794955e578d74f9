package ckpt

import (
	"fmt"
	"lagc/quant"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"
)

// DType is a tensor element type: ggml's numbering, so GGUF tensor infos
// map onto it directly. Safetensors dtypes map onto the three float types.
type DType = quant.Type

// The ggml types, as named by package quant.
const (
	F32    = quant.F32
	F16    = quant.F16
	BF16   = quant.BF16
	Q4_0   = quant.Q4_0
	Q4_1   = quant.Q4_1
	Q5_0   = quant.Q5_0
	Q5_1   = quant.Q5_1
	Q8_0   = quant.Q8_0
	Q2_K   = quant.Q2_K
	Q3_K   = quant.Q3_K
	Q4_K   = quant.Q4_K
	Q5_K   = quant.Q5_K
	Q6_K   = quant.Q6_K
	IQ4_NL = quant.IQ4_NL
	IQ4_XS = quant.IQ4_XS
)

// ParseDType parses "f32", "f16" or "bf16" (the float types a writer can emit).
func ParseDType(s string) (DType, error) {
	switch s {
	case "f32", "F32", "float32":
		return F32, nil
	case "f16", "F16", "float16":
		return F16, nil
	case "bf16", "BF16", "bfloat16":
		return BF16, nil
	}
	return 0, fmt.Errorf("unknown dtype %q: want f32, f16 or bf16", s)
}

// numElements multiplies dims, rejecting negative dims and overflow.
func numElements(shape []int) (int64, error) {
	n := int64(1)
	for _, d := range shape {
		if d < 0 {
			return 0, fmt.Errorf("negative dimension in shape %v", shape)
		}
		if d != 0 && n > math.MaxInt64/4/int64(d) {
			return 0, fmt.Errorf("shape %v is too large", shape)
		}
		n *= int64(d)
	}
	return n, nil
}

// decodeInto converts raw elements of type d into dst, split across cores
// at block boundaries.
func decodeInto(dst []float32, raw []byte, d DType) error {
	if !d.Supported() {
		return fmt.Errorf("element type %s is not supported (lagc reads %s)", d, strings.Join(quant.Names(), ", "))
	}
	if _, err := d.RowBytes(len(dst)); err != nil {
		return err
	}
	be, bb := d.BlockElems(), d.BlockBytes()
	return parallelBlocks(len(dst)/be, (1<<16)/be, func(lo, hi int) error {
		return quant.Dequantize(d, dst[lo*be:hi*be], raw[lo*bb:hi*bb])
	})
}

// encode converts float32 values to type d, appending to dst.
func encode(dst []byte, src []float32, d DType) ([]byte, error) {
	n, err := d.RowBytes(len(src))
	if err != nil {
		return dst, err
	}
	off := len(dst)
	dst = slices.Grow(dst, int(n))[:off+int(n)]
	out := dst[off:]
	be, bb := d.BlockElems(), d.BlockBytes()
	grain := 1 << 16
	if d.Quantized() {
		grain = 64 // a block takes microseconds to quantise
	}
	err = parallelBlocks(len(src)/be, grain, func(lo, hi int) error {
		return quant.Quantize(d, out[lo*bb:hi*bb], src[lo*be:hi*be])
	})
	return dst, err
}

// parallelBlocks splits [0, n) across cores in ranges of at least grain
// items and returns the first error.
func parallelBlocks(n, grain int, f func(lo, hi int) error) error {
	workers := runtime.GOMAXPROCS(0)
	if grain < 1 {
		grain = 1
	}
	if n < 2*grain || workers < 2 {
		return f(0, n)
	}
	workers = min(workers, n/grain)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	step := (n + workers - 1) / workers
	for lo := 0; lo < n; lo += step {
		hi := min(lo+step, n)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(lo, hi); err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return first
}

// checkRows rejects a quantised shape whose rows (innermost dimension) are
// not a whole number of blocks: ggml cannot address such rows.
func checkRows(shape []int, d DType) error {
	if be := d.BlockElems(); be > 1 && len(shape) > 0 && shape[len(shape)-1]%be != 0 {
		return fmt.Errorf("rows of %d are not a whole number of %s blocks of %d", shape[len(shape)-1], d, be)
	}
	return nil
}
