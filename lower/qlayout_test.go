package lower

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"lagc/quant"
)

// TestRepackQuant: the device layout keeps every byte of the ggml blocks:
// split types unsplit give the blocks back; q4_k and q5_k bodies hold the
// blocks' scales and mins unpacked, which, packed again as ggml packs
// them, give the 12 bytes back.
func TestRepackQuant(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, qt := range QuantKernelTypes {
		rows, K := 3, 512
		src := make([]byte, rows*K/qt.BlockElems()*qt.BlockBytes())
		for i := range src {
			src[i] = byte(r.Uint32())
		}
		n, err := QuantDeviceBytes(qt, rows, K)
		if err != nil {
			t.Fatal(err)
		}
		dst := make([]byte, n)
		if err := RepackQuant(qt, rows, K, src, dst); err != nil {
			t.Fatal(err)
		}
		sp, _ := quantSplit(qt)
		bb := qt.BlockBytes()
		nb := len(src) / bb
		heads := int(align256(int64(nb) * int64(sp.body)))
		for b := 0; b < nb; b++ {
			blk := src[b*bb : (b+1)*bb]
			head := dst[heads+b*sp.head : heads+(b+1)*sp.head]
			body := dst[b*sp.body : (b+1)*sp.body]
			var back []byte
			switch {
			case qt == quant.Q4_K || qt == quant.Q5_K:
				back = append(append(append([]byte(nil), head...), packK4(body[:16])...), body[16:]...)
			case sp.headAt == 0:
				back = append(append([]byte(nil), head...), body...)
			default:
				back = append(append([]byte(nil), body...), head...)
			}
			if !bytes.Equal(back, blk) {
				t.Fatalf("%s: block %d differs after repacking", qt, b)
			}
		}
		if err := RepackQuant(qt, rows, K+1, src, dst); err == nil {
			t.Errorf("%s: a row width off the block size was accepted", qt)
		}
	}
}

// packK4 packs 8 scales and 8 mins (6 bits each) into ggml's 12 bytes.
func packK4(sm []byte) []byte {
	q := make([]byte, 12)
	for j := 0; j < 8; j++ {
		sc, m := sm[j], sm[8+j]
		if j < 4 {
			q[j] |= sc & 63
			q[j+4] |= m & 63
		} else {
			q[j+4] |= sc&0xF | (m&0xF)<<4
			q[j-4] |= (sc >> 4) << 6
			q[j] |= (m >> 4) << 6
		}
	}
	return q
}
