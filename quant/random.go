package quant

import (
	"encoding/binary"
	"fmt"
	"math"
)

// randomScales says where a type's blocks keep their f16 scales, and the
// scale d (and min, where there is one) that spreads the block's values
// over about ±1 for a random block: d at dAt, min at mAt (-1: none), as
// multiples of the wanted magnitude. A min is set so that the values'
// mean is about zero (E[d*sc*q] = E[dmin*m]): a common offset in every
// weight adds the same direction to every token's hidden state, layer
// after layer, until all tokens look alike and a router sends them all to
// the same experts (a synthetic Q4_K model routed 2048 tokens to 10 of
// 256 experts before its mins were halved).
type randomScales struct {
	dAt, mAt int
	d, m     float32
}

var randomLayouts = map[Type]randomScales{
	Q8_0:   {0, -1, 1. / 127, 0},        // d*q, q in [-128,127]
	Q4_0:   {0, -1, 1. / 8, 0},          // d*(q-8), q in [0,15]
	Q4_1:   {0, 2, 2. / 15, -1},         // d*q + m
	Q5_0:   {0, -1, 1. / 16, 0},         // d*(q-16), q in [0,31]
	Q5_1:   {0, 2, 2. / 31, -1},         // d*q + m
	Q2_K:   {80, 82, 1. / 45, 1. / 30},  // d*sc*q - dmin*m, sc and m 4-bit, q 2-bit
	Q3_K:   {108, -1, 1. / 128, 0},      // d*(sc-32)*(q-4), sc 6-bit
	Q4_K:   {0, 2, 1. / 945, 1. / 126},  // d*sc*q - dmin*m, sc and m 6-bit, q 4-bit
	Q5_K:   {0, 2, 1. / 1953, 1. / 126}, // q 5-bit
	Q6_K:   {208, -1, 1. / 4096, 0},     // d*sc*(q-32), sc int8
	IQ4_NL: {0, -1, 1. / 127, 0},        // d*kvalues[q], kvalues in [-127,113]
	IQ4_XS: {0, -1, 1. / 4064, 0},       // d*(ls-32)*kvalues[q], ls 6-bit
	F32:    {-1, -1, 0, 0},
	F16:    {-1, -1, 0, 0},
	BF16:   {-1, -1, 0, 0},
}

// CanRandom reports whether Random makes blocks of t.
func (t Type) CanRandom() bool { _, ok := randomLayouts[t]; return ok }

// Random fills dst with n = len(dst)/BlockBytes blocks of t that hold
// random values of magnitude about scale (float types: uniform in
// offset±scale), for synthetic checkpoints. Quantised blocks are made
// directly, random bits with their scales set (no float quantisation): any
// bits are valid quants, and the scales keep every value finite. The same
// seed gives the same bytes.
func Random(t Type, dst []byte, seed uint64, offset, scale float32) error {
	l, ok := randomLayouts[t]
	if !ok {
		return fmt.Errorf("random blocks: type %s is not supported", t)
	}
	bb := t.BlockBytes()
	if len(dst)%bb != 0 {
		return fmt.Errorf("random blocks: %d bytes are not whole %s blocks of %d", len(dst), t, bb)
	}
	r := splitmix{seed}
	switch t {
	case F32:
		for i := 0; i+4 <= len(dst); i += 4 {
			binary.LittleEndian.PutUint32(dst[i:], math.Float32bits(offset+scale*r.unit()))
		}
		return nil
	case F16, BF16:
		conv := F32ToF16
		if t == BF16 {
			conv = F32ToBF16
		}
		for i := 0; i+2 <= len(dst); i += 2 {
			binary.LittleEndian.PutUint16(dst[i:], conv(offset+scale*r.unit()))
		}
		return nil
	}
	r.fill(dst)
	for b := 0; b < len(dst); b += bb {
		blk := dst[b : b+bb]
		// jitter each block's scale by 0.75..1.25 so blocks differ
		j := 0.75 + float32(blk[bb-1])/512
		binary.LittleEndian.PutUint16(blk[l.dAt:], F32ToF16(scale*l.d*j))
		if l.mAt >= 0 {
			binary.LittleEndian.PutUint16(blk[l.mAt:], F32ToF16(scale*l.m))
		}
	}
	return nil
}

// splitmix is SplitMix64: fast, and good enough for synthetic weights.
type splitmix struct{ s uint64 }

func (r *splitmix) next() uint64 {
	r.s += 0x9e3779b97f4a7c15
	z := r.s
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// unit is uniform in [-1, 1).
func (r *splitmix) unit() float32 { return float32(r.next()>>40)/(1<<23) - 1 }

func (r *splitmix) fill(b []byte) {
	i := 0
	for ; i+8 <= len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], r.next())
	}
	if i < len(b) {
		var t [8]byte
		binary.LittleEndian.PutUint64(t[:], r.next())
		copy(b[i:], t[:])
	}
}
