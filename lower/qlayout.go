package lower

import (
	"fmt"

	"lagc/quant"
)

// Device layouts of block-quantised matrices (cuda/kernels/quant.cu has the
// byte-level description). Every block is split into a body the kernels
// stream with 16-byte loads and a small head in a plane of its own: q8_0
// into int8 values and f16 scales, q6_k into 208-byte bodies and f16
// scales, iq4_xs into 128-byte quant bodies and 8-byte heads, q4_k and q5_k
// into bodies that start with their eight 6-bit scales and mins unpacked
// to bytes (the decode kernels would otherwise unpack them for every 32
// weights) and (d, dmin) heads.

// QuantLayoutVersion versions the device layouts below: bump it whenever
// RepackQuant writes different bytes, so that weight cache entries of the
// old layout are not used.
const QuantLayoutVersion = 1

// QuantKernelTypes are the types with GEMV kernels, in ggml order.
var QuantKernelTypes = []quant.Type{quant.Q8_0, quant.Q4_K, quant.Q5_K, quant.Q6_K, quant.IQ4_XS}

// HasQuantKernels reports whether t has GEMV kernels.
func HasQuantKernels(t quant.Type) bool {
	for _, k := range QuantKernelTypes {
		if k == t {
			return true
		}
	}
	return false
}

func align256(n int64) int64 { return (n + 255) &^ 255 }

// qsplit says how a type is split: each block's first `body` bytes after
// `skip` go to the body array, the `head` bytes at `headAt` to the head
// array (stored after the bodies at a 256-byte boundary).
type qsplit struct{ body, headAt, head int }

func quantSplit(t quant.Type) (qsplit, bool) {
	switch t {
	case quant.Q8_0: // d, qs[32]
		return qsplit{body: 32, headAt: 0, head: 2}, true
	case quant.Q6_K: // ql[128], qh[64], scales[16], d
		return qsplit{body: 208, headAt: 208, head: 2}, true
	case quant.IQ4_XS: // d, scales_h, scales_l[4], qs[128]
		return qsplit{body: 128, headAt: 0, head: 8}, true
	case quant.Q4_K, quant.Q5_K: // d, dmin, scales[12], (qh[32]), qs[128]: body rewritten by kBody
		return qsplit{body: t.BlockBytes(), headAt: 0, head: 4}, true
	}
	return qsplit{}, false
}

// QuantDeviceBytes is the size of a [rows, K] matrix of type t in its
// device layout.
func QuantDeviceBytes(t quant.Type, rows, K int) (int64, error) {
	if !HasQuantKernels(t) {
		return 0, fmt.Errorf("no GPU kernels for %s weights", t)
	}
	be := int64(t.BlockElems())
	if rows <= 0 || K <= 0 || int64(K)%be != 0 {
		return 0, fmt.Errorf("%s matrix [%d, %d]: rows must be positive and K a multiple of %d", t, rows, K, be)
	}
	blocks := int64(rows) * int64(K) / be
	sp, ok := quantSplit(t)
	if !ok {
		return blocks * int64(t.BlockBytes()), nil
	}
	return align256(blocks*int64(sp.body)) + blocks*int64(sp.head), nil
}

// RepackQuant writes the ggml blocks of a [rows, K] matrix (src, row-major)
// into dst in the device layout (dst has QuantDeviceBytes bytes).
func RepackQuant(t quant.Type, rows, K int, src, dst []byte) error {
	return RepackQuantParts(t, rows, K, [][]byte{src}, dst)
}

// RepackQuantParts is RepackQuant of a matrix whose blocks are the
// concatenation of parts (each whole blocks), without joining them first.
func RepackQuantParts(t quant.Type, rows, K int, parts [][]byte, dst []byte) error {
	n, err := QuantDeviceBytes(t, rows, K)
	if err != nil {
		return err
	}
	blocks := int64(rows) * int64(K) / int64(t.BlockElems())
	bb := int64(t.BlockBytes())
	var have int64
	for _, p := range parts {
		if int64(len(p))%bb != 0 {
			return fmt.Errorf("repacking %s [%d, %d]: a part of %d bytes is not whole blocks of %d", t, rows, K, len(p), bb)
		}
		have += int64(len(p))
	}
	if have != blocks*bb || int64(len(dst)) != n {
		return fmt.Errorf("repacking %s [%d, %d]: have %d source and %d destination bytes, need %d and %d",
			t, rows, K, have, len(dst), blocks*bb, n)
	}
	sp, ok := quantSplit(t)
	if !ok {
		at := 0
		for _, p := range parts {
			at += copy(dst[at:], p)
		}
		return nil
	}
	heads := align256(blocks * int64(sp.body))
	kq := t == quant.Q4_K || t == quant.Q5_K
	b := int64(0) // block index in the whole matrix
	for _, src := range parts {
		for o := int64(0); o < int64(len(src)); o, b = o+bb, b+1 {
			blk := src[o : o+bb]
			copy(dst[heads+b*int64(sp.head):], blk[sp.headAt:sp.headAt+sp.head])
			if kq {
				kBody(dst[b*int64(sp.body):(b+1)*int64(sp.body)], blk)
				continue
			}
			body := blk[:sp.headAt]
			if sp.headAt == 0 {
				body = blk[sp.head:]
			}
			copy(dst[b*int64(sp.body):], body[:sp.body])
		}
	}
	return nil
}

// kBody writes a q4_k or q5_k block's device body: its scales[8] and
// mins[8] as bytes (ggml's get_scale_min_k4 applied to the 12 packed
// bytes at 4..15), then the block's bytes from 16 on (qh, qs).
func kBody(dst, blk []byte) {
	q := blk[4:16]
	for j := 0; j < 8; j++ {
		if j < 4 {
			dst[j], dst[8+j] = q[j]&63, q[j+4]&63
		} else {
			dst[j] = q[j+4]&0xF | (q[j-4]>>6)<<4
			dst[8+j] = q[j+4]>>4 | (q[j]>>6)<<4
		}
	}
	copy(dst[16:], blk[16:])
}
