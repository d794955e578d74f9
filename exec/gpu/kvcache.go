package gpu

import (
	"fmt"

	"lagc/cuda"
	"lagc/lower"
)

// KVLayer is one layer's KV cache on the device: K and V, each
// [Slots, NKV, HeadDim] of the activation dtype, row-major. A full-attention
// layer (Window 0) is linear: position p in slot p, Slots = the context
// length. A sliding layer is a ring of Window slots: position p in slot
// p % Window, exactly what its queries can see (p-Window < j <= p). This is
// the layout of exec/cpu.KVCache.
//
// The kernels cannot report a position past the context; the executor
// checks pos < Slots (linear) before it queues a step. Out-of-range writes
// are dropped on the device rather than corrupting memory.
type KVLayer struct {
	K, V         cuda.DevicePtr
	NKV, HeadDim int
	Window       int // 0: linear
	Slots        int // maxPos for a linear cache, Window for a ring
}

// NewKVLayer describes a cache at k and v (each KVLayer.Bytes long) for nkv
// heads of d channels: a ring of window slots when window > 0, else linear
// over maxPos positions.
func NewKVLayer(k, v cuda.DevicePtr, nkv, d, window, maxPos int) KVLayer {
	slots := maxPos
	if window > 0 {
		slots = window
	}
	return KVLayer{K: k, V: v, NKV: nkv, HeadDim: d, Window: window, Slots: slots}
}

// Bytes is the size of each of K and V for dtype dt.
func (c KVLayer) Bytes(dt cuda.DType) int64 {
	return int64(c.Slots) * int64(c.NKV) * int64(c.HeadDim) * int64(dt.Size())
}

func (c KVLayer) cache() lower.Cache {
	return lower.Cache{K: ptr(c.K), V: ptr(c.V), NKV: c.NKV, HeadDim: c.HeadDim, Window: c.Window, Slots: c.Slots}
}

// KVAppend writes T tokens' keys and values into the cache at positions
// pos [T] (int32, device memory). Token t's k row is at kx + t*ld elements
// (v likewise from vx), NKV*HeadDim values: the k and v columns of a fused
// QKV output have ld = (nh+2*nkv)*d; 0 means NKV*HeadDim. A ring takes at
// most Window tokens per call (more would race for slots: use
// KVCompactRing after a prefill chunk's attention). The decode step
// appends before AttentionDecode reads the cache.
func (k *Kernels) KVAppend(s Queue, dt cuda.DType, c KVLayer, kx, vx cuda.DevicePtr, ld int, pos cuda.DevicePtr, T int) error {
	return k.on(s).one(lower.KVAppend(kvStore(dt, c, kx, vx, ld, pos, T)))
}

// KVCompactRing moves the last min(T, Window) tokens of a prefill chunk
// (laid out as for KVAppend, read linearly by AttentionPrefill) into a
// sliding layer's ring. Run it after the chunk's attention, which still
// reads the older keys of the ring.
func (k *Kernels) KVCompactRing(s Queue, dt cuda.DType, c KVLayer, kx, vx cuda.DevicePtr, ld int, pos cuda.DevicePtr, T int) error {
	return k.on(s).one(lower.KVCompactRing(kvStore(dt, c, kx, vx, ld, pos, T)))
}

func kvStore(dt cuda.DType, c KVLayer, kx, vx cuda.DevicePtr, ld int, pos cuda.DevicePtr, T int) lower.KVStoreArgs {
	return lower.KVStoreArgs{DType: dt.String(), Cache: c.cache(), K: ptr(kx), V: ptr(vx), LD: ld, Pos: ptr(pos), T: T}
}

// errNull reports a null pointer a launcher was given.
func errNull(op, what string) error { return fmt.Errorf("gpu.%s: %s must not be null", op, what) }
