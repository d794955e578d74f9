package gpu

import (
	"os"
	"runtime"
	"testing"

	"lagc/ckpt"
	"lagc/cuda"
	"lagc/lower"
	"lagc/quant"
	"lagc/wcache"
)

// BenchmarkWeightStages: the host stages of loading one Laguna-S-2.1
// expert stack slice in Q4_K (32 experts of the down projection, [3072,
// 1024] each: 54 MiB of blocks, past any cache), one core each: repacking
// into the device layout (a cold load without the weight cache), hashing
// the source (a cold load with it, once per file), writing and reading
// back a cache entry (mmap and checksum: a warm load), and a plain copy
// of the bytes for scale. MB/s are of the stack's stored bytes.
//
//	go test ./exec/gpu -run XXX -bench WeightStages -benchtime 20x
func BenchmarkWeightStages(b *testing.B) {
	const experts, rows, K = 32, 3072, 1024
	n := experts * rows * K
	src := make([]byte, n/quant.Q4_K.BlockElems()*quant.Q4_K.BlockBytes())
	if err := quant.Random(quant.Q4_K, src, 1, 0, 0.03); err != nil {
		b.Fatal(err)
	}
	devBytes, err := lower.QuantDeviceBytes(quant.Q4_K, experts*rows, K)
	if err != nil {
		b.Fatal(err)
	}
	dst := make([]byte, devBytes)
	if err := lower.RepackQuant(quant.Q4_K, experts*rows, K, src, dst); err != nil {
		b.Fatal(err)
	}
	b.Run("repack", func(b *testing.B) {
		b.SetBytes(int64(len(src)))
		for b.Loop() {
			if err := lower.RepackQuant(quant.Q4_K, experts*rows, K, src, dst); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("hash", func(b *testing.B) {
		h := wcache.NewHasher("")
		b.SetBytes(int64(len(src)))
		for b.Loop() {
			if _, err := h.Sum([]ckpt.Extent{{Data: src}}); err != nil {
				b.Fatal(err)
			}
		}
	})
	c := wcache.Open(b.TempDir())
	key, err := wcache.KeyOf("bench")
	if err != nil {
		b.Fatal(err)
	}
	b.Run("cache-write", func(b *testing.B) {
		b.SetBytes(int64(len(src)))
		for b.Loop() {
			if err := c.Put(key, wcache.Meta{Name: "blk.1.ffn_down_exps.weight"}, dst); err != nil {
				b.Fatal(err)
			}
		}
	})
	if err := c.Put(key, wcache.Meta{Name: "blk.1.ffn_down_exps.weight"}, dst); err != nil {
		b.Fatal(err)
	}
	b.Run("cache-read", func(b *testing.B) {
		b.SetBytes(int64(len(src)))
		for b.Loop() {
			e, err := c.Get(key)
			if err != nil {
				b.Fatal(err)
			}
			if len(e.Data) != len(dst) {
				b.Fatal("short entry")
			}
			e.Close()
		}
	})
	// Other types of the Q4_K_M recipe (attention and shared expert
	// q8_0) and of llama-quantize's mixtures (q6_k), same shape.
	for _, t := range []quant.Type{quant.Q8_0, quant.Q6_K} {
		tsrc := make([]byte, n/t.BlockElems()*t.BlockBytes())
		quant.Random(t, tsrc, 1, 0, 0.03)
		nb, _ := lower.QuantDeviceBytes(t, experts*rows, K)
		tdst := make([]byte, nb)
		b.Run("repack-"+t.String(), func(b *testing.B) {
			b.SetBytes(int64(len(tsrc)))
			for b.Loop() {
				if err := lower.RepackQuant(t, experts*rows, K, tsrc, tdst); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	// A bf16 checkpoint's weight: read as float32, converted back to bf16
	// (what convertWeight does for float weights).
	bsrc := make([]byte, 2*n)
	quant.Random(quant.BF16, bsrc, 1, 0, 0.03)
	b.Run("convert-bf16", func(b *testing.B) {
		b.SetBytes(int64(len(bsrc)))
		f := make([]float32, n)
		for b.Loop() {
			if err := quant.Dequantize(quant.BF16, f, bsrc); err != nil {
				b.Fatal(err)
			}
			encode(f, cuda.BF16)
		}
	})
	b.Run("copy", func(b *testing.B) {
		b.SetBytes(int64(len(src)))
		for b.Loop() {
			copy(dst, src)
		}
	})
}

// BenchmarkHostLoad: the host side of loading a whole checkpoint
// (LAGC_LOAD_MODEL, e.g. one written by lagc convert --synthetic) on all
// cores, the device copy replaced by a memcpy into one buffer: without the
// weight cache, with a cold cache (entries written) and a warm one. The
// checkpoint's pages are in the page cache after the first run.
//
//	LAGC_LOAD_MODEL=s21-2l.gguf go test ./exec/gpu -run XXX -bench HostLoad -benchtime 3x
func BenchmarkHostLoad(b *testing.B) {
	path := os.Getenv("LAGC_LOAD_MODEL")
	if path == "" {
		b.Skip("set LAGC_LOAD_MODEL to a checkpoint")
	}
	ck, err := ckpt.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer ck.Close()
	p := lowerCheckpoint(b, ck)
	dev := make([]byte, p.WeightBytes)
	sink := func(i int, d []byte) error {
		copy(dev[p.Weights[i].Offset:], d)
		return nil
	}
	dir := b.TempDir()
	cfg := func(cache bool) loadConfig {
		c := loadConfig{workers: runtime.GOMAXPROCS(0), budget: defaultLoadBudget(), off: "off"}
		if cache {
			c.cache, c.hasher = wcache.Open(dir), wcache.NewHasher(wcache.SourcesDir(dir))
		}
		return c
	}
	run := func(name string, cache bool, before func()) {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(p.WeightBytes)
			var st LoadStats
			for b.Loop() {
				b.StopTimer()
				before()
				b.StartTimer()
				var err error
				if st, err = hostLoad(p, ck, cfg(cache), sink); err != nil {
					b.Fatal(err)
				}
			}
			b.Logf("%s", st.Summary())
		})
	}
	run("no-cache", false, func() {})
	run("cache-cold", true, func() { os.RemoveAll(dir) })
	run("cache-warm", true, func() {})
}
