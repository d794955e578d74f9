package cpu

import (
	"fmt"
	"lagc/config"
)

// KVCache holds one layer's keys and values, [slot, NKV, HeadDim] each.
// A full-attention layer (Window 0) keeps every position linearly, growing
// its buffers as needed up to MaxPos; a sliding layer keeps a ring of Window
// slots, position p in slot p % Window, which is exactly what its queries
// can see.
type KVCache struct {
	NKV, HeadDim int
	Window       int // 0: linear; > 0: ring of Window slots
	MaxPos       int // positions must be < MaxPos (the context length)
	k, v         []float32
	n            int // positions 0..n-1 have been written
}

// NewKVCache returns an empty cache for nkv heads of headDim channels.
// window 0 makes a linear cache, window > 0 a ring; maxPos is the context.
// Memory is taken as positions arrive, never more than the positions seen
// (or, for a ring, its window) need.
func NewKVCache(nkv, headDim, window, maxPos int) (*KVCache, error) {
	if err := checkDims("NewKVCache", dim{"nkv", nkv}, dim{"head_dim", headDim}, dim{"max positions", maxPos}); err != nil {
		return nil, err
	}
	if window < 0 {
		return nil, fmt.Errorf("cpu.NewKVCache: window = %d must not be negative", window)
	}
	if prod(nkv, headDim) < 0 {
		return nil, fmt.Errorf("cpu.NewKVCache: %d kv heads x %d channels is too large", nkv, headDim)
	}
	return &KVCache{NKV: nkv, HeadDim: headDim, Window: window, MaxPos: maxPos}, nil
}

// NewCaches returns one cache per layer of cfg: a ring of sliding_window
// slots for sliding layers, a linear cache for full layers, each accepting
// positions below maxPos (<= 0: cfg.MaxPositionEmbeddings).
func NewCaches(cfg *config.Config, maxPos int) ([]*KVCache, error) {
	if maxPos <= 0 {
		maxPos = cfg.MaxPositionEmbeddings
	}
	caches := make([]*KVCache, cfg.NumLayers)
	for l := range caches {
		w := 0
		if cfg.IsSliding(l) {
			w = cfg.SlidingWindow
		}
		c, err := NewKVCache(cfg.NumKVHeads, cfg.HeadDim, w, maxPos)
		if err != nil {
			return nil, fmt.Errorf("layer %d: %w", l, err)
		}
		caches[l] = c
	}
	return caches, nil
}

// Len returns the number of positions written (the next position to append).
func (c *KVCache) Len() int { return c.n }

// Reset empties the cache, keeping its memory.
func (c *KVCache) Reset() { c.n = 0 }

// Truncate keeps positions 0..n-1 and forgets the rest, so that the next
// append starts at n (reusing a prompt prefix the cache already holds). A
// linear cache can go back anywhere. A ring can go back only while the
// window before n is intact: to Len-1, or anywhere before its first
// wrap-around (Len <= Window).
func (c *KVCache) Truncate(n int) error {
	if err := c.canTruncate(n); err != nil {
		return err
	}
	c.n = n
	return nil
}

func (c *KVCache) canTruncate(n int) error {
	if n < 0 || n > c.n {
		return fmt.Errorf("cannot truncate a cache of %d positions to %d", c.n, n)
	}
	if c.Window > 0 && n < c.n-1 && c.n > c.Window {
		return fmt.Errorf("a sliding-window cache of %d positions (window %d) cannot go back to position %d", c.n, c.Window, n)
	}
	return nil
}

// canAppend reports whether positions p0.. may be written next. A linear
// cache accepts any p0 <= Len (rewriting from p0 discards later positions).
// A ring accepts p0 = Len, or Len-1: from any earlier p0 the positions its
// queries need have already been overwritten.
func (c *KVCache) canAppend(p0, count int) error {
	if p0 < 0 {
		return fmt.Errorf("position %d is negative", p0)
	}
	if last := p0 + count - 1; last >= c.MaxPos {
		return fmt.Errorf("position %d is beyond the context length %d", last, c.MaxPos)
	}
	if p0 > c.n {
		return fmt.Errorf("position %d leaves a gap: the cache holds positions 0..%d", p0, c.n-1)
	}
	if prod(c.slotsFor(p0+count), c.NKV, c.HeadDim) < 0 {
		return fmt.Errorf("a cache of %d positions is too large", p0+count)
	}
	if c.Window > 0 && p0 < c.n-1 {
		return fmt.Errorf("position %d: a sliding-window cache cannot go back past position %d", p0, c.n-1)
	}
	return nil
}

// slotsFor returns the slots that positions below n occupy.
func (c *KVCache) slotsFor(n int) int {
	if c.Window > 0 {
		return min(n, c.Window)
	}
	return n
}

// grow makes room for positions below n (n <= MaxPos, checked by
// canAppend), doubling so that decode appends stay cheap. A ring reaches its
// full size before its first wrap-around, so rows never move after one.
func (c *KVCache) grow(n int) {
	row := c.NKV * c.HeadDim
	need := c.slotsFor(n)
	if len(c.k) >= need*row {
		return
	}
	slots := min(max(need, 2*len(c.k)/row, 16), c.slotsFor(c.MaxPos))
	k := make([]float32, slots*row)
	v := make([]float32, slots*row)
	copy(k, c.k)
	copy(v, c.v)
	c.k, c.v = k, v
}

func (c *KVCache) slot(p int) int {
	if c.Window > 0 {
		return p % c.Window
	}
	return p
}

// keyRow and valueRow return the stored vectors of kv head h at position p.
func (c *KVCache) keyRow(p, h int) []float32 {
	o := (c.slot(p)*c.NKV + h) * c.HeadDim
	return c.k[o : o+c.HeadDim]
}

func (c *KVCache) valueRow(p, h int) []float32 {
	o := (c.slot(p)*c.NKV + h) * c.HeadDim
	return c.v[o : o+c.HeadDim]
}

// store writes T tokens' k and v [T,NKV,HeadDim] at positions p0..p0+T-1
// (validated by the caller) and marks them as the newest.
func (c *KVCache) store(k, v []float32, p0, T int) {
	row := c.NKV * c.HeadDim
	c.grow(p0 + T)
	first := 0
	if c.Window > 0 && T > c.Window {
		first = T - c.Window // earlier tokens would be overwritten anyway
	}
	for t := first; t < T; t++ {
		o := c.slot(p0+t) * row
		copy(c.k[o:o+row], k[t*row:(t+1)*row])
		copy(c.v[o:o+row], v[t*row:(t+1)*row])
	}
	c.n = p0 + T
}
