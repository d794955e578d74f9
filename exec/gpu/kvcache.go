package gpu

import (
	"fmt"

	"lagc/cuda"
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

func (c KVLayer) check(op string) error {
	if err := checkPos(op, "cache kv heads", c.NKV, "cache head_dim", c.HeadDim, "cache slots", c.Slots); err != nil {
		return err
	}
	if c.Window < 0 || (c.Window > 0 && c.Slots != c.Window) {
		return fmt.Errorf("gpu.%s: a ring cache has Slots == Window (got %d slots, window %d)", op, c.Slots, c.Window)
	}
	return checkPtrs(op, "cache K", c.K, "cache V", c.V)
}

// KVAppend writes T tokens' keys and values into the cache at positions
// pos [T] (int32, device memory). Token t's k row is at kx + t*ld elements
// (v likewise from vx), NKV*HeadDim values: the k and v columns of a fused
// QKV output have ld = (nh+2*nkv)*d; 0 means NKV*HeadDim. A ring takes at
// most Window tokens per call (more would race for slots: use
// KVCompactRing after a prefill chunk's attention). The decode step
// appends before AttentionDecode reads the cache.
func (k *Kernels) KVAppend(s Queue, dt cuda.DType, c KVLayer, kx, vx cuda.DevicePtr, ld int, pos cuda.DevicePtr, T int) error {
	const op = "KVAppend"
	if c.Window > 0 && T > c.Window {
		return fmt.Errorf("gpu.%s: %d tokens into a ring of %d slots; use KVCompactRing", op, T, c.Window)
	}
	return k.kvStore(op, "kv_append", s, dt, c, kx, vx, ld, pos, T)
}

// KVCompactRing moves the last min(T, Window) tokens of a prefill chunk
// (laid out as for KVAppend, read linearly by AttentionPrefill) into a
// sliding layer's ring. Run it after the chunk's attention, which still
// reads the older keys of the ring.
func (k *Kernels) KVCompactRing(s Queue, dt cuda.DType, c KVLayer, kx, vx cuda.DevicePtr, ld int, pos cuda.DevicePtr, T int) error {
	const op = "KVCompactRing"
	if c.Window <= 0 {
		return fmt.Errorf("gpu.%s: the cache is linear (window 0); use KVAppend", op)
	}
	return k.kvStore(op, "kv_compact_ring", s, dt, c, kx, vx, ld, pos, T)
}

func (k *Kernels) kvStore(op, name string, s Queue, dt cuda.DType, c KVLayer, kx, vx cuda.DevicePtr, ld int, pos cuda.DevicePtr, T int) error {
	if err := checkDT(op, dt); err != nil {
		return err
	}
	if err := c.check(op); err != nil {
		return err
	}
	if err := checkPos(op, "T", T); err != nil {
		return err
	}
	row := c.NKV * c.HeadDim
	if ld == 0 {
		ld = row
	}
	if ld < row {
		return fmt.Errorf("gpu.%s: row stride %d is below %d kv heads x %d channels", op, ld, c.NKV, c.HeadDim)
	}
	if err := checkPtrs(op, "k", kx, "v", vx, "pos", pos); err != nil {
		return err
	}
	kn, err := k.op("kvcache.cu", name, []cuda.DType{dt})
	if err != nil {
		return fmt.Errorf("gpu.%s: %w", op, err)
	}
	const threads = 256
	bx := uint32(ceilDiv(row, threads))
	var err2 error
	if name == "kv_append" {
		if T > 65535 {
			return fmt.Errorf("gpu.%s: %d tokens exceed the 65535 of one launch", op, T)
		}
		err2 = s.Launch(kn, cuda.Dim(bx, uint32(T)), cuda.Dim(threads), 0,
			int32(T), int32(c.NKV), int32(c.HeadDim), int32(c.Window), int32(c.Slots), pos,
			kx, vx, int64(ld), int64(ld), c.K, c.V)
	} else {
		keep := min(T, c.Window)
		if keep > 65535 {
			return fmt.Errorf("gpu.%s: a window of %d exceeds the 65535 tokens of one launch", op, keep)
		}
		err2 = s.Launch(kn, cuda.Dim(bx, uint32(keep)), cuda.Dim(threads), 0,
			int32(T), int32(c.NKV), int32(c.HeadDim), int32(c.Window), pos,
			kx, vx, int64(ld), int64(ld), c.K, c.V)
	}
	if err2 != nil {
		return fmt.Errorf("gpu.%s: %w", op, err2)
	}
	return nil
}
