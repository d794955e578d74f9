package cpu

import (
	"fmt"
	"math"
	"strings"
	"testing"
)

// TestBatchAttentionEqualsAlone: sequences of different lengths, decode rows
// and prefill chunks in one call give the bits each gets alone, and leave
// each cache as a call of its own would.
func TestBatchAttentionEqualsAlone(t *testing.T) {
	const nh, nkv, d = 4, 2, 8
	scale := float32(1 / math.Sqrt(d))
	for _, window := range []int{0, 5} {
		t.Run(fmt.Sprintf("window%d", window), func(t *testing.T) {
			// Per sequence: positions already cached, rows in this step.
			seqs := []struct{ cached, rows int }{{0, 7}, {12, 1}, {3, 1}, {9, 4}, {0, 1}}
			var alone [][]float32
			var batch []AttnSeq
			var q, k, v []float32
			var pos []int32
			aloneCaches := make([]*KVCache, len(seqs))
			for s, sq := range seqs {
				hist := sq.cached + sq.rows
				hq := randSlice(uint64(100+s), hist*nh*d, 1.5)
				hk := randSlice(uint64(200+s), hist*nkv*d, 1.5)
				hv := randSlice(uint64(300+s), hist*nkv*d, 1)
				mk := func() *KVCache {
					c, err := NewKVCache(nkv, d, window, 64)
					if err != nil {
						t.Fatal(err)
					}
					if sq.cached > 0 {
						runChunks(t, c, hq, hk, hv, sq.cached, nh, nkv, d, window, []int{1})
					}
					return c
				}
				ca, cb := mk(), mk()
				p := make([]int32, sq.rows)
				for i := range p {
					p[i] = int32(sq.cached + i)
				}
				out := make([]float32, sq.rows*nh*d)
				tq, tk, tv := hq[sq.cached*nh*d:], hk[sq.cached*nkv*d:], hv[sq.cached*nkv*d:]
				if err := Attention(out, tq, tk, tv, p, sq.rows, nh, nkv, d, window, scale, ca); err != nil {
					t.Fatal(err)
				}
				alone, aloneCaches[s] = append(alone, out), ca
				batch = append(batch, AttnSeq{Rows: sq.rows, Cache: cb})
				q, k, v = append(q, tq...), append(k, tk...), append(v, tv...)
				pos = append(pos, p...)
			}
			T := len(pos)
			for _, threads := range []int{0, 1} {
				withThreads(threads, func() {
					caches := make([]AttnSeq, len(batch))
					for i, b := range batch {
						cc := *b.Cache
						cc.k, cc.v = append([]float32(nil), b.Cache.k...), append([]float32(nil), b.Cache.v...)
						caches[i] = AttnSeq{Rows: b.Rows, Cache: &cc}
					}
					out := make([]float32, T*nh*d)
					if err := BatchAttention(out, q, k, v, pos, T, nh, nkv, d, window, scale, caches); err != nil {
						t.Fatal(err)
					}
					r := 0
					for s, a := range alone {
						requireBitwise(t, fmt.Sprintf("threads %d, sequence %d", threads, s), out[r*nh*d:r*nh*d+len(a)], a)
						r += seqs[s].rows
						got, want := caches[s].Cache, aloneCaches[s]
						if got.Len() != want.Len() {
							t.Fatalf("sequence %d: cache length %d, alone %d", s, got.Len(), want.Len())
						}
						lo := 0
						if window > 0 {
							lo = max(0, got.Len()-window)
						}
						for p := lo; p < got.Len(); p++ {
							requireBitwise(t, fmt.Sprintf("sequence %d cached key %d", s, p), got.keyRow(p, 1), want.keyRow(p, 1))
						}
					}
				})
			}
		})
	}
}

func TestBatchAttentionErrors(t *testing.T) {
	const nh, nkv, d = 2, 1, 4
	q := make([]float32, 3*nh*d)
	kv := make([]float32, 3*nkv*d)
	out := make([]float32, 3*nh*d)
	c1, _ := NewKVCache(nkv, d, 0, 100)
	c2, _ := NewKVCache(nkv, d, 0, 100)
	for _, tc := range []struct {
		name string
		pos  []int32
		seqs []AttnSeq
		want string
	}{
		{"shared cache", []int32{0, 1, 0}, []AttnSeq{{2, c1}, {1, c1}}, "share a KV cache"},
		{"too few rows", []int32{0, 0, 0}, []AttnSeq{{1, c1}, {1, c2}}, "the sequences have 2 rows, the step 3"},
		{"too many rows", []int32{0, 1, 0}, []AttnSeq{{2, c1}, {2, c2}}, "has 2 rows; 1 of the 3 rows are left"},
		{"no rows", []int32{0, 1, 0}, []AttnSeq{{0, c1}, {3, c2}}, "has 0 rows"},
		{"gap inside a sequence", []int32{0, 2, 0}, []AttnSeq{{2, c1}, {1, c2}}, "consecutive"},
		{"gap in the cache", []int32{0, 1, 4}, []AttnSeq{{2, c1}, {1, c2}}, "gap"},
	} {
		err := BatchAttention(out, q, kv, kv, tc.pos, 3, nh, nkv, d, 0, 1, tc.seqs)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one mentioning %q", tc.name, err, tc.want)
		}
		if c1.Len() != 0 || c2.Len() != 0 {
			t.Fatalf("%s: a failed call wrote the caches", tc.name)
		}
	}
}

// TestKVCacheTruncate: where a cache can go back to, and that continuing
// from there gives the bits of a sequence that never went further.
func TestKVCacheTruncate(t *testing.T) {
	const nh, nkv, d, P = 2, 1, 8, 12
	scale := float32(1 / math.Sqrt(d))
	q := randSlice(51, P*nh*d, 1.5)
	k := randSlice(52, P*nkv*d, 1.5)
	v := randSlice(53, P*nkv*d, 1)
	for _, tc := range []struct {
		window, length, to int
		ok                 bool
	}{
		{0, 12, 0, true}, {0, 12, 7, true}, {0, 12, 12, true}, {0, 12, 13, false}, {0, 12, -1, false},
		{4, 12, 11, true}, {4, 12, 12, true}, {4, 12, 10, false}, {4, 12, 3, false},
		{12, 12, 2, true}, {12, 12, 0, true}, // nothing wrapped yet
		{5, 6, 4, false}, {5, 6, 5, true}, {5, 5, 1, true},
	} {
		name := fmt.Sprintf("window %d, length %d, to %d", tc.window, tc.length, tc.to)
		c, _ := NewKVCache(nkv, d, tc.window, 64)
		runChunks(t, c, q, k, v, tc.length, nh, nkv, d, tc.window, []int{5})
		err := c.Truncate(tc.to)
		if (err == nil) != tc.ok {
			t.Errorf("%s: error %v, want ok=%v", name, err, tc.ok)
			continue
		}
		if !tc.ok {
			if c.Len() != tc.length {
				t.Errorf("%s: a refused truncation changed the length to %d", name, c.Len())
			}
			continue
		}
		if c.Len() != tc.to {
			t.Fatalf("%s: length %d", name, c.Len())
		}
		// Feed tc.to..P-1 and compare with one uninterrupted run.
		fresh, _ := NewKVCache(nkv, d, tc.window, 64)
		want := runChunks(t, fresh, q, k, v, P, nh, nkv, d, tc.window, []int{1})
		n := P - tc.to
		if n == 0 {
			continue
		}
		out := make([]float32, n*nh*d)
		pos := make([]int32, n)
		for i := range pos {
			pos[i] = int32(tc.to + i)
		}
		if err := Attention(out, q[tc.to*nh*d:], k[tc.to*nkv*d:], v[tc.to*nkv*d:], pos, n, nh, nkv, d, tc.window, scale, c); err != nil {
			t.Fatalf("%s: continuing: %v", name, err)
		}
		requireBitwise(t, name, out, want[tc.to*nh*d:])
	}
}
